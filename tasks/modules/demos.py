"""Worked examples (few-shot demonstrations) shown to a role's model before the real prompt.

DSPy's lesson: a small model follows a demonstrated input -> output pair far better than an
instruction. Two invented worked examples (a lookup: search then answer; a calculation: python then
answer) are shown to every system in its own reply format, so a comparison stays fair: the Planner,
the monolithic agent, the Generator and the direct baseline all see the same facts. The facts are
invented (no benchmark question or world template is reused), so a demonstration cannot leak an
answer. A demonstration that needs a tool the run does not allow is left out.
A third (CHAIN, as GATED) is shown only on the Planner's turn after the answer gate refused (verifier.answer_gate,
off by default). `ModelConfig.demos=false` switches them off (strong models do not need them).

Measured on 8 synthetic-world lookup questions with the embedded SmolLM2-135M (temperature 0): the
Planner's first step searched for the question's entity in 1 of 8 cases zero-shot, 6 of 8 with one
demonstration.

The calculation is a two-step word problem solved by a program with one named line per quantity (it was a
one-line `print(7 * 48)`): Qwen2.5-Coder-0.5B copied the one-liner's shape and wrote single expressions that drop
quantities. On 16 GSM8K tuning questions (the last 16 of the test file, never used for the reported tables),
together with the Executor printing a program's last value when it prints nothing (tasks/modules/tools.py
`echo_expression`): modular 0 -> 2 of 16, monolithic 0 -> 3 of 16, same budget and model (docs/inference.md).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timezone

from tasks.contracts import ANSWER_TOOL, MemoryItem, MemoryStatus, Plan, Provenance, Result, ResultStatus, Source

_RETRIEVED = datetime(2024, 6, 1, tzinfo=timezone.utc)


@dataclass(frozen=True)
class DemoStep:
    """One worked step: a tool call and what it returned."""

    sub_goal: str
    tool: str
    tool_input: str
    justification: str
    data: dict | None = None  # the tool's result data (None for the final answer)
    source: Source | None = None
    task: str = ""  # python: what the program computes, in words (the tool_input when a second call writes the program)

    def reply(self, program_call: bool = False) -> dict[str, str]:
        """The step as a Planner (or monolithic agent) reply; with `program_call` a python step says what to compute."""
        tool_input = self.task if program_call and self.task else self.tool_input
        return {"sub_goal": self.sub_goal, "tool": self.tool, "tool_input": tool_input, "justification": self.justification}


@dataclass(frozen=True)
class DemoCase:
    """A question solved by its steps; the last step is the answer."""

    question: str
    steps: tuple[DemoStep, ...]
    answer: str  # the Generator's short answer
    claim: str   # the evidence sentence the answer cites
    claim_step: int

    @property
    def tools(self) -> set[str]:
        return {s.tool for s in self.steps if s.tool != ANSWER_TOOL}

    def steps_like(self, started: bool) -> list[tuple[int, DemoStep]]:
        """(1-based index, step) of the steps in the real turn's situation: the first step when nothing is known
        yet (started=False), the later ones otherwise. Small models copy the nearest example, so a turn is shown
        only examples of its own kind."""
        return [(i, s) for i, s in enumerate(self.steps, start=1) if (i > 1) == started]

    def view(self, upto: int) -> list[MemoryItem]:
        """The accepted evidence before step `upto` (1-based), as the Planner and Generator see it."""
        return [MemoryItem(id=f"step-{i}", step_id=i, status=MemoryStatus.accepted, sub_goal=s.sub_goal, content=s.data,
                           provenance=Provenance(tool=s.tool, step_id=i, source=s.source), created_at=_RETRIEVED)
                for i, s in enumerate(self.steps[: upto - 1], start=1)]

    def plan(self, i: int, primary_arg: str) -> Plan:
        s = self.steps[i - 1]
        return Plan(step_id=i, sub_goal=s.sub_goal, tool=s.tool, args={primary_arg: s.tool_input}, justification=s.justification)

    def result(self, i: int) -> Result:
        s = self.steps[i - 1]
        return Result(step_id=i, tool=s.tool, status=ResultStatus.ok, data=s.data, source=s.source)


_ELMSBY = Source(uri="corpus://demo-1", title="Port Elmsby", retrieved_at=_RETRIEVED,
                 published_at=datetime(2024, 3, 1, tzinfo=timezone.utc))
_ELMSBY_TEXT = "Port Elmsby is a coastal town. The population of Port Elmsby is 48,200. Port Elmsby was founded in 1871."

LOOKUP = DemoCase(
    question="What is the population of Port Elmsby?",
    steps=(
        DemoStep("find the population of Port Elmsby", "search", "Port Elmsby population", "no evidence yet",
                 {"passages": [{"doc_id": "demo-1", "title": "Port Elmsby", "text": _ELMSBY_TEXT, "url": None,
                                "published_at": "2024-03-01", "score": 7.1}]}, _ELMSBY),
        DemoStep("answer from the verified evidence", ANSWER_TOOL, "48,200", "step 1 states the population"),
    ),
    answer="48,200",
    claim="The population of Port Elmsby is 48,200.",
    claim_step=1,
)

CALC = DemoCase(
    question="A baker fills 3 trays with 24 rolls each and sells two-thirds of the rolls at $2 per roll. How many dollars does he take in?",
    steps=(
        DemoStep("compute the money from the rolls sold", "python",
                 "rolls = 3 * 24\nsold = rolls * 2 / 3\nprint(sold * 2)",
                 "one named step per quantity in the question",
                 {"stdout": "96.0\n", "stderr": "", "exit_code": 0, "truncated": False},
                 Source(uri="sandbox://python", title="python", retrieved_at=_RETRIEVED),
                 task="the dollars from selling two-thirds of 3 trays of 24 rolls at $2 per roll"),
        DemoStep("answer from the verified evidence", ANSWER_TOOL, "96", "step 1 printed the money taken in"),
    ),
    answer="96",
    claim="72 rolls, two-thirds of them (48) sold at $2, make $96.",
    claim_step=1,
)

_LUNE = Source(uri="corpus://demo-3", title="Lune Harbour", retrieved_at=_RETRIEVED,
               published_at=datetime(2024, 2, 1, tzinfo=timezone.utc))
_QUELL = Source(uri="corpus://demo-2", title="Mara Quell", retrieved_at=_RETRIEVED,
                published_at=datetime(2024, 1, 15, tzinfo=timezone.utc))

CHAIN = DemoCase(
    question="What is the population of the birthplace of Mara Quell?",
    steps=(
        DemoStep("find where Mara Quell was born", "search", "Mara Quell birthplace", "no evidence yet",
                 {"passages": [{"doc_id": "demo-2", "title": "Mara Quell", "url": None, "published_at": "2024-01-15",
                                "text": "Mara Quell is a painter. Mara Quell was born in Lune Harbour.", "score": 6.4}]}, _QUELL),
        DemoStep("find the population of Lune Harbour", "search", "Lune Harbour population",
                 "step 1 names the birthplace, Lune Harbour; no evidence states its population yet",
                 {"passages": [{"doc_id": "demo-3", "title": "Lune Harbour", "url": None, "published_at": "2024-02-01",
                                "text": "Lune Harbour is a fishing town. The population of Lune Harbour is 9,350.",
                                "score": 7.3}]}, _LUNE),
        DemoStep("answer from the verified evidence", ANSWER_TOOL, "9,350", "step 2 states the population of the birthplace"),
    ),
    answer="9,350",
    claim="The population of Lune Harbour is 9,350.",
    claim_step=2,
)


@dataclass(frozen=True)
class RefusedAnswer:
    """A worked turn after the answer gate refused an answer: the case's evidence before `step`, the gate's reason
    (exactly what tasks/checks/coverage.py says for that evidence; a test keeps the two in step) and the step taken."""

    case: DemoCase
    step: int  # 1-based: the step that follows the refusal
    reason: str


# Shown only on the turn after the answer gate refused (a turn that may not answer). It was the first-step lookup,
# whose entity the 0.5B copied ("find the population of Port Elmsby"); this one shows the named search being taken.
GATED = RefusedAnswer(
    CHAIN, 2, 'the verified evidence does not yet state the population, which the question asks about; '
              'next step: search "Lune Harbour population", then answer')

# Order matters to a small model (it leans on the nearest example): the lookup, which every search
# question starts like, comes last.
CASES: tuple[DemoCase, ...] = (CALC, LOOKUP)

# The direct baseline has no tools: it is shown the calculation worked in words.
DIRECT_QUESTION = CALC.question
DIRECT_REPLY = "3 trays of 24 rolls are 72 rolls; two-thirds of them is 48 rolls; at $2 each that is $96.\nAnswer: 96"


def cases_for(tools: set[str] | list[str], cases: tuple[DemoCase, ...] = CASES) -> list[DemoCase]:
    """The worked examples (of `cases`) whose tools are all allowed in this run."""
    allowed = set(tools)
    return [c for c in cases if c.tools <= allowed]
