"""Check 7: the cited source is dated no later than as-of, within the age limit, and no newer accepted
source says otherwise (an older one it replaces is superseded); within one search result, an older passage's
sentence that a newer passage contradicts is marked superseded (supersession.py)."""

from __future__ import annotations

from datetime import timedelta

from tasks.checks.context import Outcome, StepContext, failed, passed
from tasks.checks.statements import _agrees, _frame, cited_date, cited_text, memory_statements, result_statements
from tasks.checks.supersession import superseded_sentences
from tasks.checks.text import _fmt
from tasks.contracts import FailureType

# =============================================================================== 7. source freshness

def check_freshness(ctx: StepContext) -> Outcome:
    """Cited sources are dated no later than as-of, not past the age limit, and no newer accepted source says otherwise;
    a passed step carries the sentences of its older passages that a newer passage of the same result replaces."""
    out = _cited_source_freshness(ctx)
    if out.failure is None and ctx.options.supersede_in_result:
        out.superseded = superseded_sentences(ctx.passages)
        if out.superseded:
            replaced = "; ".join(f"{s.doc_id} ({s.published_at}) by {s.by_doc_id} ({s.by_published_at})" for s in out.superseded)
            out.check = out.check.model_copy(update={"detail": f"{out.check.detail}; superseded in this result: {replaced}"[:500]})
    return out


def _cited_source_freshness(ctx: StepContext) -> Outcome:
    name = "freshness"
    published = cited_date(ctx)
    as_of = ctx.as_of.date()
    if published is None and not (ctx.claim and ctx.explicit):
        return passed(name, "n/a: no dated source")
    if published is not None and published > as_of:
        return failed(name, f"source dated {published} is after the as-of date {as_of}", FailureType.stale_source,
                      f"the source is dated {published}, after the run's as-of date {as_of}, so its date cannot be trusted; "
                      "use a source dated on or before it")
    limits = [d for d in (ctx.options.max_source_age_days,
                          ctx.options.evidence_ttl_s / 86400 if ctx.options.evidence_ttl_s else None) if d is not None]
    if published is not None and limits and published < as_of - timedelta(days=min(limits)):
        return failed(name, f"source dated {published} is older than {min(limits):g} days before {as_of}",
                      FailureType.stale_source, f"the source ({published}) is older than the freshness limit; find a newer source")
    if not (ctx.claim and ctx.explicit):
        return passed(name, f"source dated {_fmt(published)}")
    claim = ctx.claim
    frame = _frame(cited_text(ctx, titles=False), claim.value)
    supersedes = None
    for s in result_statements(ctx, claim, frame) + memory_statements(ctx, claim, frame):
        if _agrees(s.value, claim.value) or s.published is None or published is None:
            continue
        if s.published > published and not s.estimate:
            return failed(name, f"{s.where} ({s.published}) states {s.value!r}; the cited source is from {published}",
                          FailureType.stale_source,
                          f"the cited source ({published}) is older than {s.where} ({s.published}), which states {s.value} for "
                          f"{claim.subject} {claim.attribute}".rstrip() + "; use the newer source")
        if s.published < published and s.memory_id:
            supersedes = s.memory_id
    if supersedes:
        out = passed(name, f"newer than {supersedes}, which it supersedes")
        out.supersedes = supersedes
        return out
    return passed(name, f"cited source dated {_fmt(published)}; no newer source disagrees")
