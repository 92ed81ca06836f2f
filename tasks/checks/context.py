"""Verifier checks: small named functions, each answering one question about a step, run in a fixed order.

Every check takes a StepContext and returns an Outcome: its Check record and, when it fails, a
decisive Failure (the step is rejected, the Planner is told why and what to do), or an open question
(`undecided`) that only an LLM judge could settle. Checks never call a model; recomputation runs
programs only in the project's sandbox. Tool output is read as data: nothing in it is obeyed.

What a step claims: `Result.data["claim"]` (a contracts.Claim: subject, attribute, value, cites)
when the step states one; otherwise python results claim their last printed line and generalist
results their text (an uncited estimate); a search result without a claim is judged as evidence.

This module holds what every check shares: the Outcome a check returns, the StepContext it reads
and the claim a step states or implies.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Callable

from tasks.contracts import (
    Check,
    Claim,
    FailureType,
    MemoryItem,
    NextAction,
    Plan,
    Result,
    QuarantinedPassage,
    SupersededSentence,
    ToolCard,
)

# =============================================================================== outcomes


@dataclass(frozen=True)
class Failure:
    """A decisive failure: the step is rejected with this type, reason and next action."""

    type: FailureType
    reason: str
    next_action: NextAction = NextAction.replan


@dataclass
class Outcome:
    """What one check found."""

    check: Check
    failure: Failure | None = None
    undecided: str | None = None  # a question only a judge can settle
    supersedes: str | None = None  # an accepted memory item this step's newer source replaces
    superseded: list[SupersededSentence] = field(default_factory=list)  # older sentences of this result a newer one replaces
    quarantined: list[QuarantinedPassage] = field(default_factory=list)  # passages with instruction-like text, left out


def passed(name: str, detail: str) -> Outcome:
    return Outcome(Check(name=name, passed=True, detail=detail))


def failed(name: str, detail: str, ftype: FailureType, reason: str, next_action: NextAction = NextAction.replan) -> Outcome:
    return Outcome(Check(name=name, passed=False, detail=detail[:500]), Failure(ftype, reason[:600], next_action))


def undecided(name: str, question: str) -> Outcome:
    return Outcome(Check(name=name, passed=True, detail=f"undecided: {question}"[:500]), undecided=question)


# =============================================================================== the step under check

Rerun = Callable[[str], tuple[str, str, int | None]]  # code -> (status, stdout, exit_code)


@dataclass
class CheckOptions:
    """What the checks may use besides the step: configuration and the sandbox, never a model."""

    recompute: bool = True
    recompute_max_ms: float = 2000.0  # programs that ran longer are not run again
    rerun: Rerun | None = None  # runs a program in the sandbox; None: no recomputation
    max_source_age_days: float | None = None
    evidence_ttl_s: float | None = None
    on_conflict: NextAction = NextAction.replan
    supersede_in_result: bool = True


@dataclass
class StepContext:
    plan: Plan
    result: Result
    card: ToolCard | None
    view: list[MemoryItem]
    as_of: datetime
    options: CheckOptions = field(default_factory=CheckOptions)
    claim: Claim | None = None  # explicit (data["claim"]) or derived (python, generalist)
    explicit: bool = False
    question: str = ""  # the question's text: given data, like accepted evidence ("" when unknown)

    @property
    def passages(self) -> list[dict]:
        data = self.result.data
        if isinstance(data, dict) and isinstance(data.get("passages"), list):
            return [p for p in data["passages"] if isinstance(p, dict)]
        return []

    def passage(self, doc_id: str) -> dict | None:
        return next((p for p in self.passages if str(p.get("doc_id")) == doc_id), None)

    def memory_item(self, item_id: str) -> MemoryItem | None:
        return next((m for m in self.view if m.id == item_id), None)


def explicit_claim(result: Result) -> Claim | None:
    """The claim a result states in data["claim"] (ValidationError when it is malformed)."""
    data = result.data
    if isinstance(data, dict) and "claim" in data and data["claim"] is not None:
        return Claim.model_validate(data["claim"])
    return None


def derived_claim(plan: Plan, result: Result) -> Claim | None:
    """What a result without an explicit claim asserts: python its last printed line, a model its text."""
    data = result.data if isinstance(result.data, dict) else {}
    if result.tool == "python":
        lines = [ln.strip() for ln in str(data.get("stdout") or "").splitlines() if ln.strip()]
        return Claim(subject=plan.sub_goal[:300], value=lines[-1][:300]) if lines else None
    if result.tool == "generalist":
        text = str(data.get("text") or "").strip()
        return Claim(subject=plan.sub_goal[:300], value=text[:300]) if text else None
    return None


CheckFn = Callable[[StepContext], Outcome]
