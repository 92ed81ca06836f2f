"""What a text, a result's passages or accepted memory state about a claim's subject and attribute,
and what the claim cites (its text and date): read by the recomputation, freshness, citation and conflict checks."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date

from pydantic import ValidationError

from tasks.checks.context import StepContext
from tasks.checks.text import content, find_span, is_number, parse_date, sentences, tokens, value_tokens
from tasks.contracts import Claim, MemoryItem

# =============================================================================== statements
# A "statement" is what a text says about the claim's subject and attribute. Two ways to find one:
# a sentence naming the subject and the attribute, or a sentence built like the cited one around
# the value (same words before and after it).


@dataclass(frozen=True)
class Statement:
    where: str  # "D00012" or "step-2"
    value: str  # normalised tokens joined by spaces
    published: date | None
    memory_id: str | None = None
    estimate: bool = False


def _stem5(tok: str) -> str:
    return tok[:5]


def _mentions(sent_toks: list[str], phrase: str) -> bool:
    want = content(tokens(phrase))
    return bool(want) and set(want) <= set(sent_toks)


def _has_attribute(sent_toks: list[str], attribute: str) -> bool:
    want = {_stem5(t) for t in content(tokens(attribute)) if not is_number(t)}
    return not want or bool(want & {_stem5(t) for t in sent_toks})


def _frame(cited_text: str, value: str) -> tuple[list[str], list[str]] | None:
    """The words just before and after the value where the cited text states it (at least two content words)."""
    vt = value_tokens(value)
    toks = tokens(cited_text)
    i = find_span(toks, vt)
    if i < 0:
        return None
    for back, ahead in ((4, 3), (5, 6)):
        before, after = toks[max(0, i - back):i], toks[i + len(vt):i + len(vt) + ahead]
        if len(content(before)) + len(content(after)) >= 2:
            return before, after
    return None


def _framed(st: list[str], frame: tuple[list[str], list[str]], width: int) -> list[str]:
    """What `st` states in the frame's slot, wherever the frame's words occur (a value of up to width+3 tokens)."""
    before, after = frame
    found = []
    starts = range(len(st) - len(before) + 1) if before else [0]
    for i in starts:
        if st[i:i + len(before)] != before:
            continue
        start = i + len(before)
        ends = [len(st)] if not after else range(start + 1, min(len(st) - len(after), start + width + 3) + 1)
        for j in ends:
            if j > start and (not after or st[j:j + len(after)] == after):
                found.append(" ".join(st[start:j]))
                break
    return found


def stated_values(text: str, claim: Claim, frame: tuple[list[str], list[str]] | None, title: str = "") -> list[str]:
    """Values `text` (a passage about the claim's subject) states for the claim's subject and attribute, normalised.

    A sentence naming the subject and a short attribute states a number for numeric claims; and
    wherever the words around the value in the cited text recur, the words in the value's place
    are a stated value.
    """
    vt = value_tokens(claim.value)
    toks = tokens(text)
    if not (_mentions(tokens(title), claim.subject) or _mentions(toks, claim.subject)):
        return []
    skip = set(content(tokens(claim.subject))) | set(content(tokens(claim.attribute)))
    short_attribute = 0 < len(content(tokens(claim.attribute))) <= 3  # a long one names no property a sentence would
    out: list[str] = []
    if any(is_number(t) for t in vt) and short_attribute:
        for sent in sentences(text):
            st = tokens(sent)
            if not (_mentions(st, claim.subject) and _has_attribute(st, claim.attribute)):
                continue
            nums = [t for t in st if is_number(t) and t not in skip]
            if find_span(st, vt) >= 0:
                out.append(" ".join(vt))
            elif nums:
                out.append(nums[0])
    if frame is not None:
        out += _framed(toks, frame, len(vt))
    return out


def _agrees(stated: str, claim_value: str) -> bool:
    """A stated value agrees with the claim: the same tokens, or (a bare number) the claim's number."""
    vt, st = value_tokens(claim_value), stated.split()
    if st == vt:
        return True
    return len(st) == 1 and is_number(st[0]) and [t for t in vt if is_number(t)][:1] == st


def _memory_texts(item: MemoryItem) -> list[tuple[str, str, date | None, str]]:
    """(where, text, published, title) of what an accepted item says."""
    content_ = item.content if isinstance(item.content, dict) else {}
    src = item.provenance.source
    fallback = parse_date(src.published_at) if src else None
    out = []
    for p in content_.get("passages") or []:
        if isinstance(p, dict):
            out.append((f"{item.id}/{p.get('doc_id')}", str(p.get("text", "")),
                        parse_date(p.get("published_at")) or fallback, str(p.get("title", ""))))
    for key in ("stdout", "text"):
        if isinstance(content_.get(key), str):
            out.append((item.id, content_[key], fallback, ""))
    return out


def _memory_claim(item: MemoryItem) -> tuple[Claim, date | None] | None:
    content_ = item.content if isinstance(item.content, dict) else {}
    try:
        claim = Claim.model_validate(content_["claim"]) if content_.get("claim") else None
    except ValidationError:
        return None
    if claim is None:
        return None
    dates = [parse_date(p.get("published_at")) for p in content_.get("passages") or []
             if isinstance(p, dict) and str(p.get("doc_id")) in claim.cites]
    src = item.provenance.source
    published = max((d for d in dates if d), default=None) or (parse_date(src.published_at) if src else None)
    return claim, published


def _same_key(a: Claim, b: Claim) -> bool:
    return content(tokens(a.subject)) == content(tokens(b.subject)) and \
        {_stem5(t) for t in content(tokens(a.attribute))} == {_stem5(t) for t in content(tokens(b.attribute))}


def memory_statements(ctx: StepContext, claim: Claim, frame) -> list[Statement]:
    """What accepted memory says about the claim's subject and attribute."""
    out = []
    for item in ctx.view:
        estimate = item.status.value == "estimate"
        mc = _memory_claim(item)
        if mc is not None:
            other, published = mc
            if _same_key(other, claim):
                out.append(Statement(item.id, " ".join(value_tokens(other.value)), published, item.id, estimate))
            continue
        for where, text, published, title in _memory_texts(item):
            for v in stated_values(text, claim, frame, title):
                out.append(Statement(where, v, published, item.id, estimate))
    return out


def cited_date(ctx: StepContext) -> date | None:
    claim = ctx.claim
    dates = []
    if claim is not None and ctx.explicit:
        for c in claim.cites:
            p = ctx.passage(c)
            if p is not None:
                dates.append(parse_date(p.get("published_at")))
    if not dates and ctx.result.source is not None and ctx.result.tool == "search":
        dates.append(parse_date(ctx.result.source.published_at))
    dates = [d for d in dates if d]
    return max(dates) if dates else None


def result_statements(ctx: StepContext, claim: Claim, frame) -> list[Statement]:
    """What the result's passages that the claim does not cite say about its subject and attribute."""
    out = []
    for p in ctx.passages:
        doc = str(p.get("doc_id"))
        if doc in claim.cites:
            continue
        for v in stated_values(str(p.get("text", "")), claim, frame, str(p.get("title", ""))):
            out.append(Statement(doc, v, parse_date(p.get("published_at"))))
    return out


def cited_text(ctx: StepContext, titles: bool = True) -> str:
    """The text of what the claim cites: passages of this result and accepted memory items."""
    claim = ctx.claim
    parts = []
    for c in claim.cites if claim else []:
        p = ctx.passage(c)
        if p is not None:
            parts.append(f"{p.get('title', '')}. {p.get('text', '')}" if titles else str(p.get("text", "")))
            continue
        item = ctx.memory_item(c)
        if item is not None:
            parts.extend(f"{title}. {text}" if titles else text for _, text, _, title in _memory_texts(item))
            mc = _memory_claim(item)
            if mc:
                parts.append(f"{mc[0].subject} {mc[0].attribute}: {mc[0].value}")
    return "\n".join(parts)
