"""EvolvingMemory: the records carried between steps, with a lifecycle and a debug trace.

Only accepted (and labelled estimate) items are evidence. Rejected results and failure traces
go to a separate debug trace that the Generator never reads. Status changes follow a table of
legal transitions; an illegal one is refused.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from tasks.checks.injection import quarantine, with_cut_data
from tasks.checks.supersession import without_superseded
from tasks.contracts import (
    FailureType,
    JudgedStep,
    MemoryItem,
    MemoryStatus,
    Origin,
    Plan,
    Provenance,
    Result,
    Verdict,
    utcnow,
)


class IllegalTransition(ValueError):
    """A status change the memory lifecycle does not allow."""


TRANSITIONS: dict[MemoryStatus, frozenset[MemoryStatus]] = {
    MemoryStatus.estimate: frozenset({MemoryStatus.accepted, MemoryStatus.superseded, MemoryStatus.expired, MemoryStatus.rejected}),
    MemoryStatus.accepted: frozenset({MemoryStatus.superseded, MemoryStatus.expired}),
    MemoryStatus.superseded: frozenset(),
    MemoryStatus.expired: frozenset(),
    MemoryStatus.rejected: frozenset(),
}

EVIDENCE_STATUSES = frozenset({MemoryStatus.accepted, MemoryStatus.estimate})


def as_evidence(result: Result, verdict: Verdict) -> Result:
    """What of an accepted result is evidence: quarantined passages left out (instruction-like text, injection.py) and
    older sentences a newer passage replaced cut (supersession.py); the source follows the top passage left."""
    kept = quarantine(result, verdict.quarantined)
    if not verdict.superseded or not isinstance(kept.data, dict):
        return kept
    return with_cut_data(kept, without_superseded(kept.data, verdict.superseded))


class EvolvingMemory:
    """Evidence items of one run plus a debug trace of everything that was rejected."""

    def __init__(self, evidence_ttl_s: float | None = None, clock=utcnow):
        self._items: dict[str, MemoryItem] = {}
        self._debug: list[MemoryItem] = []
        self._ttl = evidence_ttl_s
        self._clock = clock

    # ------------------------------------------------------------------ writing

    def record(self, plan: Plan, result: Result, verdict: Verdict, *, prior_id: str | None = None,
               prior_run: str | None = None) -> MemoryItem:
        """Store one step. Accepted results become evidence; everything else goes to the debug trace.

        What a model produced itself (a model-backed tool) is kept as an estimate, not as fact. A step
        that re-verified an earlier run's record (prior_id) keeps that link in its provenance.
        """
        now = self._clock()
        estimate = result.model is not None
        origin = Origin.prior if prior_id else Origin.run
        if verdict.accepted:
            kept = as_evidence(result, verdict)
            content, source = kept.data, kept.source
        else:
            content, source = {"data": result.data, "error": result.error}, result.source
        item = MemoryItem(
            id=f"step-{plan.step_id}",
            step_id=plan.step_id,
            status=(MemoryStatus.estimate if estimate else MemoryStatus.accepted) if verdict.accepted else MemoryStatus.rejected,
            provenance=Provenance(tool=result.tool, source=source, step_id=plan.step_id, model=result.model,
                                  origin=origin, prior_id=prior_id, run_id=prior_run),
            created_at=now,
            expires_at=now + timedelta(seconds=self._ttl) if (self._ttl and verdict.accepted) else None,
            sub_goal=plan.sub_goal,
            content=content,
            failure_type=verdict.failure_type,
            reason=verdict.reason,
            args=plan.args,
        )
        if item.status is MemoryStatus.rejected:
            self._debug.append(item)
        else:
            self._items[item.id] = item
        return item

    def record_judged(self, step: JudgedStep) -> MemoryItem:
        """Store a step the Verifier judged; an accepted result from a newer source supersedes the item its verdict
        names. The loop's bookkeeping, and the replay's (flows/bench/generator.py rebuilds a run's evidence with it)."""
        item = self.record(step.plan, step.result, step.verdict)
        if step.verdict.accepted and step.verdict.supersedes:
            self.supersede(step.verdict.supersedes, item.id)
        return item

    def record_failure(self, step_id: int, tool: str, failure_type: FailureType, reason: str, content=None,
                       args: dict | None = None) -> MemoryItem:
        """A failure that produced no Result (invalid plan, refused call): debug trace only."""
        item = MemoryItem(
            id=f"step-{step_id}-{failure_type.value}-{len(self._debug)}",
            step_id=step_id,
            status=MemoryStatus.rejected,
            provenance=Provenance(tool=tool, step_id=step_id),
            created_at=self._clock(),
            content=content,
            failure_type=failure_type,
            reason=reason,
            args=args,
        )
        self._debug.append(item)
        return item

    def record_human(self, step_id: int, decision: dict, accepted: bool, run_id: str | None = None) -> MemoryItem:
        """A reviewer's decision (provenance origin human). An accepted or given answer is kept, labelled
        human; a rejection goes to the debug trace. Either way it is the person's word, not a tool's evidence."""
        item = MemoryItem(
            id=f"human-{step_id}",
            step_id=step_id,
            status=MemoryStatus.accepted if accepted else MemoryStatus.rejected,
            provenance=Provenance(tool="human_review", step_id=step_id, origin=Origin.human, run_id=run_id),
            created_at=self._clock(),
            sub_goal="human review of the answer",
            content=decision,
            reason=f"reviewer decision: {decision.get('action')}",
        )
        if accepted:
            self._items[item.id] = item
        else:
            self._debug.append(item)
        return item

    def transition(self, item_id: str, new: MemoryStatus) -> MemoryItem:
        item = self._items[item_id]
        if new not in TRANSITIONS[item.status]:
            raise IllegalTransition(f"{item_id}: {item.status.value} -> {new.value} is not allowed")
        item.status = new
        return item

    def supersede(self, old_id: str, new_id: str) -> None:
        """`new_id` replaces `old_id` (a newer source, a corrected value); both keep the link."""
        if old_id == new_id:
            raise IllegalTransition("an item cannot supersede itself")
        new = self._items[new_id]
        if new.status not in EVIDENCE_STATUSES:
            raise IllegalTransition(f"{new_id} is {new.status.value}; only live evidence can supersede")
        self.transition(old_id, MemoryStatus.superseded)
        self._items[old_id].superseded_by = new_id
        new.supersedes = old_id

    def expire(self, now: datetime | None = None) -> list[str]:
        """Mark evidence past its expires_at as expired; returns the ids that changed."""
        now = now or self._clock()
        changed = []
        for item in self._items.values():
            if item.status in EVIDENCE_STATUSES and not item.is_live(now):
                self.transition(item.id, MemoryStatus.expired)
                changed.append(item.id)
        return changed

    # ------------------------------------------------------------------ reading

    def accepted_view(self, now: datetime | None = None) -> list[MemoryItem]:
        """All the evidence a Planner or Generator may see: live accepted and estimate items."""
        self.expire(now)
        return [i.model_copy(deep=True) for i in self._items.values() if i.status in EVIDENCE_STATUSES]

    def debug_trace(self) -> list[MemoryItem]:
        """Rejected attempts and failures, for people and the Planner's feedback; never evidence."""
        return [i.model_copy(deep=True) for i in self._debug]

    def all_items(self) -> list[MemoryItem]:
        return [i.model_copy(deep=True) for i in self._items.values()]

    def get(self, item_id: str) -> MemoryItem:
        return self._items[item_id].model_copy(deep=True)

    def __len__(self) -> int:
        return len(self._items)
