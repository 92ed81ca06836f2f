"""Check 8: the claimed value appears in the source it cites, and that source is about the claim's subject."""

from __future__ import annotations

from tasks.checks.context import Outcome, StepContext, failed, passed, undecided
from tasks.checks.statements import cited_text
from tasks.checks.text import (
    canonical_number,
    contains_value,
    content,
    find_span,
    is_number,
    near_number,
    numbers_in,
    tokens,
    value_tokens,
)
from tasks.contracts import FailureType

# =============================================================================== 8. citation span

def check_citation_span(ctx: StepContext) -> Outcome:
    """The claimed value (normalised) appears in the cited source, and that source is about the claim's subject."""
    name = "citation_span"
    claim = ctx.claim
    if claim is None:
        return passed(name, "n/a: no claim beyond the evidence itself")
    if not ctx.explicit:
        if ctx.result.tool == "generalist":
            return passed(name, "n/a: a model's own estimate cites no source (kept as an estimate)")
        return passed(name, "n/a: the program's output is its own source (see recomputation)")
    if ctx.result.tool == "python" and not any(ctx.passage(c) for c in claim.cites):
        return passed(name, "derived value: the program is its source (see recomputation)")
    if not claim.cites:
        return failed(name, "the claim cites nothing", FailureType.unsupported,
                      f"the claim '{claim.value}' cites no source; cite the passage that states it, or search for one")
    unknown = [c for c in claim.cites if ctx.passage(c) is None and ctx.memory_item(c) is None]
    if unknown:
        return failed(name, f"cites {', '.join(unknown)}, not in this result or accepted memory", FailureType.unsupported,
                      f"the claim cites {', '.join(unknown)}, which this result does not contain; cite a retrieved passage")
    text = cited_text(ctx)
    vt = value_tokens(claim.value)
    if vt in (["yes"], ["no"], ["true"], ["false"]):
        return undecided(name, f"a yes/no claim about {claim.subject} cannot be matched to a span")
    toks = tokens(text)
    if find_span(toks, vt) < 0:
        elsewhere = [str(p.get("doc_id")) for p in ctx.passages if str(p.get("doc_id")) not in claim.cites
                     and contains_value(f"{p.get('title', '')}. {p.get('text', '')}", claim.value)]
        if elsewhere:
            return failed(name, f"{claim.value!r} is in {', '.join(elsewhere)}, not in the cited source",
                          FailureType.citation_mismatch,
                          f"the cited source does not state {claim.value}; {', '.join(elsewhere)} does: cite it")
        nums = numbers_in(vt)
        near = [n for n in numbers_in(toks) if nums and near_number(nums[0], n)]
        words = set(content([t for t in vt if not is_number(t)]))
        overlap = len(words & set(toks)) / len(words) if words else 0.0
        if near or (0 < overlap < 1) or (nums and nums[0] in numbers_in(toks)):
            hint = f"it states {canonical_number(str(near[0]))}" if near else "the wording or unit differs"
            return failed(name, f"{claim.value!r} not in the cited source; {hint}", FailureType.citation_mismatch,
                          f"the cited source does not state {claim.value} ({hint}); report the value exactly as the source states it")
        return failed(name, f"{claim.value!r} not in the cited source", FailureType.unsupported,
                      f"no cited source states {claim.value}; search for a source that does")
    subj = content(tokens(claim.subject))
    if subj:
        found = len(set(subj) & set(toks)) / len(set(subj))
        if found < 0.5:
            return failed(name, f"the cited source does not name {claim.subject!r}", FailureType.citation_mismatch,
                          f"the cited source states {claim.value} but is not about {claim.subject}; cite a source about {claim.subject}")
        if found < 1:
            about = [str(p.get("doc_id")) for p in ctx.passages if str(p.get("doc_id")) not in claim.cites
                     and set(subj) <= set(tokens(f"{p.get('title', '')}. {p.get('text', '')}"))]
            if about:  # another retrieved passage is about the subject: the cited one is about someone else
                return failed(name, f"the cited source names {claim.subject!r} only in part; {', '.join(about)} is about it",
                              FailureType.citation_mismatch,
                              f"the cited source states {claim.value} but is about another subject; "
                              f"{', '.join(about)} is about {claim.subject}: check what it states")
            return undecided(name, f"the cited source states {claim.value} but names {claim.subject!r} only in part")
    return passed(name, f"{claim.value!r} appears in the cited source")
