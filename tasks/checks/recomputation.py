"""Check 5: a python step's claim is what its program prints, its operands are grounded in the question or
the evidence, and re-running it in the sandbox prints the same."""

from __future__ import annotations

import ast
import re
from decimal import Decimal

from tasks.checks.context import Outcome, StepContext, failed, passed, undecided
from tasks.checks.quantities import stated_quantities
from tasks.checks.statements import _memory_claim, _memory_texts
from tasks.checks.text import canonical_number, near_number, numbers_in, same_value, tokens
from tasks.contracts import FailureType, Plan, ResultStatus

# =============================================================================== 5. recomputation

_NONDETERMINISTIC = re.compile(r"\b(random|secrets|uuid|time|datetime|os\.urandom|input|socket|urllib|requests)\b")
_TRIVIAL = {Decimal(x) for x in ("0", "0.5", "0.25", "0.75", "1.5", "24", "52", "60", "100", "365", "366", "1000",
                                 "3600", "1000000", "1000000000", "0.1", "0.01", "0.001")}


def _literals(code: str) -> list[Decimal]:
    """Numeric literals in a program that are operands (not rounding digits or exponents)."""
    try:
        tree = ast.parse(code)
    except SyntaxError:
        return []
    skip: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "round" and len(node.args) > 1:
            skip.add(id(node.args[1]))
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Pow):
            skip.add(id(node.right))
        if isinstance(node, ast.Subscript):
            skip.add(id(node.slice))
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and type(node.value) in (int, float) and id(node) not in skip:
            v = Decimal(repr(node.value)) if isinstance(node.value, float) else Decimal(node.value)
            if abs(v) > 12 and v not in _TRIVIAL and not (v == v.to_integral_value() and str(int(v)).rstrip("0") == "1"):
                out.append(v)
    return out


def _derivable(value: Decimal, numbers: set[Decimal], limit: int = 40) -> bool:
    """`value` is one arithmetic operation (+ - * /) away from two of `numbers` (checked for the first `limit`)."""
    pool = sorted(numbers, key=abs)[:limit]
    for i, a in enumerate(pool):
        for b in pool[i:]:
            candidates = [a + b, abs(a - b), a * b]
            candidates += [a / b] if b else []
            candidates += [b / a] if a else []
            if any(abs(c - value) <= abs(value) * Decimal("1e-9") for c in candidates):
                return True
    return False


def _plan_text(plan: Plan) -> str:
    return " ".join([plan.sub_goal, plan.expected_evidence, plan.success_criterion, plan.justification])


def _numbers_of(text: str) -> set[Decimal]:
    return set(numbers_in(tokens(text)))


def check_recomputation(ctx: StepContext) -> Outcome:
    """Python: the claim is what the program prints, its operands come from the evidence, and re-running it prints the same."""
    name = "recomputation"
    if ctx.result.tool != "python" or ctx.result.status is not ResultStatus.ok:
        return passed(name, "n/a: not a python result")
    code = str(ctx.plan.args.get("code", ""))
    stdout = str((ctx.result.data or {}).get("stdout") or "")
    lines = [ln.strip() for ln in stdout.splitlines() if ln.strip()]
    printed = lines[-1] if lines else ""
    notes = []
    # a. the claim is what the program printed
    if ctx.explicit and ctx.claim is not None and not same_value(ctx.claim.value, printed):
        return failed(name, f"claim {ctx.claim.value!r} but the program printed {printed!r}", FailureType.recomputation,
                      f"the step claims {ctx.claim.value} but its program prints {printed}; report what the program computes")
    # b. operands come from the plan or the evidence
    cited_ids = [c for c in (ctx.claim.cites if ctx.explicit and ctx.claim else []) if ctx.memory_item(c)]
    # Given data: the question when it is known (a number the model writes into its own plan grounds nothing),
    # else the plan's text (callers that only have the step).
    plan_nums = _numbers_of(ctx.question) if ctx.question else _numbers_of(_plan_text(ctx.plan))
    if ctx.question:  # 'three $50 notes', 'twice as far', 'three-quarters': quantities written as words
        plan_nums |= {Decimal(n) for _, ways in stated_quantities(ctx.question) for way in ways for n in way}
    scope = [ctx.memory_item(c) for c in cited_ids] if cited_ids else ctx.view
    evid_nums: dict[Decimal, str] = {}
    for item in scope:
        for where, text, _, _ in _memory_texts(item):
            for n in _numbers_of(text):
                evid_nums.setdefault(n, where)
        mc = _memory_claim(item)
        if mc:
            for n in _numbers_of(mc[0].value):
                evid_nums.setdefault(n, item.id)
    open_q = None
    for lit in _literals(code):
        if lit in plan_nums or lit in evid_nums:
            continue
        near = next(((n, w) for n, w in list(evid_nums.items()) + [(n, "the plan") for n in plan_nums]
                     if abs(n) > 12 and near_number(lit, n)), None)
        if cited_ids or near:
            src = f"{near[1]} states {canonical_number(str(near[0]))}" if near else f"cited {', '.join(cited_ids)}"
            return failed(name, f"operand {canonical_number(str(lit))} is not in the evidence ({src})", FailureType.recomputation,
                          f"the program uses {canonical_number(str(lit))}, which no cited evidence states ({src}); "
                          "recompute with the verified values")
        if ctx.view or plan_nums:
            grounded = plan_nums | set(evid_nums)
            if _derivable(lit, grounded):  # an intermediate value written out (20 candles / 10 per pound -> 2)
                continue
            if grounded:
                return failed(name, f"operand {canonical_number(str(lit))} is neither in the plan, nor in accepted evidence, "
                              "nor one operation away from their numbers", FailureType.recomputation,
                              f"the program uses {canonical_number(str(lit))}, which neither the question nor the evidence "
                              "gives; use the stated values")
            open_q = f"operand {canonical_number(str(lit))} appears neither in the plan nor in accepted evidence"
        elif ctx.question:  # the question states no number and nothing is verified yet: the value was recalled
            return failed(name, f"operand {canonical_number(str(lit))}: the question states no number and no evidence is "
                          "accepted yet", FailureType.unsupported,
                          f"the program uses {canonical_number(str(lit))}, a number from memory: neither the question nor "
                          "any verified evidence gives it; find it with a tool that cites a source")
    if open_q is None:
        notes.append("operands grounded")
    # c. re-run deterministic programs
    if not ctx.options.recompute or ctx.options.rerun is None:
        notes.append("not re-run (disabled)")
    elif _NONDETERMINISTIC.search(code):
        notes.append("not re-run (non-deterministic program)")
    elif ctx.result.elapsed_ms > ctx.options.recompute_max_ms:
        notes.append(f"not re-run (took {ctx.result.elapsed_ms:.0f} ms)")
    else:
        status, again, exit_code = ctx.options.rerun(code)
        if status == "timeout":
            return undecided(name, "re-running the program timed out")
        if status != "ok" or exit_code not in (0, None):
            return failed(name, f"re-run failed: {status} exit {exit_code}", FailureType.recomputation,
                          "the program does not run reproducibly; simplify it so that it prints the value")
        if tokens(again) != tokens(stdout):
            return failed(name, f"re-run printed {again.strip()[:80]!r}, result says {stdout.strip()[:80]!r}",
                          FailureType.recomputation,
                          f"re-running the program printed {again.strip()[:80]}, not {stdout.strip()[:80]}; the result was altered")
        notes.append("re-run matches")
    if open_q:
        return undecided(name, open_q)
    return passed(name, "; ".join(notes))
