"""Planner: turn the question, the accepted evidence and the last verdict into the next Plan."""

from __future__ import annotations

from prefect import task
from prefect.cache_policies import NO_CACHE

from infra.models import build_backend
from infra.models.base import ModelBackend, ModelError
from infra.runtime.settings import ModelConfig, Settings
from tasks.contracts import (
    ANSWER_TOOL,
    FailureType,
    MemoryItem,
    ModelUsage,
    Plan,
    PlanDraft,
    PlanOutcome,
    PriorRecord,
    ToolCard,
    Verdict,
    plan_draft_schema,
)
from tasks.modules.programs import with_program
from tasks.modules.prompts import ParseError, parse_json_reply, planner_messages, render_evidence
from tasks.modules.tools import tool_cards


class Planner:
    """Asks its model for a PlanDraft under a JSON schema, validates it, promotes it to a Plan."""

    def __init__(self, backend: ModelBackend, config: ModelConfig, cards: dict[str, ToolCard], view_chars: int):
        self.backend = backend
        self.config = config
        self.cards = cards
        self.view_chars = view_chars

    def plan(self, question: str, view: list[MemoryItem], feedback: Verdict | None, step_id: int,
             deadline_s: float | None = None, lessons: list[PriorRecord] | None = None,
             allow_answer: bool = True, avoid: tuple[str, ...] = ()) -> PlanOutcome:
        messages = planner_messages(question, self.cards, view, feedback, self.view_chars, lessons, self.config.demos,
                                    getattr(self.backend, "reply_fields", None), allow_answer)
        choices = [t for t in [*self.cards, *([ANSWER_TOOL] if allow_answer else [])] if t not in avoid]
        schema = plan_draft_schema(choices or list(self.cards))
        try:
            c = self.backend.complete(messages, json_schema=schema, max_tokens=self.config.max_tokens,
                                      temperature=self.config.temperature, seed=self.config.seed, deadline_s=deadline_s)
        except ModelError as exc:
            return PlanOutcome(failure_type=FailureType.model_error, error=str(exc))
        usage = ModelUsage(model=c.model, tokens_in=c.tokens_in, tokens_out=c.tokens_out, latency_ms=c.latency_ms)
        try:
            draft = parse_json_reply(c.text, PlanDraft)
            plan = self.promote(draft, step_id)
        except ParseError as exc:
            return PlanOutcome(usage=usage, failure_type=FailureType.schema, error=str(exc), raw=c.text)
        card = self.cards.get(plan.tool)
        if card is None or not card.program_call:
            return PlanOutcome(plan=plan, usage=usage, raw=c.text)
        # tool_input said what to compute; the same model now writes the program (tasks/modules/programs.py)
        return with_program(plan, usage, c.text, self.backend, self.config, question,
                            render_evidence(view, self.view_chars), deadline_s)

    def promote(self, draft: PlanDraft, step_id: int) -> Plan:
        """A draft becomes a Plan only if it names a known tool and gives that tool an input."""
        tool = draft.tool.strip().lower()
        if tool == ANSWER_TOOL:
            args: dict = {}
            cost = 0.0
        elif tool in self.cards:
            if not draft.tool_input.strip():
                raise ParseError(f"tool_input is empty; {tool} needs its {self.cards[tool].primary_arg}")
            card = self.cards[tool]
            args = {card.primary_arg: draft.tool_input}
            cost = card.cost
        else:
            # Kept as a Plan so the Executor refuses it (status denied) and the refusal is counted.
            args = {"input": draft.tool_input}
            cost = 0.0
        return Plan(step_id=step_id, sub_goal=draft.sub_goal, tool=tool, args=args,
                    expected_evidence=draft.expected_evidence, success_criterion=draft.success_criterion,
                    max_cost=cost, justification=draft.justification)


def build_planner(settings: Settings) -> Planner:
    cfg = settings.models.planner
    return Planner(build_backend(cfg), cfg, tool_cards(settings), settings.memory.view_chars)


@task(name="plan_step", retries=0, cache_policy=NO_CACHE, task_run_name="plan-{task_id}-step{step_id}")
def plan_step(question: str, view: list[MemoryItem], feedback: Verdict | None, step_id: int, task_id: str,
              settings: Settings, deadline_s: float | None = None, lessons: list[PriorRecord] | None = None,
              allow_answer: bool = True, avoid: tuple[str, ...] = ()) -> PlanOutcome:
    """Propose the next step for one question (lessons: earlier runs' records, shown marked prior); with
    allow_answer=False the reply's tool is one of the tools, not `answer` (the turn after the answer gate refused);
    `avoid` names tools (or `answer`) the reply may not choose (the turn after a program was refused for want of evidence)."""
    return build_planner(settings).plan(question, view, feedback, step_id, deadline_s, lessons, allow_answer, avoid)
