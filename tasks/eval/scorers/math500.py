"""MATH-500 scorer (``math``): the final answer and the gold compared symbolically/numerically with sympy.

Tuples, intervals, sets, ``\\pm``, equations, matrices, units and degrees are handled; otherwise a
normalised string match. The text -> sympy parser is :mod:`tasks.eval.scorers.latex`.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from tasks.eval.scorers.base import _ANSWER_IS, Score, _ok, last_boxed
from tasks.eval.scorers.latex import (
    _MATH_MAX_CHARS,
    _clean_math,
    _MathParseError,
    _outer_brackets,
    _split_top,
    _to_sympy,
)


@dataclass(frozen=True)
class _M:
    kind: str  # text | expr | seq | set | eq | union | matrix
    value: Any = None
    open: str = ""
    close: str = ""


def _text_norm(s: str) -> str:
    s = re.sub(r"\\(?:text|textbf|mbox|mathrm)\s*\{([^{}]*)\}", r"\1", s)
    s = s.replace("{", "").replace("}", "").replace("\\", "")
    s = re.sub(r"\s+", "", s).lower()
    m = re.fullmatch(r"\(([a-z])\)", s)
    return m.group(1) if m else s


def _parse_math(s: str, depth: int = 0) -> _M:
    if depth > 5:
        raise _MathParseError("nested too deeply")
    s = s.strip()
    if not s:
        raise _MathParseError("empty")
    if s.startswith("\\text{"):
        return _M("text", _text_norm(s))
    if re.fullmatch(r"[0-9A-Za-z]+_\{?\d+\}?", s):  # a number in a base: 52_8, 4210_{5}
        return _M("text", _text_norm(s))
    m = re.fullmatch(r"\\begin\{[pbv]?matrix\}(.*)\\end\{[pbv]?matrix\}", s, re.S)
    if m:
        rows = [r for r in re.split(r"\\\\", m.group(1)) if r.strip()]
        return _M("matrix", tuple(tuple(_parse_math(c, depth + 1) for c in r.split("&")) for r in rows))
    if "\\cup" in s:
        parts = _split_top(s, "\\cup")
        if len(parts) > 1:
            return _M("union", tuple(_parse_math(p, depth + 1) for p in parts))
    if re.fullmatch(r"-?\d{1,3}(?:,\d{3})+(?:\.\d+)?", s.replace(" ", "")):
        return _M("expr", _to_sympy(s.replace(",", "").replace(" ", "")))
    eq = _split_top(s, "=")
    if len(eq) == 2:
        return _M("eq", (_parse_math(eq[0], depth + 1), _parse_math(eq[1], depth + 1)))
    if len(eq) > 2:
        raise _MathParseError("several '='")
    br = _outer_brackets(s)
    if br is not None:
        o, inner, c = br
        items = _split_top(inner, ",")
        if len(items) > 1 or o == "{":
            vals = tuple(_parse_math(x, depth + 1) for x in items)
            return _M("set", _flat(vals)) if o == "{" else _M("seq", vals, o, c)
    items = _split_top(s, ",")
    if len(items) > 1:
        return _M("set", _flat(tuple(_parse_math(x, depth + 1) for x in items)))
    if "\\pm" in s or "\\mp" in s:
        plus = s.replace("\\pm", "+").replace("\\mp", "-")
        minus = s.replace("\\pm", "-").replace("\\mp", "+")
        return _M("set", (_parse_math(plus, depth + 1), _parse_math(minus, depth + 1)))
    return _M("expr", _to_sympy(s))


def _flat(vals: tuple) -> tuple:
    """Members of a set, with the two values of a \\pm member spliced in."""
    out: list = []
    for v in vals:
        out.extend(v.value if v.kind == "set" else (v,))
    return tuple(out)


_PROBES = ((0.5772, 1.3247, 0.1234), (1.6180, -0.7071, 2.2360), (-1.4142, 0.3010, 0.9003))


def _num(x) -> complex | None:
    try:
        v = complex(x.evalf(30))
    except (TypeError, ValueError, ArithmeticError, AttributeError):
        return None
    if not (math.isfinite(v.real) and math.isfinite(v.imag)):
        return None
    return v


def _expr_equal(a, b) -> bool:
    import sympy

    if a == b:
        return True
    if a.has(sympy.oo, -sympy.oo, sympy.zoo) or b.has(sympy.oo, -sympy.oo, sympy.zoo):
        return False
    syms = sorted(a.free_symbols | b.free_symbols, key=lambda s: s.name)
    if len(syms) > 3:
        return False
    points = [dict()] if not syms else [dict(zip(syms, p)) for p in _PROBES]
    for point in points:
        va, vb = _num(a.subs(point)), _num(b.subs(point))
        if va is None or vb is None:
            return False
        if abs(va - vb) > 1e-8 * max(1.0, abs(va), abs(vb)):
            return False
    return True


def _proportional(a, b) -> bool:
    """Two equations' (lhs - rhs) differ by a non-zero constant factor (5x+4=0 ~ 10x+8=0)."""
    syms = sorted(a.free_symbols | b.free_symbols, key=lambda s: s.name)
    if len(syms) > 3:
        return False
    ratio = None
    for p in (_PROBES if syms else [()]):
        point = dict(zip(syms, p))
        va, vb = _num(a.subs(point)), _num(b.subs(point))
        if va is None or vb is None:
            return False
        if abs(vb) < 1e-12:
            if abs(va) > 1e-12:
                return False
            continue
        r = va / vb
        if ratio is None:
            ratio = r
        elif abs(r - ratio) > 1e-8 * max(1.0, abs(r)):
            return False
    return ratio is not None and abs(ratio) > 1e-12


def _equal(p: _M, g: _M) -> bool:
    import sympy

    if p.kind == "eq" and g.kind == "eq":
        (pl, pr), (gl, gr) = p.value, g.value
        if all(x.kind == "expr" for x in (pl, pr, gl, gr)):
            return _proportional(pl.value - pr.value, gl.value - gr.value)
        return _equal(pl, gl) and _equal(pr, gr)
    if g.kind == "eq" and p.kind != "eq":  # gold "x=5", "y = 2x + 3": the prediction gives the right side
        lhs, rhs = g.value
        return lhs.kind == "expr" and isinstance(lhs.value, sympy.Symbol) and _equal(p, rhs)
    if p.kind == "eq" and g.kind != "eq":
        lhs, rhs = p.value
        return lhs.kind == "expr" and isinstance(lhs.value, sympy.Symbol) and _equal(rhs, g)
    if g.kind == "set" and p.kind in ("set", "seq"):
        return _same_multiset(p.value, g.value)
    if p.kind != g.kind:
        return False
    if p.kind == "text":
        return p.value == g.value
    if p.kind == "expr":
        return _expr_equal(p.value, g.value)
    if p.kind == "seq":
        return (p.open, p.close) == (g.open, g.close) and len(p.value) == len(g.value) and all(
            _equal(x, y) for x, y in zip(p.value, g.value))
    if p.kind in ("union", "matrix"):
        if len(p.value) != len(g.value):
            return False
        if p.kind == "matrix":
            return all(len(r1) == len(r2) and all(_equal(x, y) for x, y in zip(r1, r2))
                       for r1, r2 in zip(p.value, g.value))
        return all(_equal(x, y) for x, y in zip(p.value, g.value))
    return False


def _same_multiset(ps: Sequence[_M], gs: Sequence[_M]) -> bool:
    if len(ps) != len(gs):
        return False
    left = list(gs)
    for x in ps:
        for k, y in enumerate(left):
            if _equal(x, y):
                del left[k]
                break
        else:
            return False
    return True


def _string_form(s: str) -> str:
    return _text_norm(_clean_math(s))


def _math_answer(prediction: str) -> str:
    """The answer part of a free-text MATH prediction: last \\boxed{}, else after 'answer is', else the
    last $...$, else the text."""
    text = str(prediction or "")
    boxed = last_boxed(text)
    if boxed is not None:
        return boxed
    m = list(_ANSWER_IS.finditer(text))
    if m:
        text = text[m[-1].end():].strip()
        return text.splitlines()[0] if text else text
    plain = text.replace("\\$", "")
    spans = re.findall(r"\$\$?([^$]+)\$\$?|\\\((.+?)\\\)|\\\[(.+?)\\\]", plain, re.S)
    if spans:
        last = spans[-1]
        return next(x for x in last if x)
    return text


def math_equivalent(prediction: str, gold: str) -> tuple[bool, str]:
    """Whether two MATH answers are equivalent, and how that was decided."""
    p_raw, g_raw = _math_answer(prediction), str(gold)
    if len(p_raw) > _MATH_MAX_CHARS:
        return False, f"prediction longer than {_MATH_MAX_CHARS} characters"
    if _string_form(p_raw) == _string_form(g_raw):
        return True, "same normalised string"
    try:
        p, g = _parse_math(_clean_math(p_raw)), _parse_math(_clean_math(g_raw))
    except _MathParseError as exc:
        return False, f"different strings; not parsed as math ({exc})"
    except Exception as exc:  # sympy raising on an odd input must not crash a batch
        return False, f"different strings; parse failed ({type(exc).__name__})"
    try:
        same = _equal(p, g)
    except Exception as exc:
        return False, f"comparison failed ({type(exc).__name__})"
    return same, "sympy-equivalent" if same else "not equivalent"


def score_math(prediction: str, target: Any) -> Score:
    """MATH-500: symbolic/numeric equivalence of the prediction's final answer and the gold answer."""
    gold = target.get("answer") if isinstance(target, Mapping) else target
    if gold is None:
        return _ok(False, "no gold answer")
    if not prediction:
        return _ok(False, "empty prediction")
    ok, how = math_equivalent(prediction, str(gold))
    ext = _math_answer(prediction)
    return _ok(ok, f"{ext!r} vs {str(gold)!r}: {how}", extracted=ext)
