"""Wording families of a synthetic world's questions: which family belongs to which split, the frames, the phrasing.

``train`` uses ``direct``, ``imperative`` and ``report`` with lexicon A; ``test`` uses ``polite`` and ``briefing``
with lexicon B (see the package's generator docstring, :mod:`infra.data.world.generate`).
"""

from __future__ import annotations

import re

from infra.data.world.grammar import _Fact

#: family -> (split, lexicon index)
FAMILIES: dict[str, tuple[str, int]] = {
    "direct": ("train", 0),
    "imperative": ("train", 0),
    "report": ("train", 0),
    "polite": ("test", 1),
    "briefing": ("test", 1),
}
TRAIN_FAMILIES = tuple(f for f, (s, _) in FAMILIES.items() if s == "train")
TEST_FAMILIES = tuple(f for f, (s, _) in FAMILIES.items() if s == "test")

_FRAMES: dict[str, dict[str, str]] = {
    "direct": {"what": "What is {np}?", "who": "Who is {np}?", "yes_no": "Is it true that {clause}?",
               "which": "Which has the larger {noun}: {x} or {y}?"},
    "imperative": {"what": "Find {np}.", "who": "Name {np}.", "yes_no": "Answer yes or no: {clause}.",
                   "which": "Name whichever of {x} and {y} has the larger {noun}."},
    "report": {"what": "According to the most recent sources, what is {np}?",
               "who": "According to the most recent sources, who is {np}?",
               "yes_no": "Check whether {clause}, and answer yes or no.",
               "which": "Of {x} and {y}, which has the larger {noun}?"},
    "polite": {"what": "Could you tell me {np}?", "who": "Could you tell me who {np} is?",
               "yes_no": "Could you confirm whether {clause}? Please answer yes or no.",
               "which": "Could you tell me whether {x} or {y} has the higher {noun}?"},
    "briefing": {"what": "I am preparing a briefing and need {np}. What is it?",
                 "who": "I am preparing a briefing and need {np}. Who is it?",
                 "yes_no": "For my briefing, is it the case that {clause}?",
                 "which": "For my briefing, between {x} and {y}, which one has the higher {noun}?"},
}
_OPS = {
    "sum": ("the sum of {a} and {b}", "the total of {a} and {b}"),
    "diff": ("the difference between {a} and {b}", "the gap between {a} and {b}"),
    "ratio": ("{a} divided by {b}, rounded to two decimal places", "the ratio of {a} to {b}, rounded to two decimal places"),
    "years_between": ("the number of years between {a} and {b}", "the gap in years between {a} and {b}"),
    "density": ("the population density of {x} in people per square kilometre, rounded to one decimal place",
                "the number of residents per square kilometre in {x}, rounded to one decimal place"),
    "per_employee": ("the annual revenue per employee of {x} in dollars, rounded to the nearest dollar",
                     "the yearly revenue per member of staff at {x}, in dollars, rounded to the nearest dollar"),
}
_CMP_CLAUSE = {"gt": ("{a} is greater than {b}", "{a} exceeds {b}"),
               "lt": ("{a} is earlier than {b}", "{a} comes before {b}")}
_CALC = {
    "crates": (("the total number of units in {a} crates holding {b} units each",
                "the unit count of {a} crates with {b} units apiece"), "{a} * {b}", 0),
    "growth": (("the population of a town of {a} people after {n} years of {r}% annual growth, rounded to the nearest whole number",
                "the size, rounded to the nearest whole number, of a town of {a} residents growing {r}% a year for {n} years"),
               "round({a} * (1 + {r} / 100) ** {n})", 0),
    "mean": (("the average of {a}, {b} and {c}, rounded to two decimal places",
              "the arithmetic mean of {a}, {b} and {c}, to two decimal places"), "round(({a} + {b} + {c}) / 3, 2)", 2),
    "expr": (("{a} multiplied by {b}, minus {c}", "the product of {a} and {b} less {c}"), "{a} * {b} - {c}", 0),
}

_TOPIC_SKIP = {"the", "of", "in", "a", "an", "to", "which", "who", "that", "where", "is", "was", "by", "for", "x"}


def _topic(fact: _Fact, lex: int) -> str:
    """Words naming a fact: the query keyword plus the question lexicon's own noun (for injection text)."""
    words = re.findall(r"[a-z]+", f"{fact.keyword} {fact.noun[lex]}".lower())
    return " ".join(dict.fromkeys(w for w in words if w not in _TOPIC_SKIP))
