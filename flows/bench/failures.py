"""Where a wrong answer was lost, read from the evidence a run kept (its judged steps), not from the system's own
verdicts: the failure attribution of the tables names the module whose verdict let a wrong answer through; this names
the point on the path from question to answer where the gold value stopped being there.

For every finished question of an evaluation directory (``OUT/<benchmark>/seed<K>`` of ``flows.bench.tables run``,
or any ``agentflow eval --out``), one of:

``correct``
    the answer scored correct.
``no_evidence``
    wrong, and no step was accepted: nothing reached memory (a stop at no_progress, or an answer from nothing).
``gold_not_in_evidence``
    wrong, and no accepted step's evidence holds the gold (or an alias): the search or the program never produced it,
    or the Planner answered before the hop that would have (the Planner's and the tools' share).
``gold_not_offered``
    the gold is in the accepted evidence, but not among the answer spans the Generator may pick from
    (``generator.answer=span``; tasks/modules/spans.py): span extraction lost it.
``wrong_pick``
    the gold was among the spans offered and the Generator chose another value (or, in free mode, wrote another).
``unanswerable``
    wrong on a question without an answer (the world's ``expected_status`` uncertain or needs_review): it should
    have stopped, and there is no gold value to trace.

Only systems that keep judged steps (modular, modular-nomem) can be located; the others' rows are counted as
``not_located``. Gold containment is token-bounded on normalised text (lower case, no articles, punctuation or possessive 's);
whether a span is the gold is decided by the benchmark's own scorer.

    python -m flows.bench.failures runs/tables/hotpotqa/seed0 [--systems modular] [--json failures.json]
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

from tasks.checks.injection import passage_text
from tasks.contracts import JudgedStep
from tasks.eval.scorers import normalize_answer, score_question
from tasks.learn.reward import answerable, gold_doc_ids
from tasks.memory import as_evidence
from tasks.modules.spans import answer_spans

PLACES = ("correct", "no_evidence", "gold_not_in_evidence", "gold_not_offered", "wrong_pick", "unanswerable")


class FailuresError(ValueError):
    """A directory that is not an evaluation with judged steps; the message says which."""


class _Item:
    """What answer_spans reads of a memory item: its content."""

    def __init__(self, content: Any):
        self.content = content


def _rows(folder: Path) -> list[dict[str, Any]]:
    return [r for f in sorted(folder.glob("part-*.parquet")) for r in pq.read_table(f).to_pylist()]


def result_rows(root: Path) -> list[dict[str, Any]]:
    """The finished questions' result rows of an evaluation directory (its parts, so a run in progress reads too)."""
    results = root / "parts" / "results"
    if not results.is_dir():
        raise FailuresError(f"{root}: not an evaluation directory (no parts/results)")
    return _rows(results)


def judged_rows(root: Path) -> list[dict[str, Any]]:
    """Every judged step's row (system, seed, question_id, accepted, step as JSON); none for a run that kept none."""
    judged = root / "parts" / "judged"
    return _rows(judged) if judged.is_dir() else []


def judged_steps(rows: list[dict[str, Any]], system: str) -> dict[tuple[int, str], list[JudgedStep]]:
    """One system's judged steps (accepted or not; `rows` from judged_rows) by (seed, question id), in part order."""
    out: dict[tuple[int, str], list[JudgedStep]] = {}
    for r in rows:
        if r["system"] == system:
            out.setdefault((int(r["seed"]), r["question_id"]), []).append(JudgedStep.model_validate_json(r["step"]))
    return out


def _evidence_text(content: Any) -> str:
    if isinstance(content, dict):
        parts = [passage_text(p) for p in content.get("passages") or [] if isinstance(p, dict)]
        parts += [str(content[k]) for k in ("stdout", "text") if isinstance(content.get(k), str)]
        return " ".join(parts)
    return str(content or "")


def _golds(record: dict[str, Any]) -> list[str]:
    golds = [record.get("answer")] + list(record.get("aliases") or record.get("answer_aliases") or [])
    return [str(g) for g in golds if g is not None and str(g).strip()]


_POSSESSIVE = re.compile(r"(?<=\w)['’]s\b")


def _norm(text: str) -> str:
    return normalize_answer(_POSSESSIVE.sub("", text))  # "Rockefeller's Committee" holds "Rockefeller"


def contains(text: str, gold: str) -> bool:
    """`gold` occurs in `text` as whole tokens, after normalising both (lower case, no articles, punctuation or
    possessive 's)."""
    g = _norm(gold)
    return bool(g) and f" {g} " in f" {_norm(text)} "


def locate_one(record: dict[str, Any], correct: bool, accepted: list[JudgedStep], span_mode: bool = True,
               max_spans: int = 80) -> str:
    """The place one question's answer was lost, from its accepted steps (in step order)."""
    if correct:
        return "correct"
    if not answerable(record):
        return "unanswerable"
    if not accepted:
        return "no_evidence"
    contents = [as_evidence(s.result, s.verdict).data for s in accepted]
    if not any(contains(_evidence_text(c), g) for c in contents for g in _golds(record)):
        return "gold_not_in_evidence"
    if span_mode:
        spans = answer_spans([_Item(c) for c in contents], max_spans, str(record.get("question") or ""))
        if not any(score_question(record, s).correct for s in spans):
            return "gold_not_offered"
    return "wrong_pick"


def locate(run_dir: str | Path, systems: list[str] | None = None) -> dict[str, Any]:
    """Per system: how many finished questions ended at each place, and each question's place."""
    root = Path(run_dir)
    rows = result_rows(root)
    steps: dict[tuple[str, int, str], list[JudgedStep]] = {}
    judged_n: Counter = Counter()
    judged = judged_rows(root)
    records = question_records(root, judged)
    for r in judged:
        key = (r["system"], int(r["seed"]), r["question_id"])
        judged_n[key] += 1
        if str(r.get("accepted")) == "True":
            steps.setdefault(key, []).append(JudgedStep.model_validate_json(r["step"]))
    kept = {(system, seed) for system, seed, _ in judged_n}
    settings = _span_settings(root)
    out: dict[str, Any] = {}
    for row in rows:
        system, seed, qid = row["system"], int(row["seed"]), row["question_id"]
        if systems and system not in systems:
            continue
        mine = out.setdefault(system, {"places": Counter(), "questions": {}})
        record = records.get(qid) or row_record(row)
        accepted = sorted(steps.get((system, seed, qid), []), key=lambda s: s.step_id)
        if row["correct"]:
            place = "correct"
        elif (system, seed) not in kept:
            place = "not_located"
        else:
            span_mode, max_spans = settings.get(f"{system}.seed{seed}", (True, 80))
            place = locate_one(record, False, accepted, span_mode, max_spans)
        mine["places"][place] += 1
        mine["questions"][f"{seed}:{qid}"] = {"place": place, "judged": judged_n[(system, seed, qid)],
                                               "accepted": len(accepted), **_gold_docs(record, accepted)}
    if not out:
        raise FailuresError(f"{root}: no finished question" + (f" of {', '.join(systems)}" if systems else ""))
    return {s: {"places": dict(v["places"]), "evidence_lost": evidence_lost(v["questions"]),
                "questions": v["questions"]} for s, v in sorted(out.items())}


def _gold_docs(record: dict[str, Any], accepted: list[JudgedStep]) -> dict[str, int]:
    """How many of the question's gold documents (when it names them) the accepted evidence held."""
    gold = set(gold_doc_ids(record))
    if not gold:
        return {}
    seen = {str(p.get("doc_id")) for s in accepted if isinstance(s.result.data, dict)
            for p in s.result.data.get("passages") or [] if isinstance(p, dict)}
    return {"gold_docs_found": len(gold & seen), "gold_docs_needed": len(gold)}


def evidence_lost(questions: dict[str, dict[str, Any]]) -> dict[str, int]:
    """Of the questions whose gold never reached the evidence: how many were answered after one accepted step (and
    after one judged step: the Planner's first step was its last), and how many lacked a gold document."""
    lost = [q for q in questions.values() if q["place"] == "gold_not_in_evidence"]
    return {"questions": len(lost),
            "after_one_accepted_step": sum(q["accepted"] == 1 for q in lost),
            "after_one_judged_step": sum(q["judged"] == 1 for q in lost),
            "naming_gold_documents": sum("gold_docs_needed" in q for q in lost),
            "some_gold_document_missing": sum(q.get("gold_docs_found", 0) < q.get("gold_docs_needed", 0)
                                              for q in lost)}


def prepared_records(root: Path) -> dict[str, dict[str, Any]]:
    """The question records (with gold and aliases) the evaluation prepared, by id; empty when not kept."""
    path = root / "data" / "questions.jsonl"
    if not path.is_file():
        return {}
    return {rec["id"]: rec for rec in map(json.loads, filter(str.strip, path.read_text().splitlines()))}


def question_records(root: Path, judged: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """The question records by id: the prepared ones, completed by those the judged steps carry (judged_rows)."""
    records = prepared_records(root)
    for r in judged:
        records.setdefault(r["question_id"], json.loads(r["question"]))
    return records


def row_record(row: dict[str, Any]) -> dict[str, Any]:
    """A question record read off a result row, for a question whose record was not kept."""
    return {"id": row["question_id"], "benchmark": row.get("benchmark"), "question": row.get("question"),
            "answer": row.get("gold")}


def _span_settings(root: Path) -> dict[str, tuple[bool, int]]:
    """Each (system, seed)'s generator.answer mode and max_spans, from the settings the evaluation stored."""
    import yaml

    out = {}
    for f in sorted((root / "settings").glob("*.yaml")) if (root / "settings").is_dir() else []:
        gen = (yaml.safe_load(f.read_text()) or {}).get("generator") or {}
        out[f.stem] = (gen.get("answer", "span") == "span", int(gen.get("max_spans", 80)))
    return out


def render(located: dict[str, Any]) -> str:
    cols = [*PLACES, "not_located"]
    used = [c for c in cols if any(v["places"].get(c) for v in located.values())]
    lines = ["| system | questions | " + " | ".join(used) + " |", "|---|---|" + "---|" * len(used)]
    for system, v in located.items():
        lines.append(f"| {system} | {sum(v['places'].values())} | "
                     + " | ".join(str(v["places"].get(c, 0)) for c in used) + " |")
    for system, v in located.items():
        e = v["evidence_lost"]
        if e["questions"]:
            lines.append(f"\n{system}: of {e['questions']} whose gold never reached the evidence, "
                         f"{e['after_one_accepted_step']} were answered after one accepted step "
                         f"({e['after_one_judged_step']} after one judged step)"
                         + (f"; {e['some_gold_document_missing']} of the {e['naming_gold_documents']} whose question "
                            "names gold documents lacked one of them" if e["naming_gold_documents"] else "") + ".")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m flows.bench.failures", description=__doc__.splitlines()[0])
    p.add_argument("runs", nargs="+", help="evaluation directories (OUT/<benchmark>/seed<K>)")
    p.add_argument("--systems", default="", help="comma-separated systems (default: every system of the run)")
    p.add_argument("--json", dest="json_out", default=None, help="also write each run's places and questions here")
    a = p.parse_args(argv)
    systems = [s.strip() for s in a.systems.split(",") if s.strip()] or None
    report = {}
    try:
        for run in a.runs:
            report[run] = locate(run, systems)
    except FailuresError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    for run, located in report.items():
        print(f"{run}\n\n{render(located)}\n")
    if a.json_out:
        Path(a.json_out).write_text(json.dumps(report, indent=1) + "\n")
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
