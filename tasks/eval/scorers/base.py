"""The shared parts of the scorers: the Score type, accuracy and mean F1, and finding the marked answer.

A prediction's final answer announces itself as ``\\boxed{}`` (or ``\\fbox{}``), after ``####``, or after
"answer is"; every scorer reads it from there first.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Iterable


@dataclass(frozen=True)
class Score:
    """One scored prediction."""

    correct: bool
    """Whether the prediction counts as right (exact match for QA)."""
    value: float
    """Graded value in [0, 1]: token F1 for QA, otherwise 1.0 or 0.0."""
    detail: str
    """Why, in a line (what was extracted and compared)."""
    extracted: str | None = None
    """What the scorer read out of the prediction, when it extracted something."""


def _ok(correct: bool, detail: str, extracted: str | None = None, value: float | None = None) -> Score:
    return Score(correct=bool(correct), value=float(value if value is not None else (1.0 if correct else 0.0)),
                 detail=detail, extracted=extracted)


# =============================================================================== metrics


def accuracy(scores: Iterable[Score | bool]) -> float:
    """Fraction of correct scores (0.0 for none)."""
    items = [s.correct if isinstance(s, Score) else bool(s) for s in scores]
    return sum(items) / len(items) if items else 0.0


def mean_f1(scores: Iterable[Score | float]) -> float:
    """Mean graded value (token F1 for QA scorers; 0.0 for none)."""
    items = [s.value if isinstance(s, Score) else float(s) for s in scores]
    return sum(items) / len(items) if items else 0.0


# =============================================================================== answer extraction

_BOXED = re.compile(r"\\(?:boxed|fbox)\s*\{")
_ANSWER_IS = re.compile(r"(?:final\s+answer|answer)\s*(?:is|:|=)\s*:?\s*", re.IGNORECASE)


def _braced(s: str, open_at: int) -> tuple[str, int] | None:
    """Content of the brace group opening at ``s[open_at] == '{'`` and the index after it; None if unclosed."""
    depth = 0
    for i in range(open_at, len(s)):
        c = s[i]
        if c == "{":
            depth += 1
        elif c == "}":
            depth -= 1
            if depth == 0:
                return s[open_at + 1:i], i + 1
    return None


def last_boxed(text: str) -> str | None:
    """The content of the last ``\\boxed{...}`` (or ``\\fbox{...}``) in ``text``, braces matched."""
    found = None
    for m in _BOXED.finditer(text):
        got = _braced(text, m.end() - 1)
        if got is not None:
            found = got[0]
    return found


def _marked_segment(text: str) -> str | None:
    """The part of a free-text answer that announces itself: boxed, after '####', or after 'answer is'."""
    boxed = last_boxed(text)
    if boxed is not None:
        return boxed
    if "####" in text:
        return text.rsplit("####", 1)[1]
    matches = list(_ANSWER_IS.finditer(text))
    if matches:
        return text[matches[-1].end():]
    return None

