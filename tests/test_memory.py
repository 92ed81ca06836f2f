from datetime import datetime, timedelta, timezone

import pytest
from hypothesis import given, settings as hsettings, strategies as st

from tasks.contracts import FailureType, MemoryStatus, Plan, Result, Verdict
from tasks.memory import EVIDENCE_STATUSES, EvolvingMemory, IllegalTransition


class Clock:
    def __init__(self):
        self.now = datetime(2026, 1, 1, tzinfo=timezone.utc)

    def __call__(self):
        return self.now


def _step(i, accepted=True, model=None):
    plan = Plan(step_id=i, sub_goal=f"goal {i}", tool="search", args={"query": f"q{i}"})
    result = Result(step_id=i, tool="search", status="ok", data={"passages": [{"text": f"t{i}"}]}, model=model)
    verdict = Verdict(step_id=i, accepted=accepted, failure_type=None if accepted else FailureType.empty_evidence)
    return plan, result, verdict


def test_only_accepted_results_are_evidence_and_rejected_go_to_debug_trace():
    mem = EvolvingMemory()
    mem.record(*_step(1, accepted=True))
    mem.record(*_step(2, accepted=False))
    view = mem.accepted_view()
    assert [i.step_id for i in view] == [1]
    assert [i.step_id for i in mem.debug_trace()] == [2]
    assert mem.debug_trace()[0].status is MemoryStatus.rejected


def test_model_output_is_an_estimate_not_a_fact():
    mem = EvolvingMemory()
    item = mem.record(*_step(1, model="SmolLM2"))
    assert item.status is MemoryStatus.estimate


def test_expiry_removes_items_from_the_view():
    clock = Clock()
    mem = EvolvingMemory(evidence_ttl_s=60, clock=clock)
    mem.record(*_step(1))
    assert len(mem.accepted_view()) == 1
    clock.now += timedelta(seconds=61)
    assert mem.accepted_view() == []
    assert mem.get("step-1").status is MemoryStatus.expired


def test_supersede_links_both_ways_and_hides_the_old_item():
    mem = EvolvingMemory()
    mem.record(*_step(1))
    mem.record(*_step(2))
    mem.supersede("step-1", "step-2")
    assert [i.id for i in mem.accepted_view()] == ["step-2"]
    assert mem.get("step-1").superseded_by == "step-2"
    assert mem.get("step-2").supersedes == "step-1"


def test_illegal_transitions_are_refused():
    mem = EvolvingMemory()
    mem.record(*_step(1))
    mem.record(*_step(2))
    mem.supersede("step-1", "step-2")
    with pytest.raises(IllegalTransition):
        mem.transition("step-1", MemoryStatus.accepted)  # superseded is terminal
    with pytest.raises(IllegalTransition):
        mem.supersede("step-2", "step-2")


def test_view_is_a_copy():
    mem = EvolvingMemory()
    mem.record(*_step(1))
    mem.accepted_view()[0].status = MemoryStatus.rejected
    assert mem.accepted_view()[0].status is MemoryStatus.accepted


ops = st.lists(st.tuples(st.sampled_from(["accept", "reject", "estimate", "supersede", "tick", "expire"]),
                         st.integers(0, 30)), max_size=40)


@hsettings(max_examples=200, deadline=None)
@given(ops=ops)
def test_accepted_view_never_holds_rejected_superseded_or_expired(ops):
    clock = Clock()
    mem = EvolvingMemory(evidence_ttl_s=100, clock=clock)
    step = 0
    for op, n in ops:
        if op in ("accept", "reject", "estimate"):
            step += 1
            mem.record(*_step(step, accepted=op != "reject", model="m" if op == "estimate" else None))
        elif op == "supersede":
            live = [i.id for i in mem.accepted_view()]
            if len(live) >= 2:
                try:
                    mem.supersede(live[n % len(live)], live[(n + 1) % len(live)])
                except IllegalTransition:
                    pass
        elif op == "tick":
            clock.now += timedelta(seconds=n * 5)
        view = mem.accepted_view()
        assert all(i.status in EVIDENCE_STATUSES for i in view)
        assert all(i.is_live(clock.now) for i in view)
        assert not {i.id for i in view} & {i.id for i in mem.debug_trace()}
