"""Check 6: a machine-checkable success criterion (== X, contains X, between A and B, assert EXPR) holds."""

from __future__ import annotations

import ast
import re
from decimal import Decimal

from tasks.checks.context import Outcome, StepContext, failed, passed, undecided
from tasks.checks.structure import _evidence_units
from tasks.checks.text import canonical_number, contains_value, numbers_in, same_value, tokens
from tasks.contracts import FailureType

# =============================================================================== 6. assertion from the success criterion

_QUOTED = r"(?:\"([^\"]+)\"|'([^']+)')"
_NUM = r"(-?\d[\d,]*(?:\.\d+)?)"
_EQ = re.compile(rf"^\s*(?:(?:stdout|output|value|result|answer|it)\s*)?(?:==|=|equals|is|prints|should print|must print|"
                 rf"should be|must be)\s*(?:{_QUOTED}|{_NUM})\s*\.?\s*$", re.I)
_CONTAINS = re.compile(rf"^\s*(?:(?:stdout|output|value|result|evidence|passage|it)\s*)?(?:contains|mentions|states|includes)"
                       rf"\s*(?:{_QUOTED}|{_NUM})\s*\.?\s*$", re.I)
_BETWEEN = re.compile(rf"^\s*(?:(?:stdout|output|value|result|answer|it)\s*)?(?:is\s*)?between\s*{_NUM}\s*and\s*{_NUM}\s*\.?\s*$", re.I)
_ASSERT = re.compile(r"^\s*assert\s+(.+?)\s*$", re.I | re.S)


def _criterion_value(ctx: StepContext) -> str:
    if ctx.claim is not None:
        return ctx.claim.value
    _, text = _evidence_units(ctx)
    return text


def check_assertion(ctx: StepContext) -> Outcome:
    """When the plan's success criterion is machine-checkable (== X, contains X, between A and B, assert EXPR), it holds."""
    name = "assertion"
    crit = ctx.plan.success_criterion.strip()
    if not crit:
        return passed(name, "n/a: no success criterion")
    value = _criterion_value(ctx)
    m = _EQ.match(crit)
    if m:
        want = next(g for g in m.groups() if g is not None)
        ok = same_value(value, want) or tokens(value) == tokens(want)
        return passed(name, f"value == {want}") if ok else failed(
            name, f"expected {want!r}, got {value[:80]!r}", FailureType.assertion,
            f"the success criterion expects {want} but the step gives {value[:80]}")
    m = _CONTAINS.match(crit)
    if m:
        want = next(g for g in m.groups() if g is not None)
        _, text = _evidence_units(ctx)
        ok = contains_value(value, want) or contains_value(text, want)
        return passed(name, f"contains {want}") if ok else failed(
            name, f"{want!r} not found", FailureType.assertion, f"the success criterion expects the evidence to state {want}; it does not")
    m = _BETWEEN.match(crit)
    if m:
        lo, hi = Decimal(canonical_number(m.group(1))), Decimal(canonical_number(m.group(2)))
        nums = numbers_in(tokens(value))
        ok = bool(nums) and lo <= nums[0] <= hi
        return passed(name, f"{lo} <= value <= {hi}") if ok else failed(
            name, f"{value[:60]!r} not in [{lo}, {hi}]", FailureType.assertion,
            f"the success criterion expects a value between {lo} and {hi}; the step gives {value[:60]}")
    m = _ASSERT.match(crit)
    if m and ctx.options.rerun is not None:
        stdout = str((ctx.result.data or {}).get("stdout") or "") if isinstance(ctx.result.data, dict) else ""
        program = (f"value = {value!r}\nstdout = {stdout!r}\n"
                   "try:\n    num = float(value.replace(',', '').split()[0])\nexcept (ValueError, IndexError):\n    num = None\n"
                   f"try:\n    ok = bool({m.group(1)})\nexcept AssertionError:\n    ok = False\n"
                   "except Exception as exc:\n    print('error', type(exc).__name__)\n    raise SystemExit(3)\n"
                   "print('pass' if ok else 'fail')\n")
        try:
            ast.parse(program)
        except SyntaxError:
            return undecided(name, f"the success criterion {crit[:80]!r} is not a valid expression")
        status, out, exit_code = ctx.options.rerun(program)
        if status == "ok" and out.strip() == "pass":
            return passed(name, f"assert {m.group(1)[:80]}")
        if status == "ok" and out.strip() == "fail":
            return failed(name, f"assertion false: {m.group(1)[:80]}", FailureType.assertion,
                          f"the step fails its success criterion ({m.group(1)[:80]}) with value {value[:60]}")
        return undecided(name, f"the success criterion {crit[:80]!r} could not be evaluated ({out.strip()[:40] or status})")
    return passed(name, "n/a: criterion is not machine-checkable")
