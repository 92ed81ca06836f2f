"""Check 9: no accepted source of the same date (or undated) gives the claim's subject a different value, and a
search result without a claim holds no equally new passages that disagree on a fact the step is about.

The second part: the world's conflict questions (gold: `uncertain`) put two passages of one date in one result, one
saying 810,810 people and the other 251,354. A search step states no claim, so the claim comparison never ran;
the Generator read both and answered one. Now such a result is rejected as a conflict, with both values, when
the fact is about a name the question or the step names and a property the question asks about; the Planner is
told to find a tie-breaking source or answer that it is uncertain (`verifier.on_conflict` decides the next action).
"""

from __future__ import annotations

from tasks.checks.context import Outcome, StepContext, failed, passed
from tasks.checks.coverage import properties
from tasks.checks.statements import _agrees, _frame, cited_date, cited_text, memory_statements, result_statements
from tasks.checks.supersession import disagreements, names_in
from tasks.checks.text import _fmt
from tasks.contracts import FailureType

TIE_BREAK = "Find a tie-breaking source (newer or primary), or answer that it is uncertain"

# =============================================================================== 9. conflict with accepted memory

def check_conflict(ctx: StepContext) -> Outcome:
    """No accepted source of the same date (or undated) gives the claim's subject a different value."""
    name = "conflict"
    claim = ctx.claim
    if claim is None or not ctx.explicit:
        return _within_result(ctx) or passed(name, "n/a: no claim to compare")
    published = cited_date(ctx)
    frame = _frame(cited_text(ctx, titles=False), claim.value)
    for s in memory_statements(ctx, claim, frame) + result_statements(ctx, claim, frame):
        if _agrees(s.value, claim.value) or s.estimate:
            continue
        if s.published is not None and published is not None and s.published != published:
            continue  # newer or older: decided by freshness
        action = ctx.options.on_conflict
        return failed(name, f"{s.where} ({_fmt(s.published)}) states {s.value!r}; this step says {claim.value!r}",
                      FailureType.conflict,
                      f"sources disagree on {claim.subject} {claim.attribute}".rstrip() + f": {s.where} ({_fmt(s.published)}) "
                      f"says {s.value}, this source ({_fmt(published)}) says {claim.value}. {TIE_BREAK}", action)
    return passed(name, "no accepted source disagrees")


def _within_result(ctx: StepContext) -> Outcome | None:
    """A failure when equally new passages of this result disagree on a fact the step is about."""
    about = names_in(ctx.question) | names_in(" ".join(str(v) for v in ctx.plan.args.values())) | names_in(ctx.plan.sub_goal)
    asked = properties(ctx.question)
    for d in disagreements(ctx.passages):
        if not (d.names & about and d.prop in asked):
            continue
        a, b = d.facts[:2]
        return failed("conflict", f"{a.doc_id} and {b.doc_id} ({_fmt(a.published)}) state {a.value} and {b.value}",
                      FailureType.conflict,
                      f"sources of the same date disagree on the {d.prop}: {a.doc_id} ({_fmt(a.published)}) says "
                      f"\"{a.sentence}\", {b.doc_id} says \"{b.sentence}\". {TIE_BREAK}", ctx.options.on_conflict)
    return None
