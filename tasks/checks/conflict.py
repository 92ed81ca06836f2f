"""Check 9: no accepted source of the same date (or undated) gives the claim's subject a different value."""

from __future__ import annotations

from tasks.checks.context import Outcome, StepContext, failed, passed
from tasks.checks.statements import _agrees, _frame, cited_date, cited_text, memory_statements, result_statements
from tasks.checks.text import _fmt
from tasks.contracts import FailureType

# =============================================================================== 9. conflict with accepted memory

def check_conflict(ctx: StepContext) -> Outcome:
    """No accepted source of the same date (or undated) gives the claim's subject a different value."""
    name = "conflict"
    claim = ctx.claim
    if claim is None or not ctx.explicit:
        return passed(name, "n/a: no claim to compare")
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
                      f"says {s.value}, this source ({_fmt(published)}) says {claim.value}. Find a tie-breaking source "
                      "(newer or primary), or answer that it is uncertain", action)
    return passed(name, "no accepted source disagrees")
