"""Independent recomputation: the Verifier's own program for the question, written without seeing the Planner's,
run in the sandbox. A python step whose value differs from it is rejected with both values as feedback.

Every operand check passes `print(27 + 2 * 15 - 15)` for "27 km on Monday, twice as far on Tuesday, 15 km less
than Tuesday on Wednesday": each number is in the question, only the operation is wrong. A second program that
never saw the first is the one mechanical witness of that. It runs only where it can speak: a question that
states at least two quantities (a word problem, not a lookup), a verifier model configured, once per question
(cached), and its own failure (no program, no number) decides nothing.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime, timezone
from decimal import Decimal
from typing import Callable

from infra.models import build_backend
from infra.models.base import ModelError
from infra.runtime.settings import ModelConfig
from tasks.checks.context import StepContext
from tasks.checks.quantities import check_quantities, last_number, stated_quantities
from tasks.checks.text import canonical_number
from tasks.contracts import ModelUsage, Plan, Result, ResultStatus

RECOMPUTE_SYSTEM = ("You check a word problem by solving it yourself with one short Python program. Use only the "
                    "quantities the question states. Give each quantity a named variable, compute step by step, and "
                    "print only the final number. Reply with the program in a ```python block and nothing else.")
RECOMPUTE_DEMO = [
    {"role": "user", "content": "A baker bakes 3 trays of 12 rolls and sells 20 of them. How many rolls are left?"},
    {"role": "assistant", "content": "```python\nrolls = 3 * 12\nsold = 20\nleft = rolls - sold\nprint(left)\n```"},
]
_BLOCK = re.compile(r"```(?:python|py)?\s*\n(.*?)```", re.S)


@dataclass(frozen=True)
class Recomputation:
    value: Decimal | None  # None: the independent program gave no number (it then decides nothing)
    code: str
    printed: str
    usage: ModelUsage | None
    error: str | None = None

    def detail(self) -> str:
        if self.value is None:
            return f"no independent value ({self.error or 'no number printed'})"
        return f"an independent program printed {canonical_number(str(self.value))}"


def applies(question: str) -> bool:
    """A word problem: the question states at least two quantities to compute with."""
    return len(stated_quantities(question)) >= 2


def program_of(text: str) -> str:
    """The program in a reply: its ```python block, else the reply itself."""
    m = _BLOCK.search(text)
    return (m.group(1) if m else text.strip().strip("`")).strip()


def agree(a: Decimal, b: Decimal) -> bool:
    """The same value up to float noise and the cents a program may round to (64 = 64.0, 614.25 = 614.2500001)."""
    return abs(a - b) <= max(Decimal("0.005"), abs(max(abs(a), abs(b))) * Decimal("1e-6"))


class Recomputer:
    """Writes and runs the Verifier's own program for a question (one model call and one sandbox run)."""

    def __init__(self, config: ModelConfig, rerun: Callable[[str], tuple[str, str, int | None]]):
        self.config = config
        self.backend = build_backend(config)
        self.rerun = rerun

    def recompute(self, question: str) -> tuple[Recomputation, bool]:
        """The question's recomputation, and whether this call made it (False: an earlier step's, no new cost)."""
        return _cached(self, question)

    def _compute(self, question: str) -> Recomputation:
        messages = [{"role": "system", "content": RECOMPUTE_SYSTEM}, *RECOMPUTE_DEMO,
                    {"role": "user", "content": question}]
        try:
            c = self.backend.complete(messages, json_schema=None, max_tokens=min(self.config.max_tokens, 256),
                                      temperature=0.0, seed=self.config.seed)
        except ModelError as exc:
            return Recomputation(None, "", "", None, f"model error: {exc}")
        usage = ModelUsage(model=c.model, tokens_in=c.tokens_in, tokens_out=c.tokens_out, latency_ms=c.latency_ms)
        code = program_of(c.text)
        if not code:
            return Recomputation(None, "", "", usage, "the reply holds no program")
        status, stdout, exit_code = self.rerun(code)
        if status != "ok" or exit_code not in (0, None):
            return Recomputation(None, code, stdout, usage, f"the independent program failed ({status}, exit {exit_code})")
        lines = [ln.strip() for ln in stdout.splitlines() if ln.strip()]
        value = last_number(lines[-1]) if lines else None
        unfit = _unfit(question, code, stdout) if value is not None else None
        if unfit:  # the witness must pass the checks the step had to pass, or it proves nothing
            return Recomputation(None, code, stdout, usage, f"the independent program fails its own checks: {unfit}")
        return Recomputation(value, code, stdout, usage)


def _unfit(question: str, code: str, stdout: str) -> str | None:
    """Why the independent program is no witness (it ignores a quantity, prints a negative amount...), else None."""
    plan = Plan(step_id=0, sub_goal="independent recomputation", tool="python", args={"code": code})
    result = Result(step_id=0, tool="python", status=ResultStatus.ok, data={"stdout": stdout, "stderr": "", "exit_code": 0})
    out = check_quantities(StepContext(plan=plan, result=result, card=None, view=[], as_of=datetime.now(timezone.utc),
                                       question=question))
    return out.check.detail if out.failure is not None else None


_CACHE: dict[tuple[str, str], Recomputation] = {}


def _cached(r: Recomputer, question: str) -> tuple[Recomputation, bool]:
    """One recomputation per (model, question) in a process: every step of a question is checked against the same."""
    key = (r.config.model_dump_json(), question)
    if key in _CACHE:
        return _CACHE[key], False
    if len(_CACHE) > 512:
        _CACHE.clear()
    _CACHE[key] = r._compute(question)
    return _CACHE[key], True
