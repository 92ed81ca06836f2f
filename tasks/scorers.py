"""Scorers: a prediction (free text) and a target -> Score. Separate from the modules; metrics beside them.

``score(kind, prediction, target)`` picks the scorer by benchmark name (``gsm8k``, ``hotpotqa``, ...)
or answer type (``number``, ``math``, ``game24``, ``text``, ``entity``, ``yes_no``, ``world``). The target
is either a question record (a line of a prepared questions.jsonl: ``answer``, ``aliases``, ``numbers``,
...) or the bare gold value.

- ``text`` / ``entity``: SQuAD-normalised exact match (``correct``) and token F1 (``value``), best over
  the answer and its aliases (HotpotQA's rule: a yes/no answer gets no partial credit).
- ``number``: the final number of the prediction (``\\boxed{}``, ``####``, "answer is" first; else the
  last number), with thousands commas, ``$``, ``%``, ``a/b`` and ``\\frac{a}{b}``; exact rational
  comparison (relative tolerance 1e-6 for decimals).
- ``game24``: the expression is parsed with :mod:`ast` (numbers, ``+ - * /``, parentheses, ``× ÷``; never
  evaluated as code), computed with :class:`fractions.Fraction`, and must use each of the four numbers
  exactly once and equal 24.
- ``math`` (MATH-500): LaTeX-ish answers are translated by our own small parser into sympy objects
  (never ``eval``/``sympify`` of model text) and compared symbolically/numerically; tuples, intervals,
  sets, ``\\pm``, equations, matrices, units and degrees are handled; otherwise a normalised string match.
- ``yes_no`` and ``number`` helpers with tolerance serve the synthetic world; ``world`` delegates to
  :func:`infra.world.check_answer` (the rule its oracle is checked with), including ``uncertain``.
"""

from __future__ import annotations

import ast
import math
import re
import string
from collections import Counter
from dataclasses import dataclass
from fractions import Fraction
from typing import Any, Callable, Iterable, Mapping, Sequence

__all__ = [
    "ANSWER_TYPES",
    "BENCHMARK_ANSWER_TYPES",
    "Score",
    "accuracy",
    "answer_type_of",
    "check_game24",
    "exact_match",
    "extract_final_number",
    "math_equivalent",
    "mean_f1",
    "normalize_answer",
    "numeric_match",
    "parse_number",
    "score",
    "score_game24",
    "score_math",
    "score_number",
    "score_question",
    "score_text",
    "score_world",
    "score_yes_no",
    "token_f1",
    "yes_no_match",
]


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


# =============================================================================== text QA (SQuAD)

_ARTICLES = re.compile(r"\b(a|an|the)\b")
_PUNCT = set(string.punctuation) | {"\u2018", "\u2019", "\u201c", "\u201d", "\u2013", "\u2014"}


def normalize_answer(s: str) -> str:
    """SQuAD normalisation: lower case, no punctuation, no articles, single spaces."""
    s = str(s).lower()
    s = "".join(ch for ch in s if ch not in _PUNCT)
    s = _ARTICLES.sub(" ", s)
    return " ".join(s.split())


def exact_match(prediction: str, gold: str) -> bool:
    return normalize_answer(prediction) == normalize_answer(gold)


def token_f1(prediction: str, gold: str) -> float:
    """SQuAD token F1; as in HotpotQA's evaluation, yes/no/noanswer get no partial credit."""
    p, g = normalize_answer(prediction), normalize_answer(gold)
    if p in ("yes", "no", "noanswer") or g in ("yes", "no", "noanswer"):
        return 1.0 if p == g else 0.0
    pt, gt = p.split(), g.split()
    common = Counter(pt) & Counter(gt)
    same = sum(common.values())
    if same == 0:
        return 0.0
    precision, recall = same / len(pt), same / len(gt)
    return 2 * precision * recall / (precision + recall)


def _text_answer(prediction: str) -> str:
    seg = _marked_segment(prediction)
    text = seg if seg is not None else prediction
    text = re.sub(r"\\text\{([^{}]*)\}", r"\1", text).strip()
    if seg is not None and text:
        return text.splitlines()[0].strip()
    return " ".join(text.split())


def _golds(target: Any) -> list[str]:
    if isinstance(target, Mapping):
        golds = [target.get("answer")] + list(target.get("aliases") or target.get("answer_aliases") or [])
    elif isinstance(target, (list, tuple)):
        golds = list(target)
    else:
        golds = [target]
    out: list[str] = []
    for g in golds:
        if g is None:
            continue
        g = str(g)
        if g not in out:
            out.append(g)
    return out


def score_text(prediction: str, target: Any) -> Score:
    """Exact match (correct) and token F1 (value), best over the gold answer and its aliases."""
    golds = _golds(target)
    if not golds:
        return _ok(False, "no gold answer")
    pred = _text_answer(prediction)
    best_em, best_f1, best_g = False, 0.0, golds[0]
    for g in golds:
        em, f1 = exact_match(pred, g), token_f1(pred, g)
        if (em, f1) > (best_em, best_f1):
            best_em, best_f1, best_g = em, f1, g
    return _ok(best_em, f"{'exact match' if best_em else 'no exact match'} with {best_g!r} (F1 {best_f1:.2f})",
               extracted=pred, value=best_f1)


# =============================================================================== numbers

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


# =============================================================================== yes / no

_YES = {"yes", "true", "correct"}
_NO = {"no", "false", "incorrect"}


def _yes_no(text: str) -> str | None:
    for w in re.findall(r"[a-z]+", str(text).casefold()):
        if w in _YES:
            return "yes"
        if w in _NO:
            return "no"
    return None


def yes_no_match(prediction: str, target: Any) -> bool:
    return score_yes_no(prediction, target).correct


def score_yes_no(prediction: str, target: Any) -> Score:
    """The first yes/no word of the prediction (true/false count) equals the target's."""
    gold_text = target.get("answer") if isinstance(target, Mapping) else target
    gold = _yes_no(gold_text) if not isinstance(gold_text, bool) else ("yes" if gold_text else "no")
    if gold is None:
        return _ok(False, f"target {gold_text!r} is not yes or no")
    got = _yes_no(prediction or "")
    if got is None:
        return _ok(False, "no yes/no in the prediction")
    return _ok(got == gold, f"{got} {'==' if got == gold else '!='} {gold}", extracted=got)


# =============================================================================== game of 24

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


# =============================================================================== MATH (sympy)

_MATH_MAX_CHARS = 400
_MAX_EXPONENT = 1000
_MAX_INT_DIGITS = 60

_FUNCS = {
    "sqrt": "sqrt", "sin": "sin", "cos": "cos", "tan": "tan", "cot": "cot", "sec": "sec", "csc": "csc",
    "arcsin": "asin", "arccos": "acos", "arctan": "atan", "log": "log", "ln": "log", "exp": "exp",
}
_CONSTS = {"pi": "pi", "infty": "oo", "infinity": "oo", "inf": "oo"}
_LATEX_OPS = {"cdot": "*", "times": "*", "div": "/", "ast": "*"}
_DROP_CMDS = ("displaystyle", "left", "right", "big", "Big", "bigl", "bigr", "Bigl", "Bigr", "mathbf", "boldsymbol")


class _MathParseError(ValueError):
    pass


def _clean_math(s: str) -> str:
    """Strip presentation: $ signs, spacing commands, degrees, percent, text units, 'x \\in'."""
    s = str(s).strip()
    boxed = last_boxed(s)
    if boxed is not None:
        s = boxed
    s = s.replace("\n", " ")
    s = re.sub(r"\\!\s*", "", s)
    s = re.sub(r"(?<!\\)\\[,;:> ]|\\q?quad\b|~", " ", s)
    s = s.replace("\\$", "").replace("$", "")
    s = re.sub(r"\\[dt]frac", r"\\frac", s)
    s = re.sub(r"\^\s*\{?\s*\\circ\s*\}?|\\circ|\u00b0|\\degree", "", s)
    s = re.sub(r"\\?%", "", s)
    s = re.sub(r"\\(?:" + "|".join(_DROP_CMDS) + r")(?![A-Za-z])", "", s)
    s = s.strip()
    # a text answer: \text{Evelyn}, \text{(C)}
    m = re.fullmatch(r"\\(?:text|textbf|mbox|mathrm)\s*\{([^{}]*)\}", s)
    if m:
        return "\\text{" + m.group(1).strip() + "}"
    # units after a quantity: 5.4 \text{ cents}, 864 \mbox{ inches}^2, \frac{270}7\text{ degrees}
    s = re.sub(r"\\(?:text|mbox|mathrm)\s*\{\s*[A-Za-z][A-Za-z .]*\}(?:\^\s*\{?\d\}?)?", " ", s).strip()
    s = re.sub(r"\\(?:text|mbox|mathrm)\s*\{([^{}]*)\}", r"\1", s)
    s = re.sub(r"^[A-Za-z]\s*\\in\s*", "", s)
    s = s.rstrip(". ")
    return s.strip()


def _split_top(s: str, sep: str) -> list[str]:
    """Split on ``sep`` at bracket depth 0."""
    parts, depth, cur, i = [], 0, [], 0
    while i < len(s):
        if s.startswith("\\{", i) or s.startswith("\\}", i):
            depth += 1 if s[i + 1] == "{" else -1
            cur.append(s[i:i + 2])
            i += 2
            continue
        c = s[i]
        if c in "([{":
            depth += 1
        elif c in ")]}":
            depth -= 1
        if depth == 0 and s.startswith(sep, i):
            parts.append("".join(cur))
            cur = []
            i += len(sep)
            continue
        cur.append(c)
        i += 1
    parts.append("".join(cur))
    return parts


def _outer_brackets(s: str) -> tuple[str, str, str] | None:
    """(open, inner, close) when one bracket pair spans ``s``: ( ) [ ] \\{ \\} and the half-open mixes."""
    if s.startswith("\\{") and s.endswith("\\}"):
        o, c, inner = "{", "}", s[2:-2]
    elif s[:1] in "([" and s[-1:] in ")]":
        o, c, inner = s[0], s[-1], s[1:-1]
    else:
        return None
    depth = 0
    for ch in inner:  # the outer pair must enclose everything: no depth below zero inside
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
            if depth < 0:
                return None
    return (o, inner, c) if depth == 0 else None


# ---- LaTeX-ish text -> token list -> ast -> sympy (no eval anywhere)

_TOKEN = re.compile(r"\s*(?:(?P<num>\d+(?:\.\d*)?(?:[eE][-+]?\d+)?|\.\d+)|(?P<cmd>\\[A-Za-z]+)|(?P<word>[A-Za-z]+)"
                    r"|(?P<op>\*\*|[-+*/^(),{}\[\]_|=])|(?P<uni>[×÷·\u2212\u22c5√π∞]))")


def _tokens(s: str) -> list[str]:
    out, pos = [], 0
    s = s.strip()
    while pos < len(s):
        m = _TOKEN.match(s, pos)
        if not m or m.end() == pos:
            raise _MathParseError(f"unexpected character {s[pos]!r}")
        pos = m.end()
        if m.group("num"):
            out.append(m.group("num"))
        elif m.group("cmd"):
            out.append(m.group("cmd"))
        elif m.group("word"):
            w = m.group("word")
            if w.lower() in _FUNCS or w.lower() in _CONSTS:
                out.append("\\" + w.lower())
            else:
                out.extend(w)  # implicit product of one-letter symbols: "ab" = a*b
        elif m.group("op"):
            out.append(m.group("op"))
        else:
            out.append({"×": "*", "÷": "/", "·": "*", "\u22c5": "*", "\u2212": "-", "√": "\\sqrt", "π": "\\pi",
                        "∞": "\\infty"}[m.group("uni")])
    return out


class _Converter:
    """Tokens of a LaTeX-ish expression -> Python-syntax tokens (then ast, then sympy)."""

    def __init__(self, toks: list[str]):
        self.t, self.i = toks, 0

    def peek(self) -> str | None:
        return self.t[self.i] if self.i < len(self.t) else None

    def take(self) -> str:
        if self.i >= len(self.t):
            raise _MathParseError("unexpected end")
        tok = self.t[self.i]
        self.i += 1
        return tok

    def group(self) -> list[str]:
        """One argument: a {...} group, or a single token (\\frac43, \\sqrt2, x^2)."""
        tok = self.take()
        if tok == "{":
            return self.seq(until="}")
        if tok in ("(", "["):
            inner = self.seq(until=")" if tok == "(" else "]")
            return ["("] + inner + [")"]
        if tok.startswith("\\"):
            return self.command(tok)
        if re.fullmatch(r"\d+", tok) and len(tok) > 1:
            # \frac43 means 4/3: a bare digit run as argument gives its first digit
            self.t.insert(self.i, tok[1:])
            return [tok[0]]
        return [tok]

    def command(self, cmd: str) -> list[str]:
        name = cmd[1:]
        if name == "frac":
            a, b = self.group(), self.group()
            return ["(", "("] + a + [")", "/", "("] + b + [")", ")"]
        if name == "sqrt":
            if self.peek() == "[":
                self.take()
                n = self.seq(until="]")
                x = self.group()
                return ["(", "("] + x + [")", "**", "(", "1", "/", "("] + n + [")", ")", ")"]
            return ["sqrt", "("] + self.group() + [")"]
        if name in _FUNCS:
            fn = _FUNCS[name]
            if self.peek() == "^":  # \sin^2 x
                raise _MathParseError("powers of functions are not supported")
            if self.peek() == "(":
                self.take()
                return [fn, "("] + self.seq(until=")") + [")"]
            return [fn, "("] + self.group() + [")"]
        if name in _CONSTS:
            return [_CONSTS[name]]
        if name in _LATEX_OPS:
            return [_LATEX_OPS[name]]
        raise _MathParseError(f"unsupported command {cmd}")

    def seq(self, until: str | None = None) -> list[str]:
        out: list[str] = []
        while True:
            tok = self.peek()
            if tok is None:
                if until is not None:
                    raise _MathParseError(f"missing {until!r}")
                return out
            self.take()
            if tok == until:
                return out
            if tok in ("}", ")", "]"):
                raise _MathParseError(f"unbalanced {tok!r}")
            if tok == "{":
                out += ["("] + self.seq(until="}") + [")"]
            elif tok == "(":
                out += ["("] + self.seq(until=")") + [")"]
            elif tok == "[":
                out += ["("] + self.seq(until="]") + [")"]
            elif tok == "^":
                out += ["**", "("] + self.group() + [")"]
            elif tok.startswith("\\"):
                if tok == "\\frac" and out and re.fullmatch(r"\d+", out[-1]) and (
                        len(out) == 1 or out[-2] in ("+", "-", "(", ",")):
                    frac = self.command(tok)
                    if len(frac) == 9 and frac[2].isdigit() and frac[6].isdigit():
                        # mixed number: 1\frac{4}{5} = 1 + 4/5
                        out = out[:-1] + ["(", out[-1], "+"] + frac + [")"]
                    else:
                        out += frac
                    continue
                out += self.command(tok)
            elif tok in ("_", "|", "=", ","):
                raise _MathParseError(f"unsupported {tok!r} inside an expression")
            else:
                out.append(tok)


_OPERAND_END = re.compile(r"\d+(?:\.\d*)?(?:[eE][-+]?\d+)?|\.\d+|[A-Za-z]|pi|oo|\)")
_OPERAND_START = re.compile(r"\d+(?:\.\d*)?(?:[eE][-+]?\d+)?|\.\d+|[A-Za-z]|pi|oo|\("
                            r"|sqrt|sin|cos|tan|cot|sec|csc|asin|acos|atan|log|exp")
_FUNC_NAMES = set(_FUNCS.values())


def _implicit_products(toks: list[str]) -> list[str]:
    out: list[str] = []
    for tok in toks:
        if out:
            prev = out[-1]
            if (_OPERAND_END.fullmatch(prev) and prev not in _FUNC_NAMES and _OPERAND_START.fullmatch(tok)):
                out.append("*")
        out.append(tok)
    return out


def _to_sympy(text: str):
    import sympy

    toks = _tokens(text)
    if not toks:
        raise _MathParseError("empty")
    conv = _Converter(toks)
    py = _implicit_products(conv.seq())
    src = " ".join(py)
    try:
        tree = ast.parse(src, mode="eval")
    except (SyntaxError, ValueError, RecursionError, MemoryError) as exc:
        raise _MathParseError(f"not an expression: {src!r}") from exc

    funcs = {"sqrt": sympy.sqrt, "sin": sympy.sin, "cos": sympy.cos, "tan": sympy.tan, "cot": sympy.cot,
             "sec": sympy.sec, "csc": sympy.csc, "asin": sympy.asin, "acos": sympy.acos, "atan": sympy.atan,
             "log": sympy.log, "exp": sympy.exp}
    consts = {"pi": sympy.pi, "oo": sympy.oo, "i": sympy.I, "e": sympy.E}

    def number(tok: str):
        if "e" in tok.lower():
            mant, _, exp = tok.lower().partition("e")
            if abs(int(exp)) > _MAX_EXPONENT:
                raise _MathParseError("exponent too large")
            return sympy.Rational(mant) * sympy.Integer(10) ** int(exp)
        if len(tok.replace(".", "")) > _MAX_INT_DIGITS:
            raise _MathParseError("number too long")
        return sympy.Rational(tok)

    def walk(node: ast.AST):
        if isinstance(node, ast.Expression):
            return walk(node.body)
        if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)) and not isinstance(node.value, bool):
            return number(ast.get_source_segment(src, node) or repr(node.value))
        if isinstance(node, ast.Name):
            if node.id in consts:
                return consts[node.id]
            if len(node.id) == 1 and node.id.isalpha():
                return sympy.Symbol(node.id)
            raise _MathParseError(f"unknown name {node.id!r}")
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.UAdd, ast.USub)):
            v = walk(node.operand)
            return -v if isinstance(node.op, ast.USub) else v
        if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Add, ast.Sub, ast.Mult, ast.Div, ast.Pow)):
            a, b = walk(node.left), walk(node.right)
            if isinstance(node.op, ast.Add):
                return a + b
            if isinstance(node.op, ast.Sub):
                return a - b
            if isinstance(node.op, ast.Mult):
                return a * b
            if isinstance(node.op, ast.Div):
                if b == 0:
                    raise _MathParseError("division by zero")
                return a / b
            if b.is_number and (not b.is_finite or abs(b) > _MAX_EXPONENT):
                raise _MathParseError("exponent too large")
            if (a.is_number and b.is_number and b.is_real and b > 0 and abs(a) > 10
                    and float(b) * math.log10(float(abs(a))) > _MAX_EXPONENT):
                raise _MathParseError("power too large")
            return a ** b
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in funcs \
                and len(node.args) == 1 and not node.keywords:
            return funcs[node.func.id](walk(node.args[0]))
        raise _MathParseError(f"not allowed: {type(node).__name__}")

    try:
        return walk(tree)
    except RecursionError as exc:
        raise _MathParseError("nested too deeply") from exc


# ---- structured answers


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


# =============================================================================== the synthetic world


def score_world(prediction: str, target: Mapping, status: str = "answered") -> Score:
    """The synthetic world's own rule (:func:`infra.world.check_answer`): numbers, entities, yes/no, uncertain."""
    from infra.world import check_answer

    if not isinstance(target, Mapping):
        raise TypeError("the world scorer needs the question record as its target")
    ok = check_answer(target, prediction, status)
    expected = "uncertain" if target.get("expected_status") == "uncertain" else repr(target.get("answer"))
    return _ok(ok, f"{'matches' if ok else 'does not match'} expected {expected} ({target.get('answer_type')}, "
                   f"status {status})", extracted=prediction)


# =============================================================================== dispatch

ANSWER_TYPES: dict[str, Callable[[str, Any], Score]] = {
    "text": score_text,
    "entity": score_text,
    "number": score_number,
    "math": score_math,
    "game24": score_game24,
    "yes_no": score_yes_no,
    "world": score_world,
}

BENCHMARK_ANSWER_TYPES: dict[str, str] = {
    "gsm8k": "number",
    "aime24": "number",
    "amc23": "number",
    "math500": "math",
    "game24": "game24",
    "game24-1362": "game24",
    "hotpotqa": "text",
    "hotpotqa-train": "text",
    "musique": "text",
    "musique-train": "text",
    "bamboogle": "text",
    "world": "world",
}


def answer_type_of(kind: str) -> str:
    """The answer type a benchmark name or answer type is scored as."""
    if kind in ANSWER_TYPES:
        return kind
    if kind in BENCHMARK_ANSWER_TYPES:
        return BENCHMARK_ANSWER_TYPES[kind]
    raise KeyError(f"unknown benchmark or answer type {kind!r}; known: "
                   f"{sorted(set(ANSWER_TYPES) | set(BENCHMARK_ANSWER_TYPES))}")


def score(benchmark_or_answer_type: str, prediction: str | None, target: Any, *, status: str = "answered") -> Score:
    """Score ``prediction`` against ``target`` (a question record or a bare gold value).

    ``status`` (the Answer's status) matters only for the world, whose conflicting-source questions
    expect ``uncertain``; elsewhere a prediction that is not ``answered`` is scored on its text.
    """
    kind = answer_type_of(benchmark_or_answer_type)
    if kind == "world":
        return score_world(prediction or "", target, status)
    if prediction is None or not str(prediction).strip():
        return _ok(False, "no prediction")
    return ANSWER_TYPES[kind](str(prediction), target)


def score_question(question: Mapping, prediction: str | None, *, status: str = "answered") -> Score:
    """Score against a prepared question record, with the scorer of its benchmark (or answer type)."""
    bench = question.get("benchmark")
    kind = bench if bench in BENCHMARK_ANSWER_TYPES else question.get("answer_type")
    return score(kind, prediction, question, status=status)
