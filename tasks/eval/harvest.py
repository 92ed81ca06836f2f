"""Labeled verification cases harvested from real runs: every step a Verifier judged in a batch or an evaluation,
labeled by whether its value leads to the gold answer, and named by the error it really makes.

Labels: a step whose value is the gold answer: ``accept``. A step accepted into memory on a question answered
wrongly, whose value is neither the gold nor a value the gold's own solution passes through: ``reject``.
Everything else is ambiguous (an intermediate value, a step with no value, a rejected step that is not the
gold...): left out and counted by reason, never guessed.

``with_rejected``: steps the run's own Verifier rejected are labeled by the same value rule (on a wrongly answered
question, neither the gold nor an intermediate of its solution: reject). Without it the reject cases are only the
errors the run's Verifier let through, so a set harvested from runs of the Verifier under test shows it 100 % false
accepts by construction; with it they are every error the runs made, and a Verifier's false-accept rate on them is
its rate where the errors happen. Each case keeps ``verdict_in_run``. The categories of the rejects describe the error from
the step and the question alone (see `error_category`); ``correct`` is the category of every accept.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

from infra.runtime.storage import ResultStore
from tasks.learn.reward import answerable
from tasks.checks import explicit_claim, numbers_in, tokens
from tasks.checks.context import derived_claim
from tasks.checks.quantities import last_number, printed_operands, program_numbers, stated_quantities
from tasks.checks.text import canonical_number
from tasks.contracts import JudgedStep
from tasks.eval.scorers import score_question

ERROR_CATEGORIES = (
    "wrong_operation",     # python: uses the question's quantities, combines them wrongly
    "ignored_quantity",    # python: leaves out a quantity the question states
    "unsupported_number",  # python: prints a number no arithmetic over stated quantities or evidence produced
    "impossible_value",    # python: a negative count or amount, a fraction of a whole-number count
    "distractor_entity",   # search: the claim is about a near-namesake, not the entity asked about
    "stale_source",        # search: the claim cites a superseded (older) document
    "wrong_attribute",     # search: a gold document, but another property than the one asked
    "unsupported_claim",   # search: the value is not in the passage the claim cites
    "wrong_value",         # search: anything else
    "unverified_estimate",  # generalist: a model's own answer
)
CATEGORIES = ("correct", *ERROR_CATEGORIES)

_COUNT = re.compile(r"\bhow many\b", re.I)
_AMOUNT = re.compile(r"\b(how much|change|left|remain|cost|price|profit|earn|pay|spend|save|distance|long|far|tall|"
                     r"old|weigh|height|length|width|area|volume|speed|time|hours|minutes|days|total)\b", re.I)


class HarvestError(ValueError):
    """A run directory that holds no judged steps, or one that cannot be read; the message says which."""


@dataclass
class JudgedRow:
    """One judged step of one run of one question, with what the harvest needs to label it."""

    source: str               # the run directory (and system/seed for an evaluation)
    record: dict[str, Any]    # the question record with its gold answer
    step: JudgedStep
    answered_correctly: bool
    as_of: str | None


@dataclass
class Harvest:
    cases: list[dict[str, Any]] = field(default_factory=list)
    left_out: Counter = field(default_factory=Counter)  # reason -> steps
    steps: int = 0

    def counts(self) -> dict[str, int]:
        c = Counter(case["category"] for case in self.cases)
        return {k: c[k] for k in CATEGORIES if c[k]}


# --------------------------------------------------------------------------- reading runs


def _record_kind(record: dict[str, Any]) -> dict[str, Any]:
    """A record the scorers can dispatch on: a batch question carries no benchmark, so its gold decides."""
    if record.get("benchmark") or record.get("answer_type"):
        return record
    return {**record, "answer_type": "number" if last_number(str(record.get("answer") or "")) is not None else "text"}


def read_run(path: str | Path) -> list[JudgedRow]:
    """The judged steps of an evaluation directory (results + judged parts) or a batch run directory."""
    root = Path(path)
    if (root / "parts" / "judged").is_dir():
        return _read_eval(root)
    if (root / "judged").is_dir() and (root / "answers").is_dir():
        return _read_batch(root)
    raise HarvestError(f"{str(root)!r} holds no judged steps: give an `agentflow eval --out` directory or a batch "
                       "run directory (<batch --out>/<run id>) written since judged steps are kept")


def _rows(folder: Path) -> list[dict[str, Any]]:
    return [r for f in sorted(folder.glob("part-*.parquet")) for r in pq.read_table(f).to_pylist()]


def _read_eval(root: Path) -> list[JudgedRow]:
    results = {(r["system"], r["seed"], r["question_id"]): r for r in _rows(root / "parts" / "results")}
    out = []
    for r in _rows(root / "parts" / "judged"):
        done = results.get((r["system"], r["seed"], r["question_id"]))
        if done is None:  # a unit interrupted before its results row: not finished, not harvested
            continue
        out.append(JudgedRow(f"{root}:{r['system']}.s{r['seed']}", _record_kind(json.loads(r["question"])),
                             JudgedStep.model_validate_json(r["step"]), bool(done["correct"]), r["as_of"]))
    return out


def _read_batch(root: Path) -> list[JudgedRow]:
    store = ResultStore(str(root))
    answers = {r["task_id"]: r for r in store.read_table("answers").to_pylist()}
    out = []
    for r in store.read_table("judged").to_pylist():
        answer = answers.get(r["task_id"])
        if answer is None:
            continue
        record = _record_kind(json.loads(r["question"]))
        if record.get("answer") is None:  # no gold: nothing to label against
            continue
        correct = score_question(record, answer["answer"], status=answer["status"]).correct
        out.append(JudgedRow(str(root), record, JudgedStep.model_validate_json(r["step"]), correct, r["as_of"]))
    return out


# --------------------------------------------------------------------------- labels


def step_value(step: JudgedStep) -> str | None:
    """What the step asserts: its stated claim, else (python) its last printed line or (generalist) its text."""
    try:
        claim = explicit_claim(step.result) or derived_claim(step.plan, step.result)
    except ValueError:  # a malformed claim asserts nothing the harvest can score
        return None
    return claim.value if claim else None


def _solution_values(record: dict[str, Any]) -> set[Decimal]:
    """The values a worked solution passes through (GSM8K's <<a*b=c>> annotations and its stated numbers)."""
    text = str(record.get("solution") or "")
    return {n for n in numbers_in(tokens(text.replace("<<", " ").replace(">>", " ").replace("=", " = ")))}


def _world_path_entities(record: dict[str, Any]) -> set[str]:
    return {str(hop.get("entity")).lower() for hop in record.get("gold_path") or [] if hop.get("entity")}


def label(row: JudgedRow, with_rejected: bool = False) -> tuple[str | None, str]:
    """(label, category) for a step that can be labeled, else (None, the reason it is left out)."""
    value = step_value(row.step)
    if value is None:
        return None, "no_value"
    if score_question(row.record, value).correct:
        return "accept", "correct"
    if not row.step.verdict.accepted and not with_rejected:
        return None, "rejected_not_gold"
    if row.answered_correctly:
        return None, ("accepted" if row.step.verdict.accepted else "rejected") + "_on_a_correct_answer"
    if not answerable(row.record):
        return None, "question_expects_no_answer"
    number = last_number(value)
    if number is not None and number >= 0 and number in _solution_values(row.record):
        return None, "intermediate_value"
    if row.step.plan.tool == "search" and _gold_lookup(row):
        return None, "intermediate_lookup"
    return "reject", error_category(row)


def _gold_lookup(row: JudgedRow) -> bool:
    """A world search step that cites a gold document about an entity on the gold path: a plausible hop."""
    try:
        claim = explicit_claim(row.step.result)
    except ValueError:
        return False
    gold_docs = set(row.record.get("gold_doc_ids") or [])
    if claim is None or not gold_docs:
        return False
    return bool(set(claim.cites) & gold_docs) and claim.subject.lower() in _world_path_entities(row.record)


# --------------------------------------------------------------------------- what the error is


def error_category(row: JudgedRow) -> str:
    """Name the error of a step labeled reject, from the step and the question alone."""
    step, question = row.step, str(row.record.get("question") or "")
    tool = step.plan.tool
    if tool == "python":
        value = last_number(step_value(step) or "")
        code = str(step.plan.args.get("code") or "")
        if value is not None and (value < 0 and (_COUNT.search(question) or _AMOUNT.search(question))
                                  or value != value.to_integral_value() and _COUNT.search(question)):
            return "impossible_value"
        given = stated_quantities(question)
        used, arithmetic, _ = program_numbers(code)
        feeding = printed_operands(code)  # a quantity assigned but never reaching the printed value is not used
        if not arithmetic or (value is not None and not given and canonical_number(str(abs(value))) not in used):
            return "unsupported_number"
        if any(not any(way <= feeding for way in ways) for _, ways in given):
            return "ignored_quantity"
        return "wrong_operation"
    if tool == "search":
        try:
            claim = explicit_claim(step.result)
        except ValueError:
            claim = None
        if claim is None:
            return "wrong_value"
        distractors = {str(d.get("name", "")).lower() for d in row.record.get("distractors") or []}
        distractor_docs = {str(d.get("doc_id")) for d in row.record.get("distractors") or []}
        if claim.subject.lower() in distractors or set(claim.cites) & distractor_docs:
            return "distractor_entity"
        stale_docs = {str(s.get("doc_id")) if isinstance(s, dict) else str(s) for s in row.record.get("stale") or []}
        if set(claim.cites) & stale_docs:
            return "stale_source"
        cited = " ".join(str(p.get("text", "")) for p in (step.result.data or {}).get("passages", [])
                         if isinstance(p, dict) and str(p.get("doc_id")) in claim.cites)
        if claim.value.lower() not in cited.lower():
            return "unsupported_claim"
        if set(claim.cites) & set(row.record.get("gold_doc_ids") or []):
            return "wrong_attribute"
        return "wrong_value"
    return "unverified_estimate"


# --------------------------------------------------------------------------- cases


def case_of(row: JudgedRow, lab: str, category: str, index: int) -> dict[str, Any]:
    """A labeled case in verifier-eval's format; the Verifier sees the question, as it does in the loop."""
    step = row.step
    qid = str(row.record.get("id"))
    return {
        "id": f"h{index:05d}-{qid}-s{step.step_id}",
        "category": category,
        "source": row.source,
        "kind": step.plan.tool,
        "question": str(row.record.get("question") or ""),
        "question_seen": True,
        "gold": str(row.record.get("answer")),
        "as_of": row.as_of or "2025-01-01",
        "plan": step.plan.model_dump(mode="json"),
        "result": step.result.model_dump(mode="json"),
        "memory": [m.model_dump(mode="json") for m in step.view],
        "label": lab,
        "verdict_in_run": "accept" if step.verdict.accepted else "reject",
    }


def _same_step(row: JudgedRow) -> str:
    """What makes two judged steps the same case: the question, the step's tool and arguments, its raw result and
    the evidence the Verifier saw (modular and modular-nomem often make identical steps on the same seed)."""
    step = row.step
    r = step.result
    return json.dumps([str(row.record.get("id")), step.plan.tool, step.plan.args, r.status.value, r.data, r.error,
                       [[m.step_id, m.status.value, m.content] for m in step.view]], sort_keys=True, default=str)


def harvest(paths: list[str | Path], with_rejected: bool = False) -> Harvest:
    """Read every run, label every judged step; cases in run, question and step order."""
    out = Harvest()
    seen: set[str] = set()
    for path in paths:
        for row in read_run(path):
            out.steps += 1
            key = _same_step(row)
            if key in seen:  # another system or seed made the very same step: one case, not two
                out.left_out["duplicate_step"] += 1
                continue
            seen.add(key)
            lab, category = label(row, with_rejected)
            if lab is None:
                out.left_out[category] += 1
            else:
                out.cases.append(case_of(row, lab, category, len(out.cases) + 1))
    return out
