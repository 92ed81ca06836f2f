"""Budget and stop policy: hard limits checked before every call, and the rules that end a run.

A call is admitted only if its *declared maximum* (tokens in+out, tool cost, wall time) fits in
what is left, after keeping back what the final answer needs; so no run can pass its budget.
"""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass, field

from infra.runtime.settings import BudgetConfig
from tasks.contracts import (
    AnswerStatus,
    BudgetLimit,
    FailureType,
    NextAction,
    Role,
    StopReason,
    Verdict,
)


@dataclass(frozen=True)
class Stop:
    """Why a run ends."""

    reason: StopReason
    limit: BudgetLimit | None = None
    detail: str = ""


@dataclass(frozen=True)
class CallCost:
    """The declared maximum of one call, used for admission before it starts."""

    role: Role
    model_tokens: int = 0  # max_input_tokens + max_tokens of the model it may call; 0 for no model
    tool_cost: float = 0.0
    wall_s: float = 0.0
    calls: int = 1  # model calls it may make (a Planner turn with its program call: 2)

    @property
    def model_call(self) -> bool:
        return self.model_tokens > 0


@dataclass
class Budget:
    """Usage counters of one run against its limits."""

    config: BudgetConfig
    answer_reserve: CallCost | None = None  # kept back so the Generator can always run
    clock: callable = time.monotonic
    started: float = field(default=0.0)
    model_calls: int = 0
    role_calls: Counter = field(default_factory=Counter)
    tokens: int = 0
    tool_cost: float = 0.0

    def __post_init__(self) -> None:
        self.started = self.started or self.clock()

    @property
    def elapsed_s(self) -> float:
        return self.clock() - self.started

    def refuse(self, cost: CallCost, *, keep_answer_reserve: bool = True) -> BudgetLimit | None:
        """The limit this call would break, or None if it may start."""
        c = self.config
        reserve = self.answer_reserve if keep_answer_reserve and cost.role is not Role.generator else None
        r_tokens = reserve.model_tokens if reserve else 0
        r_calls = 1 if reserve and reserve.model_call else 0
        r_wall = reserve.wall_s if reserve else 0.0
        if cost.model_call and self.model_calls + cost.calls + r_calls > c.max_model_calls:
            return BudgetLimit.calls
        role_cap = c.max_calls_per_role.get(cost.role.value)
        if role_cap is not None and self.role_calls[cost.role] + 1 > role_cap:
            return BudgetLimit.role_calls
        if self.tokens + cost.model_tokens + r_tokens > c.max_tokens:
            return BudgetLimit.tokens
        if self.tool_cost + cost.tool_cost > c.max_tool_cost:
            return BudgetLimit.tool_cost
        if self.elapsed_s + cost.wall_s + r_wall > c.max_wall_s:
            return BudgetLimit.wall_clock
        return None

    def charge(self, role: Role, *, tokens_in: int = 0, tokens_out: int = 0, tool_cost: float = 0.0, model_calls: int = 0) -> None:
        """Record what a call actually used."""
        self.role_calls[role] += 1
        self.model_calls += model_calls
        self.tokens += tokens_in + tokens_out
        self.tool_cost += tool_cost

    def remaining_wall_s(self) -> float:
        return max(0.0, self.config.max_wall_s - self.elapsed_s)

    def snapshot(self) -> dict:
        return {
            "model_calls": self.model_calls,
            "role_calls": {r.value: n for r, n in self.role_calls.items()},
            "tokens": self.tokens,
            "tool_cost": self.tool_cost,
            "elapsed_s": round(self.elapsed_s, 3),
        }


@dataclass
class StopPolicy:
    """Progress rules: steps, repeated plans, consecutive rejections, verdicts that end the run."""

    config: BudgetConfig
    steps: int = 0
    plan_counts: Counter = field(default_factory=Counter)
    consecutive_rejections: int = 0
    repeats: int = 0

    def begin_turn(self) -> Stop | None:
        """Start a Planner turn, unless the turn limit is reached."""
        if self.steps >= self.config.max_steps:
            return Stop(StopReason.budget_exhausted, BudgetLimit.steps, f"{self.steps} planner turns")
        self.steps += 1
        return None

    def note_plan(self, signature: str) -> Stop | None:
        """Count a proposed plan; identical proposals beyond max_repeats end the run."""
        self.plan_counts[signature] += 1
        if self.plan_counts[signature] > 1:
            self.repeats += 1
            if self.repeats > self.config.max_repeats:
                return Stop(StopReason.repeated_plan, detail=f"plan proposed {self.plan_counts[signature]} times")
        return None

    def is_repeat(self, signature: str) -> bool:
        return self.plan_counts[signature] > 1

    def note_rejection(self, failure_type: FailureType | None) -> Stop | None:
        self.consecutive_rejections += 1
        if self.consecutive_rejections >= self.config.max_consecutive_rejections:
            kind = failure_type.value if failure_type else "unknown"
            return Stop(StopReason.no_progress, detail=f"{self.consecutive_rejections} rejections in a row (last: {kind})")
        return None

    def note_verdict(self, verdict: Verdict) -> Stop | None:
        if verdict.next_action is NextAction.human_review:
            return Stop(StopReason.conflicting_evidence, detail=verdict.reason)
        if verdict.next_action is NextAction.stop_uncertain:
            reason = StopReason.conflicting_evidence if verdict.failure_type is FailureType.conflict else StopReason.no_progress
            return Stop(reason, detail=verdict.reason)
        if verdict.accepted:
            self.consecutive_rejections = 0
            return None
        return self.note_rejection(verdict.failure_type)


def answer_status(stop: Stop, has_verified_evidence: bool, review_on_conflict: bool = True) -> AnswerStatus:
    """Map a stop to the honest status of the answer. Only a planned, evidenced stop is 'answered'."""
    if stop.reason is StopReason.answered:
        return AnswerStatus.answered if has_verified_evidence else AnswerStatus.uncertain
    if stop.reason is StopReason.budget_exhausted:
        return AnswerStatus.budget_exhausted
    if stop.reason is StopReason.conflicting_evidence:
        return AnswerStatus.needs_review if review_on_conflict else AnswerStatus.uncertain
    if stop.reason is StopReason.error:
        return AnswerStatus.failed
    return AnswerStatus.uncertain  # repeated_plan, no_progress
