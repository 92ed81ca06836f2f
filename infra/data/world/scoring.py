"""Scoring a final answer against a synthetic world's question record: numbers, entities, yes/no, uncertain."""

from __future__ import annotations

import re
from typing import Mapping

_TEXT_NUM = re.compile(r"(?<![\w.])-?\d{1,3}(?:,\d{3})+(?:\.\d+)?(?![\d])|(?<![\w.])-?\d+(?:\.\d+)?(?![\d])")


def _numbers(text: str) -> list[float]:
    return [float(m.group(0).replace(",", "")) for m in _TEXT_NUM.finditer(text)]


def _norm(s: str) -> str:
    return " ".join(re.sub(r"[^\w\s'-]", " ", s.casefold()).split())


def check_answer(question: Mapping, text: str | None, status: str = "answered") -> bool:
    """Mechanical score of a final answer against a question record.

    - expected ``uncertain`` (conflicting sources): correct iff ``status == "uncertain"``;
      otherwise a status other than ``answered`` is wrong.
    - ``number``: the first number in ``text`` that does not also occur in the question must equal
      the answer after rounding to ``decimals`` (thousands separators allowed).
    - ``yes_no``: the first "yes" or "no" word in ``text``.
    - ``entity``: the expected name must occur (case-insensitive, whole words); for comparisons the
      first of the two options mentioned must be the expected one.
    """
    if question.get("expected_status") == "uncertain":
        return status == "uncertain"
    if status != "answered" or not text:
        return False
    kind = question.get("answer_type")
    if kind == "number":
        expected = question.get("answer_number")
        if expected is None:
            return False
        d = question.get("decimals") or 0
        given = set(_numbers(str(question.get("question", ""))))
        for x in _numbers(text):
            if x in given and x != expected:
                continue
            return round(x, d) == round(float(expected), d)
        return False
    if kind == "yes_no":
        m = re.search(r"\b(yes|no)\b", text.casefold())
        return bool(m) and m.group(1) == question.get("answer")
    expected = _norm(str(question.get("answer", "")))
    t = f" {_norm(text)} "
    if not expected or f" {expected} " not in t:
        return False
    opts = question.get("options")
    if opts:
        pos = {o: t.find(f" {_norm(o)} ") for o in opts}
        first = min((p, o) for o, p in pos.items() if p >= 0)[1]
        return _norm(first) == expected
    return True
