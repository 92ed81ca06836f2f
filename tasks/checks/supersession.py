"""Which sentences of one search result a newer passage of the same result contradicts.

A search often returns the current page about an entity beside an older digest of one of its figures
("The price of Wequos Monitor is 1,319.46 dollars", 2018, beside the product page's 2,016.16 of 2024).
Both are well-formed evidence, so no check rejects the step; left side by side, a small Generator copies
whichever it reads first. The rule: two sentences state the same fact when they name the same entities
and one known property (attribute.py's families: "price" / "priced") and each states one number; where
such sentences disagree, the newest passage's value stands and an older passage's sentence is superseded.
Undated passages are never ordered, and sources of the same date that disagree are left to the conflict
check (`disagreements`, read by conflict.py): the rule only ever removes an older value that a strictly newer
source replaces.
"""

from __future__ import annotations

import re
from collections import defaultdict
from dataclasses import dataclass
from datetime import date

from tasks.checks.attribute import families
from tasks.checks.text import numbers_in, parse_date, sentences, tokens
from tasks.contracts import SupersededSentence

# A name is a run of capitalised words; a sentence's first word is capitalised anyway, so a leading
# function word ("The price of ...") is not part of a name.
_NAME = re.compile(r"[A-Z][\w'\-]*(?:\s+[A-Z][\w'\-]*)*")
_NOT_NAMES = frozenset("the a an it its this that these those their his her in on at of for by".split())


@dataclass(frozen=True)
class _Fact:
    doc_id: str
    sentence: str
    published: date | None
    value: object  # Decimal


def names_in(sentence: str) -> frozenset[str]:
    """The lower-cased names a text states, as facts are keyed by them."""
    out = set()
    for m in _NAME.finditer(sentence):
        words = m.group(0).split()
        while words and words[0].lower() in _NOT_NAMES:
            words = words[1:]
        if words:
            out.add(" ".join(words).lower())
    return frozenset(out)


def _facts(passages: list[dict]) -> dict[tuple, list[_Fact]]:
    """Numeric facts by (names, property): sentences that name an entity and exactly one known property and
    state exactly one number."""
    by_key: dict[tuple, list[_Fact]] = defaultdict(list)
    for p in passages:
        published = parse_date(p.get("published_at"))
        for s in sentences(str(p.get("text", ""))):
            names, props, numbers = names_in(s), families(s), numbers_in(tokens(s))
            if names and len(props) == 1 and len(numbers) == 1:
                by_key[(names, next(iter(props)))].append(_Fact(str(p.get("doc_id")), s.strip(), published, numbers[0]))
    return by_key


def _dated_and_current(facts: list[_Fact]) -> tuple[list[_Fact], list[_Fact]]:
    """A fact's dated statements and, of them, the newest date's (undated statements are never ordered)."""
    dated = [f for f in facts if f.published is not None]
    newest = max((f.published for f in dated), default=None)
    return dated, [f for f in dated if f.published == newest]


def superseded_sentences(passages: list[dict]) -> list[SupersededSentence]:
    """Sentences of older passages that a strictly newer passage of the same result contradicts, in passage order."""
    out: list[SupersededSentence] = []
    for facts in _facts(passages).values():
        dated, current = _dated_and_current(facts)
        if len({f.value for f in dated}) < 2:
            continue
        newest = current[0].published
        if len({f.value for f in current}) != 1:  # equally new sources disagree: a conflict, not staleness
            continue
        by = current[0]
        out += [SupersededSentence(doc_id=f.doc_id, sentence=f.sentence, published_at=f.published, by_doc_id=by.doc_id,
                                   by_published_at=by.published)
                for f in dated if f.published < newest and f.value != by.value]
    order = {str(p.get("doc_id")): i for i, p in enumerate(passages)}
    return sorted(out, key=lambda s: order.get(s.doc_id, 0))


@dataclass(frozen=True)
class Disagreement:
    """Equally new passages of one result that state one fact with different values."""

    names: frozenset[str]  # lower-cased
    prop: str
    facts: tuple[_Fact, ...]  # the newest date's statements, one per value


def disagreements(passages: list[dict]) -> list[Disagreement]:
    """Facts whose newest dated statements in this result disagree: no newer source settles them (undated passages
    are never compared: nothing says which of them is current)."""
    out = []
    for (names, prop), facts in _facts(passages).items():
        by_value = {f.value: f for f in _dated_and_current(facts)[1]}
        if len(by_value) > 1:
            out.append(Disagreement(names, prop, tuple(by_value.values())))
    return out


def without_superseded(data: dict, superseded: list[SupersededSentence]) -> dict:
    """A search result's data as evidence: each superseded sentence cut from its passage (a passage left stating no
    number is dropped), and what was cut listed under "superseded" with the passage that replaces it."""
    if not superseded or not isinstance(data.get("passages"), list):
        return data
    cut: dict[str, set[str]] = defaultdict(set)
    for s in superseded:
        cut[s.doc_id].add(s.sentence)
    passages = []
    for p in data["passages"]:
        gone = cut.get(str(p.get("doc_id"))) if isinstance(p, dict) else None
        if not gone:
            passages.append(p)
            continue
        kept = " ".join(s.strip() for s in sentences(str(p.get("text", ""))) if s.strip() not in gone)
        if numbers_in(tokens(kept)):
            passages.append({**p, "text": kept})
    return {**data, "passages": passages, "superseded": [s.model_dump(mode="json") for s in superseded]}
