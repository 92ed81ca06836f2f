"""The MATH scorer's parser: LaTeX-ish answer text -> tokens -> :mod:`ast` -> sympy, with no ``eval``.

Never ``eval``/``sympify`` of model text: our own small tokenizer and converter, then a whitelisting walk
of the parsed tree, with limits on exponents and digits (and the answer length the scorer accepts).
"""

from __future__ import annotations

import ast
import math
import re

from tasks.eval.scorers.base import last_boxed

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
