"""Failure attribution: which module a wrong or unanswered question failed in, read from its trace.

Deterministic rules over the step records, the evidence items (accepted and rejected results with
their data), the Answer and the gold record; the first rule that applies wins. "Contains the gold"
means: for numbers, some number in the text equals the gold number; for Game of 24, the text holds
a valid expression; for MATH, the scorer accepts the text; for text answers, the SQuAD-normalised
gold (or an alias) occurs as whole words (yes/no golds never count: they say nothing about evidence).

A run needs attribution when it is wrong, or right but not ``answered``.

Right but not answered (the answer text is right, the status is not):
  R1 budget     ``<limit>``          the run hit a budget limit; the answer came from the forced last call
  R2 planner    ``repeated_plan``    the run stopped on a repeated plan
  R3 verifier   ``conflict``         the run stopped on conflicting evidence
  R4 generator  ``uncited``          the answer cites no accepted evidence (so it could not be verified)
  R5 planner    ``no_progress``      anything else (e.g. too many rejections in a row)

Wrong:
  W1 system     ``run_error``        the run ended with an error (a bug, an unreachable backend)
  W2 generator  ``wrong_answer``     accepted evidence contains the gold, the answer is still wrong
                ``uncited``          ... and the answer cites no accepted evidence
  W3 verifier   ``false_reject``     a rejected result contained the gold (and no accepted one did)
  W4 verifier   ``false_accept``     the answer used accepted evidence that lacks the gold: it cites
                                     it, or (uncited) its extracted value appears in it
  W5 planner    ``wrong_tool``       a call was denied (tool not allowed), or tools were called but none
                                     of those the question needs (search when a corpus is available,
                                     else python or generalist)
  W6 executor   ``bad_arguments``    every tool call failed, one with invalid arguments
                ``tool_error``       every tool call failed (error or timeout)
  W7 planner    ``repeated_plan``    the run stopped on a repeated plan
  W8 budget     ``<limit>``          the run hit a budget limit (steps, tokens, calls, wall_clock, ...)
  W9 planner    ``invalid_plan``     no tool was called and some planner output was invalid
  W10 generator ``wrong_answer``     a system without a planner (direct) answered wrong
  W11 planner   ``missing_step``     otherwise: it answered before any evidence established the answer

The monolithic baseline keeps no evidence items (its observations stay in its context), so W2-W4
never apply to it; its single model's turns are recorded under the planner role.
"""

from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass
from fractions import Fraction
from typing import Any, Iterable, Mapping, Sequence

from tasks.eval.metrics import executor_status, is_non_answer
from tasks.eval.scorers import answer_type_of, normalize_answer, parse_number, score_question

ACCEPTED_STATUSES = frozenset({"accepted", "estimate", "superseded", "expired"})
"""Evidence statuses that mean the Verifier accepted the result at some point."""

_STEP_ITEM = re.compile(r"^step-(\d+)$")
_NUMBER = re.compile(r"(?<![\w.])-?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?(?:\s*/\s*\d+)?")


@dataclass(frozen=True)
class Evidence:
    """One tool result as the run's memory kept it, as text."""

    step_id: int
    tool: str
    status: str  # accepted | estimate | superseded | expired | rejected
    text: str
    failure_type: str | None = None
    reason: str = ""

    @property
    def accepted(self) -> bool:
        return self.status in ACCEPTED_STATUSES


@dataclass(frozen=True)
class Attribution:
    """The module a question failed in, the rule's cause, the step it points at and why."""

    module: str
    cause: str
    step_id: int | None = None
    detail: str = ""

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


# --------------------------------------------------------------------------- evidence from a run


def evidence_text(content: Any) -> str:
    """A memory item's content as plain text (passages, printed output, model text, else JSON)."""
    if isinstance(content, dict) and set(content) == {"data", "error"}:  # a rejected result
        inner = evidence_text(content["data"]) if content["data"] is not None else ""
        return inner + (f"\nerror: {content['error']}" if content.get("error") else "")
    if isinstance(content, dict):
        if isinstance(content.get("passages"), list):
            return "\n".join(f"[{p.get('doc_id', '')}] {p.get('title', '')}: {p.get('text', '')}"
                             for p in content["passages"] if isinstance(p, dict))
        if "stdout" in content:
            return str(content.get("stdout") or "").strip()
        if isinstance(content.get("text"), str):
            return content["text"]
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    return json.dumps(content, default=str)


def evidence_from_memory(memory: Any) -> list[Evidence]:
    """Accepted (all statuses) and Verifier-rejected results of an EvolvingMemory, by step."""
    out = [Evidence(i.step_id, i.provenance.tool, i.status.value, evidence_text(i.content),
                    i.failure_type.value if i.failure_type else None, i.reason) for i in memory.all_items()]
    for i in memory.debug_trace():
        if _STEP_ITEM.match(i.id):  # a judged tool result, not an invalid or refused plan
            out.append(Evidence(i.step_id, i.provenance.tool, "rejected", evidence_text(i.content),
                                i.failure_type.value if i.failure_type else None, i.reason))
    return sorted(out, key=lambda e: e.step_id)


# --------------------------------------------------------------------------- gold in text


def _kind(question: Mapping) -> str:
    bench = question.get("benchmark")
    if bench == "world" or not bench:
        return str(question.get("answer_type") or "text")
    try:
        return answer_type_of(bench)
    except KeyError:
        return str(question.get("answer_type") or "text")


def _golds(question: Mapping) -> list[str]:
    golds = [question.get("answer"), *(question.get("aliases") or [])]
    return [str(g) for g in golds if g is not None and str(g).strip()]


def _numbers_in(text: str) -> list[Fraction]:
    out = []
    for m in _NUMBER.finditer(text):
        s = m.group(0).replace(",", "").replace(" ", "")
        try:
            out.append(Fraction(s))
        except (ValueError, ZeroDivisionError):
            continue
    return out


def contains_gold(text: str, question: Mapping) -> bool:
    """Whether ``text`` states the gold answer (see the module docstring for the rule per answer type)."""
    if not text or not text.strip():
        return False
    kind = _kind(question)
    if kind == "number":
        golds = [g for g in (parse_number(x) for x in _golds(question)) if g is not None]
        return any(n == g for n in _numbers_in(text) for g in golds)
    if kind in ("game24", "math"):
        return score_question(question, text).correct
    words = f" {normalize_answer(text)} "
    for g in _golds(question):
        ng = normalize_answer(g)
        if ng and ng not in ("yes", "no") and f" {ng} " in words:
            return True
    return False


def expected_tools(tools: Iterable[str]) -> set[str]:
    """The tools a question needs: search when a corpus is available, else python or generalist."""
    tools = set(tools)
    return {"search"} if "search" in tools else tools & {"python", "generalist"}


# --------------------------------------------------------------------------- the rules


def _value(r: Any, key: str) -> Any:
    v = r.get(key) if isinstance(r, Mapping) else getattr(r, key, None)
    return getattr(v, "value", v)


def attribute(*, question: Mapping, answer: Any, records: Sequence[Any], evidence: Sequence[Evidence],
              correct: bool, tools: Iterable[str] = ("search", "python", "generalist"),
              extracted: str | None = None) -> Attribution | None:
    """The module a run failed in (None when it is right and answered). ``answer`` is an Answer (or a
    mapping with text, status, stop_reason, budget_limit, citations); ``records`` its step records;
    ``extracted`` what the scorer read out of the answer, used to find the evidence an uncited answer used."""
    text = str(_value(answer, "text") or "")
    status = _value(answer, "status")
    stop = _value(answer, "stop_reason")
    limit = _value(answer, "budget_limit")
    cites = [int(_value(c, "step_id")) for c in (_value(answer, "citations") or [])]
    accepted = [e for e in evidence if e.accepted]
    accepted_ids = {e.step_id for e in accepted}
    cited_accepted = [e for e in accepted if e.step_id in cites]

    if correct and status == "answered":
        return None
    if correct:
        if stop == "budget_exhausted":
            return Attribution("budget", str(limit or "budget"), None, "right answer, but only from the last call after the limit")
        if stop == "repeated_plan":
            return Attribution("planner", "repeated_plan", None, "right answer, but the run stopped on a repeated plan")
        if stop == "conflicting_evidence":
            return Attribution("verifier", "conflict", None, "right answer, but the run stopped on conflicting evidence")
        if not any(s in accepted_ids for s in cites):
            return Attribution("generator", "uncited", None, "right answer without a citation of accepted evidence")
        return Attribution("planner", "no_progress", None, f"right answer, stopped with {stop}")

    if stop == "error":
        return Attribution("system", "run_error", None, "the run ended with an error")
    with_gold = [e for e in accepted if contains_gold(e.text, question)]
    if with_gold:
        e = with_gold[0]
        if not any(s in accepted_ids for s in cites):
            return Attribution("generator", "uncited", e.step_id, f"step {e.step_id} ({e.tool}) held the answer; the answer cites no accepted evidence")
        return Attribution("generator", "wrong_answer", e.step_id, f"step {e.step_id} ({e.tool}) held the answer, accepted; the answer is wrong")
    rejected_gold = [e for e in evidence if e.status == "rejected" and contains_gold(e.text, question)]
    if rejected_gold:
        e = rejected_gold[0]
        return Attribution("verifier", "false_reject", e.step_id,
                           f"step {e.step_id} ({e.tool}) held the answer but was rejected ({e.failure_type}: {e.reason})"[:300])
    if not is_non_answer(text):
        used = cited_accepted
        if not used and extracted and extracted.strip():
            needle = normalize_answer(extracted)
            used = [e for e in accepted if needle and needle in normalize_answer(e.text)]
        if used:
            e = used[0]
            return Attribution("verifier", "false_accept", e.step_id,
                               f"the answer used step {e.step_id} ({e.tool}), accepted though it lacks the right answer")

    execs = [r for r in records if _value(r, "role") == "executor"]
    statuses = [executor_status(_value(r, "detail")) for r in execs]
    if "denied" in statuses:
        r = execs[statuses.index("denied")]
        return Attribution("planner", "wrong_tool", _value(r, "step_id"), f"tool {_value(r, 'tool')!r} is not allowed")
    need = expected_tools(tools)
    used_tools = {_value(r, "tool") for r in execs}
    if execs and need and not used_tools & need:
        return Attribution("planner", "wrong_tool", _value(execs[0], "step_id"),
                           f"used {sorted(used_tools)}; the question needs {sorted(need)}")
    if execs and all(s != "ok" for s in statuses):
        bad = [r for r in execs if "invalid arguments" in str(_value(r, "detail"))]
        r = (bad or execs)[0]
        return Attribution("executor", "bad_arguments" if bad else "tool_error", _value(r, "step_id"),
                           f"every tool call failed; first: {_value(r, 'detail')}"[:300])
    if stop == "repeated_plan":
        return Attribution("planner", "repeated_plan", None, "the run stopped on a repeated plan")
    if stop == "budget_exhausted":
        return Attribution("budget", str(limit or "budget"), None, f"the run hit its {limit or 'budget'} limit")
    planners = [r for r in records if _value(r, "role") == "planner"]
    if not execs and any(_value(r, "failure_type") in ("schema", "model_error") for r in planners):
        r = next(r for r in planners if _value(r, "failure_type") in ("schema", "model_error"))
        return Attribution("planner", "invalid_plan", _value(r, "step_id"), f"invalid plan: {_value(r, 'detail')}"[:300])
    if not planners:
        return Attribution("generator", "wrong_answer", None, "answered wrong without tools")
    return Attribution("planner", "missing_step", None,
                       f"stopped ({stop}) before any evidence established the answer" + ("" if execs else "; no tool was called"))
