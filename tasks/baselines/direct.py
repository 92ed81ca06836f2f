"""The direct baseline: the Generator-role model answers in one call, with no tools and no evidence, reasoning step
by step first (`generator.direct_max_tokens`).

The call is admitted by the same Budget as every call of the other systems (its declared maximum of
tokens and wall time must fit) and recorded by the same ledger, so its cost sits in the same tables.
An answer is 'answered' when the model produced text; nothing verifies it, which is what the
comparison with the tool-using systems measures.
"""

from __future__ import annotations

from infra.models import build_backend
from infra.models.base import ModelError
from infra.runtime.events import RunLog
from infra.runtime.settings import Settings
from tasks.budget import Budget, CallCost, Stop, answer_status
from tasks.contracts import (
    Answer,
    AnswerStatus,
    FailureType,
    GenerationOutcome,
    ModelUsage,
    Question,
    Role,
    StopReason,
)
from tasks.ledger import RunLedger
from tasks.modules.prompts import direct_messages
from tasks.outcome import ResearchOutcome

STEP_ID = 1
"""The direct system's single call, as step 1 of its trace."""


def run_direct(question: Question, settings: Settings, *, run_id: str, log: RunLog | None = None):
    """Answer one question with one model call (settings.models.generator), no tools."""
    from tasks.memory import EvolvingMemory

    cfg = settings.models.generator
    max_tokens = settings.generator.direct_max_tokens  # it reasons before it answers (prompts.direct_messages)
    cost = CallCost(Role.generator, model_tokens=cfg.max_input_tokens + max_tokens, wall_s=settings.budget.answer_reserve_s)
    budget = Budget(settings.budget)
    ledger = RunLedger(run_id, question.id, budget, log)
    text = ""
    limit = budget.refuse(cost)
    if limit is not None:
        stop = Stop(StopReason.budget_exhausted, limit, f"the answer call would exceed {limit.value}")
    else:
        try:
            c = build_backend(cfg).complete(direct_messages(question.question, cfg.demos), max_tokens=max_tokens,
                                            temperature=cfg.temperature, seed=cfg.seed,
                                            deadline_s=budget.remaining_wall_s())
        except ModelError as exc:
            ledger.generator(STEP_ID, GenerationOutcome(text="", failure_type=FailureType.model_error, error=str(exc)))
            stop = Stop(StopReason.error, detail=f"generator: {exc}")
        else:
            usage = ModelUsage(model=c.model, tokens_in=c.tokens_in, tokens_out=c.tokens_out, latency_ms=c.latency_ms)
            ledger.generator(STEP_ID, GenerationOutcome(text=c.text, usage=usage))
            text = c.text.strip()
            stop = Stop(StopReason.answered) if text else Stop(StopReason.error, detail="the model returned no text")
    ledger.stop(stop.reason.value, stop.limit.value if stop.limit else None, stop.detail)
    status = AnswerStatus.answered if stop.reason is StopReason.answered else answer_status(stop, False)
    answer = Answer(question_id=question.id, question=question.question,
                    text=text or f"Stopped before answering ({stop.reason.value}): {stop.detail}",
                    status=status, stop_reason=stop.reason, budget_limit=stop.limit, iterations=0,
                    cost=ledger.role_costs(), run_id=run_id)
    return ResearchOutcome(answer=answer, records=ledger.records, memory=EvolvingMemory())
