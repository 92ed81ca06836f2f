"""Verifier: judge a step with small named checks, in a fixed order, stopping at the first failure.

Mechanical checks run first and decide most cases; an LLM judge (a later slice) only gets what
they cannot decide. Each check returns a Check and, when it fails, the failure type the Planner
needs to correct course.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import jsonschema
from prefect import task
from prefect.cache_policies import NO_CACHE

from infra.settings import Settings
from tasks.contracts import (
    Check,
    FailureType,
    MemoryItem,
    NextAction,
    Plan,
    Result,
    ResultStatus,
    ToolCard,
    Verdict,
)
from tasks.tools import tool_cards


@dataclass(frozen=True)
class Failure:
    type: FailureType
    reason: str


CheckFn = Callable[[Plan, Result, ToolCard | None, list[MemoryItem]], tuple[Check, Failure | None]]

_STATUS_FAILURE = {
    ResultStatus.error: FailureType.tool_error,
    ResultStatus.timeout: FailureType.timeout,
    ResultStatus.denied: FailureType.denied,
}


def check_tool_status(plan: Plan, result: Result, card: ToolCard | None, view: list[MemoryItem]):
    exit_code = result.data.get("exit_code") if isinstance(result.data, dict) else None
    ok = result.status is ResultStatus.ok and exit_code in (None, 0)
    if ok:
        return Check(name="tool_status", passed=True, detail="ok"), None
    ftype = _STATUS_FAILURE.get(result.status, FailureType.tool_error)
    detail = result.error or f"exit code {exit_code}"
    if isinstance(result.data, dict) and result.data.get("stderr"):
        detail += f"; stderr tail: {result.data['stderr'][-300:]}"
    return Check(name="tool_status", passed=False, detail=detail), Failure(ftype, f"{plan.tool} {result.status.value}: {detail}")


def check_schema(plan: Plan, result: Result, card: ToolCard | None, view: list[MemoryItem]):
    if card is None:
        return Check(name="schema", passed=False, detail=f"no card for {plan.tool}"), Failure(FailureType.denied, f"unknown tool {plan.tool}")
    try:
        jsonschema.validate(plan.args, card.input_schema)
        jsonschema.validate(result.data, card.output_schema)
    except jsonschema.ValidationError as exc:
        where = "/".join(str(p) for p in exc.absolute_path) or "(root)"
        return Check(name="schema", passed=False, detail=f"{where}: {exc.message}"), Failure(FailureType.schema, f"malformed {plan.tool} record at {where}: {exc.message}")
    return Check(name="schema", passed=True, detail="plan args and result data match the tool card"), None


def _evidence_size(tool: str, data) -> int:
    if tool == "search":
        return sum(1 for p in data.get("passages", []) if p.get("text", "").strip())
    if tool == "python":
        return len(data.get("stdout", "").strip())
    if tool == "generalist":
        return len(data.get("text", "").strip())
    return 0


def check_evidence_present(plan: Plan, result: Result, card: ToolCard | None, view: list[MemoryItem]):
    size = _evidence_size(plan.tool, result.data or {})
    if size:
        return Check(name="evidence_present", passed=True, detail=f"{size} unit(s) of evidence"), None
    hint = {"search": "no passage matched the query", "python": "the program printed nothing"}.get(plan.tool, "empty output")
    return Check(name="evidence_present", passed=False, detail=hint), Failure(FailureType.empty_evidence, hint)


# Order matters: a tool failure explains a schema mismatch, not the other way round.
CHECKS: list[CheckFn] = [check_tool_status, check_schema, check_evidence_present]


def summarise(result: Result, limit: int = 300) -> str:
    data = result.data or {}
    if "passages" in data and data["passages"]:
        p = data["passages"][0]
        return f"{p.get('title', '')}: {p.get('text', '')}"[:limit]
    if "stdout" in data:
        return str(data["stdout"]).strip()[:limit]
    return str(data.get("text", ""))[:limit]


class Verifier:
    """Deterministic checks in order; the first decisive failure rejects the step."""

    def __init__(self, cards: dict[str, ToolCard], checks: list[CheckFn] | None = None):
        self.cards = cards
        self.checks = checks or CHECKS

    def verify(self, plan: Plan, result: Result, view: list[MemoryItem]) -> Verdict:
        card = self.cards.get(plan.tool)
        done: list[Check] = []
        for fn in self.checks:
            check, failure = fn(plan, result, card, view)
            done.append(check)
            if failure is not None:
                return Verdict(step_id=plan.step_id, accepted=False, checks=done, failure_type=failure.type,
                               reason=failure.reason, confidence=0.9, next_action=NextAction.replan)
        # Mechanical checks say the evidence is well-formed and present, not that it is true:
        # a model's own answer stays low-confidence.
        confidence = 0.3 if result.model else 0.6
        return Verdict(step_id=plan.step_id, accepted=True, checks=done, evidence=summarise(result),
                       confidence=confidence, reason="passed " + ", ".join(c.name for c in done),
                       next_action=NextAction.continue_)


@task(name="verify_step", retries=0, cache_policy=NO_CACHE, task_run_name="verify-{task_id}-step{plan.step_id}")
def verify_step(plan: Plan, result: Result, view: list[MemoryItem], task_id: str, settings: Settings) -> Verdict:
    """Judge one step's result against its plan and the accepted evidence."""
    return Verifier(tool_cards(settings)).verify(plan, result, view)
