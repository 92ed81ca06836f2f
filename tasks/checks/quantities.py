"""Check 6: a python step's value fits the question it serves: the question's quantities are all used, the printed
number was computed (not written down), and the value is one the question allows (no negative count or amount,
no fraction of a whole-number count). Runs only when the loop passes the question; an error a real Planner makes
that every operand check lets through (`print(27 + 2 * 15 - 15)` uses only stated numbers) is still caught
when it leaves one out, and a negative amount of change when it does not."""

from __future__ import annotations

import ast
import re
from itertools import combinations
from decimal import Decimal, InvalidOperation

from tasks.checks.context import Outcome, StepContext, failed, passed
from tasks.checks.dataflow import printed_slice
from tasks.checks.statements import _memory_claim, _memory_texts
from tasks.checks.text import canonical_number, contains_value, numbers_in, tokens
from tasks.contracts import FailureType, ResultStatus

_SIGNED = re.compile(r"(?<![\w.])-?\d(?:[\d,]*\d)?(?:\.\d+)?(?![\w])|(?<![\w.])-?\.\d+")
_WORDS = {"twice": "2", "double": "2", "doubled": "2", "triple": "3", "tripled": "3", "dozen": "12", "dozens": "12",
          "two": "2", "three": "3", "four": "4", "five": "5", "six": "6", "seven": "7", "eight": "8", "nine": "9",
          "ten": "10", "eleven": "11", "twelve": "12", "fifteen": "15", "twenty": "20", "thirty": "30", "forty": "40",
          "fifty": "50", "hundred": "100"}
_DENOMINATORS = {"half": "2", "halves": "2", "third": "3", "thirds": "3", "quarter": "4", "quarters": "4",
                 "fifth": "5", "fifths": "5", "tenth": "10", "tenths": "10"}
_PRECISION = re.compile(r"\b(\w+)\s+(?:decimal places?|decimals|significant (?:figures|digits)|digits|places)\b")
_FRACTION = re.compile(r"\b(?:(a|one|two|three|four|nine)[- ])?(half|halves|thirds?|quarters?|fifths?|tenths?)\b", re.I)
# a negative value is an answer only to questions about these
_SIGNED_TOPICS = re.compile(r"\b(temperature|degrees?|below zero|loss|lost|lose|deficit|debt|net|change in|"
                            r"difference|decrease|drop|fell|profit|gain|balance|owe|elevation|altitude|sea level)\b", re.I)
_QUANTITY = re.compile(r"\b(how (many|much|far|long|old|tall|fast)|total|left|remain|change|cost|spend|earn|pay|"
                       r"save|weigh|number of)\b", re.I)
_COUNT = re.compile(r"\bhow many\s+(\w+)", re.I)
# "how many <unit>" may well be a fraction: 2.5 hours, 1.5 cups
_UNITS = re.compile(r"^(hours?|minutes?|seconds?|days?|weeks?|months?|years?|miles?|km|kilometers?|kilometres?|"
                    r"meters?|metres?|feet|foot|inches?|yards?|pounds?|lbs?|kg|kilograms?|grams?|ounces?|liters?|"
                    r"litres?|gallons?|cups?|quarts?|pints?|times|percent|dollars?|cents?)$", re.I)


def last_number(text: str) -> Decimal | None:
    """The last number in a text, with its sign."""
    found = _SIGNED.findall(text)
    try:
        return Decimal(found[-1].replace(",", "")) if found else None
    except InvalidOperation:
        return None


def last_printed(stdout: str) -> tuple[str | None, Decimal | None]:
    """A program's last non-empty printed line (None: it printed nothing) and the last number on that line."""
    lines = [ln.strip() for ln in stdout.splitlines() if ln.strip()]
    return (lines[-1], last_number(lines[-1])) if lines else (None, None)


_THOUSANDS_SPACED = re.compile(r"(?<=\$)\d{1,3}(?: \d{3})+(?!\d|[.,]\d)")


def _spaced_thousands(text: str) -> str:
    """'$400 000' is one amount, not 400 and 000."""
    return _THOUSANDS_SPACED.sub(lambda m: m.group(0).replace(" ", ""), text)


def _redundant(raw: str, question: str) -> bool:
    """A stated number that is the sum of two to four other numbers the question states (40 minutes = 20 + 20,
    8 customers = 3 + 2 + 3) says nothing its parts do not: a program that uses the parts has used it."""
    try:
        target = Decimal(raw.replace(",", ""))
    except InvalidOperation:
        return False
    others = [Decimal(m.group(0).replace(",", "")) for m in _SIGNED.finditer(_spaced_thousands(question))]
    if target in others:
        others.remove(target)
    others = [x for x in others if 0 < x < target][:12]
    return any(sum(c) == target for k in (2, 3, 4) for c in combinations(others, k))


_ORDINALS = ("first", "second", "third", "fourth", "fifth", "sixth", "seventh", "eighth", "ninth", "tenth")


def _enumerated(raw: str, question: str) -> bool:
    """A count the question spells out item by item is a description, not an operand: "two stops ... first ...
    second", "three kinds of flowers: marigolds, petunias and begonias"."""
    n = _WORDS.get(raw.lower(), raw)
    if not n.isdigit() or not 2 <= int(n) <= len(_ORDINALS):
        return False
    n, low = int(n), question.lower()
    if all(re.search(rf"\b{o}\b", low) for o in _ORDINALS[:n]):
        return True
    listed = re.search(rf"\b{re.escape(raw.lower())}\b[^:.?!]*:\s*([^.?!]+)", low)
    return bool(listed) and len([x for x in re.split(r",\s*|\s+and\s+|\s+or\s+", listed.group(1)) if x.strip()]) == n


def _fraction(num: str, den: str) -> str:
    return canonical_number(str((Decimal(num) / Decimal(den)).quantize(Decimal("0.0001"))))


def stated_quantities(question: str) -> list[tuple[str, list[set[str]]]]:
    """The quantities a question states: (how it says it, the ways a program may write it: any one set of
    numbers all present). 35% is 35 or 0.35; three-quarters is 0.75 or 3 and 4; twice is 2; half is 0.5 or 2."""
    out: dict[str, tuple[str, list[set[str]]]] = {}
    question = _spaced_thousands(question)
    for m in _SIGNED.finditer(question):
        raw = m.group(0)
        n = canonical_number(raw.replace(",", "").lstrip("-"))
        if n in ("0", "1"):
            continue
        ways = [{n}]
        if question[m.end():].lstrip().startswith(("%", "percent")):  # 30% less is 0.7, 25% more is 1.25
            p = Decimal(n) / 100
            ways += [{canonical_number(str(p))}, {canonical_number(str(1 + p))}] + ([{canonical_number(str(1 - p))}] if p < 1 else [])
        _, known = out.setdefault(n, (raw, []))
        known += [w for w in ways if w not in known]
    low = question.lower()
    for m in _PRECISION.finditer(low):  # "to two decimal places": how to round, not a quantity to compute with
        key = _WORDS.get(m.group(1), m.group(1))
        out.pop(canonical_number(key) if key[0].isdigit() else key, None)
    fractions = set()
    for m in _FRACTION.finditer(low):
        den = _DENOMINATORS[m.group(2)]
        num = {"a": "1", "one": "1", None: "1"}.get(m.group(1), _WORDS.get(m.group(1) or "", "1"))
        key = f"{num}/{den}"
        ways = [{_fraction(num, den)}, {num, den} - {"1"}, {den}] if num == "1" else [{_fraction(num, den)}, {num, den}]
        out.setdefault(key, (m.group(0), ways))
        fractions.update(m.group(0).replace("-", " ").split())
    precision = {m.group(1) for m in _PRECISION.finditer(low)}
    for word in re.findall(r"[a-z]+", low):
        if word in _WORDS and word not in fractions and word not in precision:
            out.setdefault(_WORDS[word], (word, [{_WORDS[word]}]))
    return list(out.values())


def program_numbers(code: str) -> tuple[set[str], bool, bool]:
    """(numbers written in the program, canonical; whether it does arithmetic; whether a printed value is a bare
    literal: a number or numeric string handed straight to print)."""
    try:
        tree = ast.parse(code)
    except SyntaxError:
        return set(), False, False
    nums: set[str] = set()
    arithmetic = bare = False
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and type(node.value) in (int, float):
            nums.add(canonical_number(repr(node.value) if isinstance(node.value, float) else str(node.value)))
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            nums |= {canonical_number(n.replace(",", "").lstrip("-")) for n in _SIGNED.findall(node.value)}
        elif isinstance(node, (ast.List, ast.Tuple, ast.Set)) and len(node.elts) > 1:
            nums.add(str(len(node.elts)))  # "3 tunas" used as a list of three weights
        elif isinstance(node, (ast.BinOp, ast.AugAssign)) or (
                isinstance(node, ast.Call) and getattr(node.func, "id", "") in ("sum", "max", "min", "round", "abs")):
            arithmetic = True
        if isinstance(node, ast.Call) and getattr(node.func, "id", "") == "print":
            bare |= any(isinstance(a, ast.Constant) and (type(a.value) in (int, float) or
                                                         (isinstance(a.value, str) and _SIGNED.search(a.value)))
                        for a in node.args)
    return nums, arithmetic, bare


def printed_operands(code: str) -> set[str]:
    """The numbers a program writes that reach what it prints (tasks/checks/dataflow.py), canonical; all the
    numbers it writes when it cannot be sliced. A number assigned and never read is not an operand."""
    sliced = printed_slice(code)
    return program_numbers(code if sliced is None else sliced)[0]


_PASSIVE_CALLS = {"print", "str", "int", "float", "repr", "format"}


def _computes_nothing(code: str) -> bool:
    """A program that only writes values down: no arithmetic, no loop or branch, no call but print and casts."""
    try:
        tree = ast.parse(code)
    except SyntaxError:
        return False
    for node in ast.walk(tree):
        if isinstance(node, (ast.BinOp, ast.AugAssign, ast.UnaryOp, ast.Compare, ast.BoolOp, ast.For, ast.While,
                             ast.If, ast.IfExp, ast.comprehension, ast.Subscript, ast.Attribute, ast.Lambda)):
            if isinstance(node, ast.UnaryOp) and isinstance(node.operand, ast.Constant):
                continue  # a negative literal
            return False
        if isinstance(node, ast.Call) and getattr(node.func, "id", None) not in _PASSIVE_CALLS:
            return False
    return True


def _in_evidence(ctx: StepContext, text: str) -> bool:
    return any(contains_value(t, text) for item in ctx.view for _, t, _, _ in _memory_texts(item))


def used_singletons(given: list[tuple[str, list[set[str]]]]) -> set[str]:
    return {n for _, ways in given for way in ways if len(way) == 1 for n in way}


def _combined(literals: set[str], stated: set[str]) -> set[str]:
    """The stated numbers a program used already combined: 150 for 3 and 50 (one + - * / of two of them)."""
    out: set[str] = set()
    nums = sorted(stated, key=lambda s: Decimal(s))[:30]
    for lit in literals - {"0", "1"}:  # 0 and 1 are any number less or over itself: they say nothing
        v = Decimal(lit)
        for i, a in enumerate(nums):
            for b in nums[i:]:
                x, y = Decimal(a), Decimal(b)
                if any(abs(c - v) <= abs(v) * Decimal("1e-9") for c in (x + y, abs(x - y), x * y) + ((x / y, y / x) if x and y else ())):
                    out |= {a, b}
    return out


def _memory_numbers(ctx: StepContext) -> tuple[set[str], set[str]]:
    """(numbers accepted evidence states, numbers earlier accepted programs wrote): both count as used."""
    stated: set[str] = set()
    written: set[str] = set()
    for item in ctx.view:
        for _, text, _, _ in _memory_texts(item):
            stated |= {canonical_number(str(n)) for n in numbers_in(tokens(text))}
        mc = _memory_claim(item)
        if mc:
            stated |= {canonical_number(str(n)) for n in numbers_in(tokens(mc[0].value))}
        if item.provenance.tool == "python" and item.args:
            written |= program_numbers(str(item.args.get("code", "")))[0]
    return stated, written


def check_quantities(ctx: StepContext) -> Outcome:
    name = "quantities"
    if ctx.result.tool != "python" or ctx.result.status is not ResultStatus.ok or not ctx.question:
        return passed(name, "n/a: not a python result of a known question")
    last, value = last_printed(str((ctx.result.data or {}).get("stdout") or ""))
    q = ctx.question
    code = str(ctx.plan.args.get("code", ""))
    if last is not None and _computes_nothing(code) and not _in_evidence(ctx, last) and (
            value is None or not any({canonical_number(str(abs(value)))} in ways for _, ways in stated_quantities(q))):
        return failed(name, f"the program computes nothing: it prints {last[:80]!r}, which no accepted evidence "
                      "states", FailureType.unsupported,
                      f"the program only writes down {last[:80]!r}; a program cannot look a fact up: find it with "
                      "a tool that cites a source, then compute with it")
    if value is None:
        return passed(name, "n/a: the program prints no number")
    written, arithmetic, bare = program_numbers(code)
    feeding = printed_operands(code)
    evidence, earlier = _memory_numbers(ctx)
    given = stated_quantities(q)
    if not given and not re.search(r"\d", q) and not evidence and not earlier:  # 0 and 1 count here
        return failed(name, f"prints {canonical_number(str(value))}, but the question states no quantity and no evidence "
                      "is accepted: every operand was made up", FailureType.unsupported,
                      "the question gives no numbers to compute with; find the values with a tool that cites a source "
                      "first, then compute with them")
    shown = canonical_number(str(abs(value)))
    # a. the printed number was computed from the question or the evidence, not written down
    if not arithmetic and bare and not any({shown} in ways for _, ways in given) and shown not in evidence:
        return failed(name, f"prints {canonical_number(str(value))} as a literal: no arithmetic, and neither the question "
                      "nor accepted evidence states it", FailureType.unsupported,
                      f"the program writes {canonical_number(str(value))} down instead of computing it; compute the "
                      "value from the question's quantities, or find it with a tool that cites a source")
    # b. every quantity the question states is used (here, or by an accepted earlier step)
    used = feeding | earlier | evidence
    used |= _combined(feeding - used_singletons(given), used_singletons(given))  # 150 for "three $50 notes"
    missing = [raw for raw, ways in given if not any(way <= used for way in ways)]
    explained = " ".join([ctx.plan.sub_goal, ctx.plan.justification]).lower()
    missing = [raw for raw in missing if raw.lower() not in explained and not _redundant(raw, q) and not _enumerated(raw, q)]
    if missing and arithmetic:
        shown_missing = ", ".join(repr(m) for m in missing[:3])
        idle = f"; it is written down but never reaches what the program prints" if any(
            any(way <= written for way in ways) for raw, ways in given if raw in missing) else ""
        return failed(name, f"the question states {shown_missing}, which the program never uses{idle}",
                      FailureType.ignored_quantity,
                      f"the question gives {shown_missing} but the printed value does not use it{idle}; use every "
                      "quantity the question states (or say in the sub-goal why one does not matter)")
    # c. the value is one the question allows
    if value < 0 and _QUANTITY.search(q) and not _SIGNED_TOPICS.search(q):
        return failed(name, f"prints {canonical_number(str(value))}: a negative value for a question about an amount",
                      FailureType.implausible_value,
                      f"the program prints {canonical_number(str(value))}, but the question asks for an amount that "
                      "cannot be negative; check the order of the subtraction and what each quantity means")
    count = _COUNT.search(q)
    if count and value != value.to_integral_value() and not _UNITS.match(count.group(1)) and not missing:
        return failed(name, f"prints {canonical_number(str(value))}: not a whole number, for 'how many {count.group(1)}'",
                      FailureType.implausible_value,
                      f"the question asks how many {count.group(1)}, a whole number, but the program prints "
                      f"{canonical_number(str(value))}; check which quantities divide which")
    return passed(name, "every stated quantity used; the value fits the question")
