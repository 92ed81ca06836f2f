"""Numeric scorers (``number``: GSM8K, AIME, AMC): the prediction's final number against the target.

The final number is read from ``\\boxed{}``, ``####``, "answer is" first, else the last number, with
thousands commas, ``$``, ``%``, ``a/b`` and ``\\frac{a}{b}``; exact rational comparison (relative
tolerance 1e-6 for decimals).
"""

from __future__ import annotations

import math
import re
from fractions import Fraction
from typing import Any, Mapping

from tasks.eval.scorers.base import Score, _marked_segment, _ok

_NUM = re.compile(
    r"(?P<sign>[-\u2212])?\s*\\?\$?\s*"
    r"(?P<num>(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?|\.\d+)"
    r"(?:\s*/\s*(?P<den>\d+(?:\.\d+)?))?"
)
_FRAC = re.compile(r"\\[dt]?frac\s*\{\s*([-\d.,]+)\s*\}\s*\{\s*([-\d.,]+)\s*\}")


def parse_number(text: str) -> Fraction | None:
    """One number written as ``1,000``, ``$18``, ``18.0``, ``50%``, ``-3/4`` or ``\\frac{3}{4}``; else None."""
    got = _numbers(str(text))
    return got[0][0] if len(got) == 1 else None


def _numbers(text: str) -> list[tuple[Fraction, str]]:
    text = _FRAC.sub(r"\1/\2", text.replace("\\!", "").replace("\\,", "").replace("{,}", ","))
    out = []
    for m in _NUM.finditer(text):
        start = m.start("sign") if m.group("sign") else m.start("num")
        if start > 0 and (text[start - 1].isalnum() or text[start - 1] in "._"):
            continue  # inside a word or another number (x2, 3.4.5)
        sign = -1 if m.group("sign") else 1
        if sign < 0:
            before = text[:start].rstrip()
            if before and (before[-1].isdigit() or before[-1] in ")]}"):
                sign = 1  # a subtraction, not a negative number
        try:
            val = Fraction(m.group("num").replace(",", ""))
            if m.group("den") is not None:
                den = Fraction(m.group("den"))
                if den == 0:
                    continue
                val /= den
        except (ValueError, ZeroDivisionError):
            continue
        out.append((sign * val, m.group(0).strip()))
    return out


def extract_final_number(text: str) -> tuple[Fraction, str] | None:
    """The final answer's number: the first number of a marked segment (boxed, ####, "answer is"),
    else the last number in the text."""
    if text is None:
        return None
    text = str(text)
    seg = _marked_segment(text)
    if seg is not None:
        got = _numbers(seg)
        if got:
            return got[0]
    got = _numbers(text)
    return got[-1] if got else None


def _gold_number(target: Any) -> Fraction | None:
    if isinstance(target, Mapping):
        for key in ("answer_number", "answer"):
            v = target.get(key)
            if v is not None:
                return _gold_number(v)
        return None
    if isinstance(target, bool):
        return None
    if isinstance(target, int):
        return Fraction(target)
    if isinstance(target, float):
        return Fraction(str(target)) if math.isfinite(target) else None
    if isinstance(target, Fraction):
        return target
    got = _numbers(str(target))
    return got[-1][0] if got else None


def _close(a: Fraction, b: Fraction, rel_tol: float, abs_tol: float) -> bool:
    if a == b:
        return True
    return abs(a - b) <= max(Fraction(abs_tol), Fraction(rel_tol) * max(abs(a), abs(b)))


def numeric_match(prediction: str, target: Any, *, rel_tol: float = 1e-6, abs_tol: float = 0.0,
                  decimals: int | None = None) -> bool:
    """Final number of ``prediction`` equals the target number (within tolerance, or after rounding)."""
    return score_number(prediction, target, rel_tol=rel_tol, abs_tol=abs_tol, decimals=decimals).correct


def score_number(prediction: str, target: Any, *, rel_tol: float = 1e-6, abs_tol: float = 0.0,
                 decimals: int | None = None) -> Score:
    """Numeric equivalence of the prediction's final number and the target (GSM8K, AIME, AMC)."""
    gold = _gold_number(target)
    if gold is None:
        return _ok(False, f"target {target!r} is not a number")
    if decimals is None and isinstance(target, Mapping) and target.get("decimals") is not None:
        decimals = int(target["decimals"])
    got = extract_final_number(prediction or "")
    if got is None:
        return _ok(False, "no number in the prediction")
    val, raw = got
    if decimals is not None:
        correct = round(float(val), decimals) == round(float(gold), decimals)
    else:
        correct = _close(val, gold, rel_tol, abs_tol)
    return _ok(correct, f"{raw!r} -> {_fmt(val)} {'==' if correct else '!='} {_fmt(gold)}", extracted=raw)


def _fmt(x: Fraction) -> str:
    return str(x.numerator) if x.denominator == 1 else f"{x} (~{float(x):.6g})"
