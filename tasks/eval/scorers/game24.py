"""Game of 24 scorer: the prediction's expression must use each of the four numbers once and equal 24.

The expression is parsed with :mod:`ast` (numbers, ``+ - * /``, parentheses, ``× ÷``; never evaluated as
code) and computed with :class:`fractions.Fraction`.
"""

from __future__ import annotations

import ast
import re
from fractions import Fraction
from typing import Any, Mapping, Sequence

from tasks.eval.scorers.base import Score, _ok, last_boxed

_G24_MAX_CHARS = 200
_G24_CHARS = re.compile(r"[0-9\s+\-*/()×÷xX\u2212\u00b7\u22c5]+")


def _g24_numbers(target: Any) -> list[int] | None:
    if isinstance(target, Mapping):
        target = target.get("numbers") or target.get("answer")
    if isinstance(target, str):
        target = re.findall(r"\d+", target)
    try:
        nums = [int(x) for x in target]
    except (TypeError, ValueError):
        return None
    return nums if len(nums) == 4 else None


class _G24Error(ValueError):
    pass


def _g24_eval(node: ast.AST, used: list[int]) -> Fraction:
    if isinstance(node, ast.Expression):
        return _g24_eval(node.body, used)
    if isinstance(node, ast.Constant) and type(node.value) is int:
        used.append(node.value)
        return Fraction(node.value)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.UAdd, ast.USub)):
        v = _g24_eval(node.operand, used)
        return -v if isinstance(node.op, ast.USub) else v
    if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Add, ast.Sub, ast.Mult, ast.Div)):
        a, b = _g24_eval(node.left, used), _g24_eval(node.right, used)
        if isinstance(node.op, ast.Add):
            return a + b
        if isinstance(node.op, ast.Sub):
            return a - b
        if isinstance(node.op, ast.Mult):
            return a * b
        if b == 0:
            raise _G24Error("division by zero")
        return a / b
    raise _G24Error(f"not allowed: {type(node).__name__}")


def check_game24(expression: str, numbers: Sequence[int]) -> tuple[bool, str]:
    """Whether ``expression`` uses each of ``numbers`` exactly once with + - * / and equals 24 exactly."""
    expr = (expression or "").strip()
    if not expr:
        return False, "empty expression"
    if len(expr) > _G24_MAX_CHARS:
        return False, f"expression longer than {_G24_MAX_CHARS} characters"
    expr = (expr.replace("×", "*").replace("÷", "/").replace("\u2212", "-").replace("\u00b7", "*")
            .replace("\u22c5", "*").replace("x", "*").replace("X", "*"))
    if not re.fullmatch(r"[0-9\s+\-*/()]+", expr):
        return False, "only numbers, + - * /, × ÷ and parentheses are allowed"
    if "**" in expr or "//" in expr:
        return False, "only + - * / are allowed"
    try:
        tree = ast.parse(expr, mode="eval")
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return False, "not a well-formed arithmetic expression"
    used: list[int] = []
    try:
        value = _g24_eval(tree, used)
    except _G24Error as exc:
        return False, str(exc)
    except RecursionError:
        return False, "expression nested too deeply"
    if sorted(used) != sorted(int(n) for n in numbers):
        return False, f"uses {sorted(used)}, must use each of {sorted(numbers)} exactly once"
    if value != 24:
        return False, f"equals {value}, not 24"
    return True, "uses each number once and equals 24"


def _g24_candidates(prediction: str) -> list[str]:
    text = prediction or ""
    boxed = last_boxed(text)
    if boxed is not None:
        text = boxed
    else:
        m = list(re.finditer(r"answer\s*(?:is|:)", text, re.IGNORECASE))
        if m:
            text = text[m[-1].end():]
    text = text.replace("\\times", "×").replace("\\div", "÷").replace("\\cdot", "·")
    text = re.sub(r"\\left|\\right", "", text).replace("\\(", " ").replace("\\)", " ")
    runs = []
    for line in text.splitlines() or [text]:
        left = line.split("=")[0] if "=" in line else line  # "(1+1+1)*8 = 24": the expression side
        for m in _G24_CHARS.finditer(left):
            run = m.group(0).strip()
            if re.search(r"\d", run) and re.search(r"[+\-*/×÷xX\u2212\u00b7\u22c5]", run):
                runs.append(run)
    return runs


def score_game24(prediction: str, target: Any) -> Score:
    """Game of 24: the prediction's expression (the last one, after "answer:" or in \\boxed{}) is checked
    with exact rational arithmetic; each of the four numbers must be used exactly once."""
    nums = _g24_numbers(target)
    if nums is None:
        return _ok(False, f"target {target!r} is not four numbers")
    cands = _g24_candidates(prediction or "")
    if not cands:
        return _ok(False, "no arithmetic expression in the prediction")
    expr = cands[-1]
    ok, why = check_game24(expr, nums)
    return _ok(ok, f"{expr!r}: {why}", extracted=expr)
