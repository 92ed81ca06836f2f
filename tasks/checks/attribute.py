"""Check 10: a search claim's value stands, in the passage it cites, next to the property the claim says it is.
"Founder: Lionel Acre" citing "Lionel Acre is the director of ..." names the right person for the wrong property:
the value is in the passage (the citation span passes) but the sentence that states it is about another property.

Properties are known by families of words (founder / founded / established); a sentence that states the value
with words of another family and none of the claim's is decisive. A property outside the families, or a
sentence that names no known property, is left to the other checks: absence is not evidence here."""

from __future__ import annotations

from tasks.checks.context import Outcome, StepContext, failed, passed
from tasks.checks.text import find_span, sentences, tokens, value_tokens
from tasks.contracts import FailureType

_FAMILIES = {
    "founder": "founder founders founded founding cofounder established establish",
    "director": "director directors directed directs",
    "chief executive": "ceo chief executive leads led leader",
    "chair": "chair chairman chairwoman chairperson",
    "owner": "owner owned owns",
    "employer": "employer employed employs works worked",
    "maker": "maker made makes produces produced producer manufacturer manufactured",
    "headquarters": "headquarters headquartered hq home",
    "birthplace": "birthplace born native",
    "death": "died death",
    "launch": "launch launched released release",
    "price": "price priced",
    "revenue": "revenue revenues sales turnover",
    "employees": "employees employee headcount staff workforce",
    "population": "population inhabitants residents living",
    "area": "area",
    "elevation": "elevation height tall high altitude",
    "depth": "depth deep",
    "length": "length long",
    "author": "author wrote written writer",
    "spouse": "spouse married wife husband",
}


def _stem(tok: str) -> str:
    return tok[:5]


_FAMILY_OF_WORD: dict[str, str] = {_w: _family for _family, _words in _FAMILIES.items() for _w in tokens(_words)}
_FAMILY_OF: dict[str, str] = {}  # by stem, for the listed words' other forms ("leading", "founders")
for _family, _words in _FAMILIES.items():
    for _w in _words.split():
        _FAMILY_OF.setdefault(_stem(_w), _family)


def _family(tok: str) -> str | None:
    """A listed word's own family first: "employees" and "employer" share a stem, not a property."""
    return _FAMILY_OF_WORD.get(tok) or _FAMILY_OF.get(_stem(tok))


def families(text: str) -> set[str]:
    """The known property families a text's words belong to."""
    return {f for f in map(_family, tokens(text)) if f}


def check_attribute(ctx: StepContext) -> Outcome:
    name = "attribute"
    claim = ctx.claim
    if claim is None or not ctx.explicit or ctx.result.tool != "search" or not claim.attribute.strip():
        return passed(name, "n/a: no search claim naming a property")
    if "?" in claim.attribute or len(claim.attribute.split()) > 4:  # a question or a sentence, not a property name
        return passed(name, "n/a: the claim's attribute is not a property name")
    wanted = families(claim.attribute)
    if not wanted:
        return passed(name, f"n/a: {claim.attribute!r} is not a property this check knows")
    vt = value_tokens(claim.value)
    stating = []
    for p in ctx.passages:
        if str(p.get("doc_id")) in claim.cites:
            stating += [s for s in sentences(str(p.get("text", ""))) if find_span(tokens(s), vt) >= 0]
    if not stating:
        return passed(name, "n/a: no cited sentence states the value (see citation_span)")
    if any(families(s) & wanted or not families(s) for s in stating):
        return passed(name, f"the cited sentence states {claim.value!r} as {claim.attribute}")
    other = sorted(set().union(*(families(s) for s in stating)) - wanted)
    return failed(name, f"the cited passage states {claim.value!r} as {', '.join(other)}, not {claim.attribute}: "
                  f"{stating[0][:160]!r}", FailureType.wrong_attribute,
                  f"the cited passage gives {claim.value} as the {', '.join(other)}, not the {claim.attribute}; "
                  f"search for the {claim.attribute} itself")
