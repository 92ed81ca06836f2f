"""The monolithic baseline: one model, one growing context, ReAct-style.

Same model (the Planner's), same tools and Executor, same Budget and stop policy, same constrained
reply format as the modular loop; only the decomposition differs. The model plans, reads tool
observations, judges them itself and writes the answer. There is no Verifier, no memory lifecycle
and no citations, which is exactly what the comparison measures.
"""

from __future__ import annotations

from infra.models import build_backend
from infra.models.base import ModelError
from infra.runtime.events import RunLog
from infra.runtime.settings import Settings
from tasks.budget import Budget, CallCost, Stop, StopPolicy, answer_status
from tasks.contracts import (
    ANSWER_TOOL,
    Answer,
    FailureType,
    GenerationOutcome,
    ModelUsage,
    PlanDraft,
    PlanOutcome,
    Question,
    ResultStatus,
    Role,
    StopReason,
    plan_draft_schema,
)
from tasks.ledger import RunLedger
from tasks.modules.executor import execute
from tasks.modules.planner import Planner
from tasks.modules.prompts import (
    ParseError,
    monolithic_final_messages,
    monolithic_messages,
    parse_json_reply,
    render_observation,
    transcript,
)
from tasks.modules.programs import turn_calls, with_program
from tasks.modules.tools import tool_cards
from tasks.outcome import ResearchOutcome


def run_monolithic(question: Question, settings: Settings, *, run_id: str, log: RunLog | None = None):
    """Answer one question with a single ReAct agent under the modular loop's budget."""
    from tasks.memory import EvolvingMemory

    cfg = settings.models.planner
    backend = build_backend(cfg)
    cards = tool_cards(settings)
    promote = Planner(backend, cfg, cards, settings.memory.view_chars).promote
    schema = plan_draft_schema([*cards, ANSWER_TOOL])
    tokens = cfg.max_input_tokens + cfg.max_tokens
    calls = turn_calls(cards)  # a python turn with its program call: two calls
    turn_cost = CallCost(Role.planner, model_tokens=calls * tokens, calls=calls)
    final_cost = CallCost(Role.generator, model_tokens=tokens, wall_s=settings.budget.answer_reserve_s)
    budget = Budget(settings.budget, answer_reserve=final_cost)
    policy = StopPolicy(settings.budget)
    ledger = RunLedger(run_id, question.id, budget, log)
    observations: list[str] = []
    final_text: str | None = None
    stop: Stop | None = None

    def admit(cost: CallCost) -> Stop | None:
        limit = budget.refuse(cost)
        return Stop(StopReason.budget_exhausted, limit, f"next call would exceed {limit.value}") if limit else None

    def deadline() -> float:
        return max(0.1, budget.remaining_wall_s() - settings.budget.answer_reserve_s)

    while stop is None:
        stop = policy.begin_turn() or admit(turn_cost)
        if stop:
            break
        step_id = policy.steps
        messages = monolithic_messages(question.question, cards, observations, settings.memory.view_chars, cfg.demos)
        try:
            c = backend.complete(messages, json_schema=schema, max_tokens=cfg.max_tokens, temperature=cfg.temperature,
                                 seed=cfg.seed, deadline_s=deadline())
        except ModelError as exc:
            ledger.planner(step_id, PlanOutcome(failure_type=FailureType.model_error, error=str(exc)))
            stop = policy.note_rejection(FailureType.model_error)
            continue
        usage = ModelUsage(model=c.model, tokens_in=c.tokens_in, tokens_out=c.tokens_out, latency_ms=c.latency_ms)
        try:
            draft = parse_json_reply(c.text, PlanDraft)
            plan = promote(draft, step_id)
        except ParseError as exc:
            ledger.planner(step_id, PlanOutcome(usage=usage, failure_type=FailureType.schema, error=str(exc)))
            observations.append(f"(step {step_id}) your reply was invalid: {exc}")
            stop = policy.note_rejection(FailureType.schema)
            continue
        card = cards.get(plan.tool)
        if card is not None and card.program_call:  # the same program call as the Planner's (tasks/modules/programs.py)
            outcome = with_program(plan, usage, c.text, backend, cfg, question.question,
                                   transcript(observations, settings.memory.view_chars), deadline())
            if outcome.plan is None:
                ledger.planner(step_id, outcome)
                if outcome.failure_type is FailureType.schema:
                    observations.append(f"(step {step_id}) your program reply held no ```python block")
                stop = policy.note_rejection(outcome.failure_type)
                continue
            plan, usage = outcome.plan, outcome.usage
        ledger.planner(step_id, PlanOutcome(plan=plan, usage=usage))
        if plan.tool == ANSWER_TOOL:
            final_text = draft.tool_input.strip() or draft.sub_goal
            stop = Stop(StopReason.answered, detail=draft.justification)
            break
        stop = policy.note_plan(plan.signature())
        if stop:
            break
        stop = admit(CallCost(Role.executor, tool_cost=plan.max_cost,
                              wall_s=cards[plan.tool].timeout_s if plan.tool in cards else 0.0))
        if stop:
            break
        result = execute(plan, settings, deadline())
        ledger.executor(plan, result)
        observations.append(render_observation(step_id, plan, result))
        failed = result.status is not ResultStatus.ok
        stop = policy.note_rejection(FailureType.tool_error) if failed else None
        if not failed:
            policy.consecutive_rejections = 0

    ledger.stop(stop.reason.value, stop.limit.value if stop.limit else None, stop.detail)
    if final_text is None and budget.refuse(final_cost, keep_answer_reserve=False) is None:
        final_text = _final_answer(backend, cfg, question.question, observations, settings, budget, ledger, policy.steps)
    text = final_text or f"Stopped before answering ({stop.reason.value}): {stop.detail}"
    # A monolithic agent's own 'answer' counts as answered: it has no verifier to say otherwise.
    status = answer_status(stop, has_verified_evidence=final_text is not None)
    answer = Answer(question_id=question.id, question=question.question, text=text, status=status,
                    stop_reason=stop.reason, budget_limit=stop.limit, iterations=policy.steps,
                    cost=ledger.role_costs(), run_id=run_id)
    return ResearchOutcome(answer=answer, records=ledger.records, memory=EvolvingMemory())


def _final_answer(backend, cfg, question: str, observations: list[str], settings: Settings, budget: Budget,
                  ledger: RunLedger, turns: int) -> str | None:
    """Out of turns: one last call for the answer, as the modular loop's Generator gets one."""
    try:
        c = backend.complete(monolithic_final_messages(question, observations, settings.memory.view_chars),
                             max_tokens=cfg.max_tokens, temperature=cfg.temperature, seed=cfg.seed,
                             deadline_s=budget.remaining_wall_s())
    except ModelError as exc:
        ledger.generator(turns, GenerationOutcome(text="", failure_type=FailureType.model_error, error=str(exc)))
        return None
    usage = ModelUsage(model=c.model, tokens_in=c.tokens_in, tokens_out=c.tokens_out, latency_ms=c.latency_ms)
    ledger.generator(turns, GenerationOutcome(text=c.text, usage=usage))
    return c.text.strip() or None
