"""Math word problems and competition math: GSM8K, AIME 2024, AMC 2023 (Qwen2.5-Math layout) and MATH-500."""

from __future__ import annotations

from fractions import Fraction
from typing import Callable

from infra.data.benchmarks.core import DatasetError, _check_unique, _Ctx, _jsonl, _question, _Rec, _rel, _take

# =============================================================================== numbers


def _canonical_number(text: str, where: str) -> str:
    """'2,125' -> '2125', '025' -> '25', '27.0' -> '27', '-3.50' -> '-3.5'."""
    s = str(text).strip().replace(",", "").replace("$", "")
    try:
        v = Fraction(s)
    except (ValueError, ZeroDivisionError):
        raise DatasetError(f"{where}: answer {text!r} is not a number") from None
    if v.denominator == 1:
        return str(v.numerator)
    return format(float(v), "g") if "/" not in s else s


# =============================================================================== readers


def _read_gsm8k(ctx: _Ctx) -> tuple[list[dict], None]:
    path = _rel(ctx, "gsm8k/test.jsonl")
    rows = _jsonl(path)
    ctx.source_questions = len(rows)
    out = []
    for line, value in _take(rows, ctx.limit):
        r = _Rec(path, line, value)
        q, a = r.get("question", str, nonempty=True), r.get("answer", str, nonempty=True)
        if "####" not in a:
            raise r.fail("field 'answer' has no '#### <number>' final answer")
        solution, final = a.rsplit("####", 1)
        out.append(_question(ctx.name, f"{line:04d}", q, _canonical_number(final, r.where), "number",
                             solution=solution.strip()))
    return out, None


def _read_qwen_math(key: str) -> Callable[[_Ctx], tuple[list[dict], None]]:
    """AIME24 / AMC23 in the Qwen2.5-Math layout: id, problem, answer, url (and solution)."""

    def read(ctx: _Ctx) -> tuple[list[dict], None]:
        path = _rel(ctx, key)
        rows = _jsonl(path)
        ctx.source_questions = len(rows)
        out = []
        for line, value in _take(rows, ctx.limit):
            r = _Rec(path, line, value)
            sid = r.get("id", (int, str))
            answer = _canonical_number(r.get("answer", (str, int, float)), r.where)
            extra = {"url": r.get("url", str, required=False)}
            sol = r.get("solution", str, required=False)
            if sol is not None:
                extra["solution"] = sol
            out.append(_question(ctx.name, f"{int(sid):03d}" if isinstance(sid, int) else sid,
                                 r.get("problem", str, nonempty=True), answer, "number", **extra))
        _check_unique(out, path)
        return out, None

    return read


def _read_math500(ctx: _Ctx) -> tuple[list[dict], None]:
    path = _rel(ctx, "math500/test.jsonl")
    rows = _jsonl(path)
    ctx.source_questions = len(rows)
    out = []
    for line, value in _take(rows, ctx.limit):
        r = _Rec(path, line, value)
        q = _question(ctx.name, f"{line:04d}", r.get("problem", str, nonempty=True),
                      r.get("answer", str, nonempty=True).strip(), "math",
                      solution=r.get("solution", str, required=False), subject=r.get("subject", str, required=False),
                      level=r.get("level", (int, str), required=False),
                      unique_id=r.get("unique_id", str, required=False))
        out.append(q)
    return out, None
