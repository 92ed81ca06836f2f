"""RunLedger: charges every module call to the budget and records it as a StepRecord event.

The steps table, the per-role cost table and the logs are all computed from these records, so
they can never disagree.
"""

from __future__ import annotations

from collections import defaultdict

from infra.runtime.events import RunLog
from tasks.budget import Budget
from tasks.contracts import (
    FailureType,
    GenerationOutcome,
    Plan,
    PlanOutcome,
    Result,
    Role,
    RoleCost,
    StepRecord,
    Verdict,
)


class RunLedger:
    def __init__(self, run_id: str, task_id: str, budget: Budget, log: RunLog | None = None):
        self.run_id = run_id
        self.task_id = task_id
        self.budget = budget
        self.records: list[StepRecord] = []
        self._log = log.bind(task_id=task_id) if log else None

    def _add(self, record: StepRecord, event: str, **extra) -> None:
        self.records.append(record)
        if self._log:
            fields = record.model_dump(mode="json", exclude={"run_id", "task_id", "schema_version", "ts"})
            self._log.event(event, **fields, **extra)

    def planner(self, step_id: int, outcome: PlanOutcome) -> None:
        u = outcome.usage
        calls = u.calls if u else 1  # a turn with its program call is two calls
        self.budget.charge(Role.planner, tokens_in=u.tokens_in if u else 0, tokens_out=u.tokens_out if u else 0,
                           model_calls=calls)
        plan = outcome.plan
        self._add(StepRecord(run_id=self.run_id, task_id=self.task_id, step_id=step_id, role=Role.planner, model_calls=calls,
                             model=u.model if u else None, tokens_in=u.tokens_in if u else 0,
                             tokens_out=u.tokens_out if u else 0, latency_ms=u.latency_ms if u else 0.0,
                             tool=plan.tool if plan else None, accepted=plan is not None,
                             failure_type=outcome.failure_type, detail=(outcome.error or (plan.sub_goal if plan else ""))[:500]),
                  "model_call", args=plan.args if plan else None)

    def refused_plan(self, plan: Plan, failure_type: FailureType, reason: str) -> None:
        """A valid plan the loop did not execute (repeated): the planner turn counts as rejected."""
        last = self.records[-1]
        if last.role is Role.planner and last.step_id == plan.step_id:
            last.accepted = False
            last.failure_type = failure_type
            last.detail = reason[:500]
        if self._log:
            self._log.event("plan_refused", step_id=plan.step_id, tool=plan.tool, failure_type=failure_type.value, reason=reason)

    def executor(self, plan: Plan, result: Result) -> None:
        calls = 1 if result.model else 0
        self.budget.charge(Role.executor, tokens_in=result.tokens_in, tokens_out=result.tokens_out,
                           tool_cost=result.cost, model_calls=calls)
        self._add(StepRecord(run_id=self.run_id, task_id=self.task_id, step_id=plan.step_id, role=Role.executor, model_calls=calls,
                             model=result.model, tokens_in=result.tokens_in, tokens_out=result.tokens_out,
                             latency_ms=result.elapsed_ms, tool=plan.tool, tool_ms=result.elapsed_ms,
                             detail=f"{result.status.value}" + (f": {result.error}" if result.error else "")[:500]),
                  "tool_call", status=result.status.value, cost=result.cost)

    def verifier(self, plan: Plan, verdict: Verdict, latency_ms: float) -> None:
        u = verdict.usage  # set only when the Verifier's model was asked (the judge, or its own programs)
        calls = u.calls if u else 0
        self.budget.charge(Role.verifier, tokens_in=u.tokens_in if u else 0, tokens_out=u.tokens_out if u else 0,
                           model_calls=calls)
        self._add(StepRecord(run_id=self.run_id, task_id=self.task_id, step_id=plan.step_id, role=Role.verifier, model_calls=calls,
                             model=u.model if u else None, tokens_in=u.tokens_in if u else 0,
                             tokens_out=u.tokens_out if u else 0,
                             latency_ms=latency_ms, tool=plan.tool, accepted=verdict.accepted,
                             failure_type=verdict.failure_type, detail=verdict.reason[:500]),
                  "verdict", next_action=verdict.next_action.value, confidence=verdict.confidence,
                  checks=[c.model_dump() for c in verdict.checks])

    def generator(self, step_id: int, outcome: GenerationOutcome) -> None:
        u = outcome.usage
        calls = 1 if u else 0
        self.budget.charge(Role.generator, tokens_in=u.tokens_in if u else 0, tokens_out=u.tokens_out if u else 0,
                           model_calls=calls)
        self._add(StepRecord(run_id=self.run_id, task_id=self.task_id, step_id=step_id, role=Role.generator, model_calls=calls,
                             model=u.model if u else None, tokens_in=u.tokens_in if u else 0,
                             tokens_out=u.tokens_out if u else 0, latency_ms=u.latency_ms if u else 0.0,
                             accepted=outcome.failure_type is None, failure_type=outcome.failure_type,
                             detail=(outcome.error or "")[:500]),
                  "model_call", citations=len(outcome.citations))

    def stop(self, reason: str, limit: str | None, detail: str) -> None:
        if self._log:
            self._log.event("stop", reason=reason, limit=limit, detail=detail, usage=self.budget.snapshot())

    def role_costs(self) -> dict[Role, RoleCost]:
        return role_costs(self.records)


def role_costs(records: list[StepRecord]) -> dict[Role, RoleCost]:
    """Per-role calls, tokens, latency, tool time and rejections, computed from step records."""
    table: dict[Role, RoleCost] = defaultdict(RoleCost)
    for r in records:
        cost = table[r.role]
        cost.calls += 1
        cost.tokens_in += r.tokens_in
        cost.tokens_out += r.tokens_out
        cost.latency_ms += r.latency_ms
        cost.tool_ms += r.tool_ms
        cost.rejections += int(r.accepted is False)
    return {role: table[role] for role in Role if role in table}
