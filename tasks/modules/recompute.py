"""Independent recomputation: the Verifier's own programs for the question, written without seeing the Planner's,
run in the sandbox. A python step is rejected only when a quorum of them agrees on one other value, with both
values as feedback.

Every operand check passes `print(27 + 2 * 15 - 15)` for "27 km on Monday, twice as far on Tuesday, 15 km less
than Tuesday on Wednesday": each number is in the question, only the operation is wrong. A second program that
never saw the first is the one mechanical witness of that. But a small judge solves fewer problems than the
Planner: one greedy program from the 0.5B rejected 17 of 45 correct GSM8K programs that every check passed
(docs/verifier-eval.md). So the Verifier draws up to `samples` programs (the first greedy, the rest sampled); one
that reproduces the step's value passes it at once, and only `quorum` programs agreeing on one other value reject
it. It runs only where it can speak: a question that states at least two quantities (a word problem, not a
lookup), a step that printed a number, a verifier model configured; the programs of a question are drawn once
(cached) and reused by its later steps; a program that fails, prints no number or fails the step's own checks
is no witness.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timezone
from decimal import Decimal
from typing import Callable

from infra.models import build_backend
from infra.models.base import ModelError
from infra.runtime.settings import ModelConfig
from tasks.checks.context import StepContext
from tasks.checks.quantities import check_quantities, last_printed, stated_quantities
from tasks.checks.text import canonical_number
from tasks.contracts import ModelUsage, Plan, Result, ResultStatus
from tasks.modules.programs import program_of, total_usage

RECOMPUTE_SYSTEM = ("You check a word problem by solving it yourself with one short Python program. Use only the "
                    "quantities the question states. Give each quantity a named variable, compute step by step, and "
                    "print only the final number. Reply with the program in a ```python block and nothing else.")
RECOMPUTE_DEMO = [
    {"role": "user", "content": "A baker bakes 3 trays of 12 rolls and sells 20 of them. How many rolls are left?"},
    {"role": "assistant", "content": "```python\nrolls = 3 * 12\nsold = 20\nleft = rolls - sold\nprint(left)\n```"},
]


@dataclass(frozen=True)
class Recomputation:
    """One independent program and what it printed."""

    value: Decimal | None  # None: the program gave no usable number (it then decides nothing)
    code: str
    printed: str
    usage: ModelUsage | None
    error: str | None = None  # why there is no value


@dataclass
class Agreement:
    """What the independent programs say of one step's value."""

    programs: list[Recomputation]  # those consulted for this step, in order
    quorum: int
    against: Decimal | None = None  # the value `quorum` programs agree on, not the step's: the step is rejected
    matched: bool = False  # a program reproduced the step's value
    usage: ModelUsage | None = None  # what the programs drawn for this step cost (None: all drawn before)

    @property
    def rejects(self) -> bool:
        return self.against is not None

    def detail(self) -> str:
        values = [canonical_number(str(p.value)) if p.value is not None else f"no value ({(p.error or 'no number printed')[:100]})"
                  for p in self.programs]
        seen = f"{len(self.programs)} independent program(s): {'; '.join(values) or 'none'}"
        if self.matched:
            return f"{seen}; one reproduces the step's value"
        if self.rejects:
            return f"{seen}; {self.quorum} agree on {canonical_number(str(self.against))}, not the step's value"
        return f"{seen}; no {self.quorum} agree on another value: nothing decided"


def applies(question: str) -> bool:
    """A word problem: the question states at least two quantities to compute with."""
    return len(stated_quantities(question)) >= 2


def agree(a: Decimal, b: Decimal) -> bool:
    """The same value up to float noise and the cents a program may round to (64 = 64.0, 614.25 = 614.2500001)."""
    return abs(a - b) <= max(Decimal("0.005"), abs(max(abs(a), abs(b))) * Decimal("1e-6"))


def tally(values: list[Decimal]) -> tuple[Decimal | None, int]:
    """The value most programs agree on (up to `agree`) and how many agree on it."""
    best, votes = None, 0
    for v in values:
        n = sum(agree(v, w) for w in values)
        if n > votes:
            best, votes = v, n
    return best, votes


class Recomputer:
    """Writes and runs the Verifier's own programs for a question: one model call and one sandbox run each."""

    def __init__(self, config: ModelConfig, rerun: Callable[[str], tuple[str, str, int | None]], *, samples: int = 1,
                 quorum: int = 1, temperature: float = 0.7):
        if not 1 <= quorum <= samples:
            raise ValueError(f"independent programs: quorum {quorum} must be between 1 and samples {samples}")
        self.config = config
        self.backend = build_backend(config)
        self.rerun = rerun
        self.samples, self.quorum, self.temperature = samples, quorum, temperature

    def check(self, question: str, step_value: Decimal) -> Agreement:
        """Consult the question's programs in order, drawing more only while they can still decide: stop at the
        first that reproduces `step_value` (pass), at `quorum` agreeing on another value (reject), or when the
        programs left cannot make a quorum (nothing decided)."""
        drawn = _programs(self.config, question)
        spent: list[ModelUsage] = []
        out = Agreement(programs=[], quorum=self.quorum)
        values: list[Decimal] = []
        for k in range(self.samples):
            if k == len(drawn):
                drawn.append(self._compute(question, k))
                if drawn[k].usage is not None:
                    spent.append(drawn[k].usage)
            program = drawn[k]
            out.programs.append(program)
            if program.value is not None:
                if agree(program.value, step_value):
                    out.matched = True
                    break
                values.append(program.value)
            best, votes = tally(values)
            if votes >= self.quorum:
                out.against = best
                break
            if votes + self.samples - k - 1 < self.quorum:
                break  # the programs left cannot make a quorum
        out.usage = total_usage(spent)
        return out

    def _compute(self, question: str, k: int) -> Recomputation:
        """The k-th program: greedy first, then sampled (a fixed seed per k: the same question, the same programs)."""
        messages = [{"role": "system", "content": RECOMPUTE_SYSTEM}, *RECOMPUTE_DEMO,
                    {"role": "user", "content": question}]
        temperature, seed = (0.0, self.config.seed) if k == 0 else (self.temperature, (self.config.seed or 0) + k)
        try:
            c = self.backend.complete(messages, json_schema=None, max_tokens=min(self.config.max_tokens, 256),
                                      temperature=temperature, seed=seed)
        except ModelError as exc:
            return Recomputation(None, "", "", None, f"model error: {exc}")
        usage = ModelUsage(model=c.model, tokens_in=c.tokens_in, tokens_out=c.tokens_out, latency_ms=c.latency_ms)
        code = program_of(c.text)
        if not code:
            return Recomputation(None, "", "", usage, "the reply holds no program")
        status, stdout, exit_code = self.rerun(code)
        if status != "ok" or exit_code not in (0, None):
            return Recomputation(None, code, stdout, usage, f"the independent program failed ({status}, exit {exit_code})")
        value = last_printed(stdout)[1]
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


# The programs drawn per (model, question) in a process: every step of a question is checked against the same ones,
# and a later step draws more only when the earlier ones did not decide it.
_CACHE: dict[tuple[str, str], list[Recomputation]] = {}


def _programs(config: ModelConfig, question: str) -> list[Recomputation]:
    if len(_CACHE) > 512:
        _CACHE.clear()
    return _CACHE.setdefault((config.model_dump_json(), question), [])
