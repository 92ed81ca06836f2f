"""The research loop: Planner -> Executor -> Verifier around EvolvingMemory, then the Generator.

Every model or tool call is admitted by the budget first (its declared maximum must fit), every
module is a Prefect task with retries disabled, and a failure becomes feedback for the next plan.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable

from prefect import flow

from flows.review import review_outcome
from infra.runtime.events import RunLog
from infra.runtime.settings import Settings
from tasks.budget import Budget, CallCost, Stop, StopPolicy, answer_status
from tasks.checks import check_answer_coverage, check_evidence_first
from tasks.contracts import (
    ANSWER_TOOL,
    Answer,
    FailureType,
    JudgedStep,
    MemoryStatus,
    NextAction,
    Plan,
    Question,
    Role,
    StopReason,
    Verdict,
)
from tasks.ledger import RunLedger
from tasks.memory import EvolvingMemory
from tasks.modules.executor import execute_step
from tasks.modules.generator import generate_answer
from tasks.modules.planner import plan_step
from tasks.modules.programs import turn_calls
from tasks.modules.tools import tool_cards
from tasks.modules.verifier import verify_step
from tasks.outcome import ResearchOutcome
from tasks.prior import PriorMemory


@dataclass(frozen=True)
class ModuleSteps:
    """The four module calls. Prefect tasks by default; their plain functions for fast unit tests."""

    plan_step: Callable
    execute_step: Callable
    verify_step: Callable
    generate_answer: Callable


PREFECT_STEPS = ModuleSteps(plan_step, execute_step, verify_step, generate_answer)
DIRECT_STEPS = ModuleSteps(plan_step.fn, execute_step.fn, verify_step.fn, generate_answer.fn)


class CallCosts:
    """Declared maxima of each role's calls, from the configuration."""

    def __init__(self, settings: Settings):
        m = settings.models
        self.cards = tool_cards(settings)
        self._tokens = lambda cfg: cfg.max_input_tokens + cfg.max_tokens if cfg else 0
        calls = turn_calls(self.cards)  # a python turn with its program call: two calls of the Planner's model
        self.planner = CallCost(Role.planner, model_tokens=calls * self._tokens(m.planner), calls=calls)
        self.verifier = CallCost(Role.verifier, model_tokens=self._tokens(m.verifier))
        self.generator = CallCost(Role.generator, model_tokens=self._tokens(m.generator), wall_s=settings.budget.answer_reserve_s)
        self._generalist = self._tokens(m.generalist)

    def executor(self, tool: str) -> CallCost:
        card = self.cards.get(tool)
        if card is None:  # refused by the Executor without running anything
            return CallCost(Role.executor)
        return CallCost(Role.executor, model_tokens=self._generalist if tool == "generalist" else 0,
                        tool_cost=card.cost, wall_s=card.timeout_s)


def _rejection(step_id: int, failure_type: FailureType, reason: str) -> Verdict:
    return Verdict(step_id=step_id, accepted=False, failure_type=failure_type, reason=reason, next_action=NextAction.replan)


def research(question: Question, settings: Settings, *, run_id: str, log: RunLog | None = None,
             steps: ModuleSteps = PREFECT_STEPS) -> ResearchOutcome:
    """Answer one question within its budget. Never raises for model, tool or verification failures."""
    costs = CallCosts(settings)
    memory = EvolvingMemory(settings.memory.evidence_ttl_s)
    budget = Budget(settings.budget, answer_reserve=costs.generator)
    policy = StopPolicy(settings.budget)
    ledger = RunLedger(run_id, question.id, budget, log)
    q, tid = question.question, question.id
    prior = PriorMemory.open(settings, question, run_id, log)  # None unless memory.mode=persistent
    lessons = prior.lessons if prior else None

    def admit(cost: CallCost) -> Stop | None:
        limit = budget.refuse(cost)
        return Stop(StopReason.budget_exhausted, limit, f"next {cost.role.value} call would exceed {limit.value}") if limit else None

    def deadline() -> float:
        return max(0.1, budget.remaining_wall_s() - settings.budget.answer_reserve_s)

    def refuse(plan: Plan, failure_type: FailureType, reason: str) -> Verdict:
        """A valid plan the loop does not carry out: kept as a failure, and the Planner's next feedback."""
        ledger.refused_plan(plan, failure_type, reason)
        memory.record_failure(plan.step_id, plan.tool, failure_type, reason, plan.args, args=plan.args)
        return _rejection(plan.step_id, failure_type, reason)

    feedback: Verdict | None = None
    stop: Stop | None = None
    gate_refusals = 0
    avoid: tuple[str, ...] = ()  # what the next turn may not choose
    judged: list[JudgedStep] = []
    try:
        for record in prior.candidates if prior else ():  # earlier evidence counts only once re-verified here
            stop = policy.begin_turn() or admit(costs.executor(record.tool)) or admit(costs.verifier)
            if stop:
                break
            plan = prior.recheck_plan(record, policy.steps)  # the same tool call, run again now
            fresh = prior.claimed(record, steps.execute_step(plan, tid, settings, deadline()))  # + the prior claim
            ledger.executor(plan, fresh)
            verdict = prior.judge(record, fresh, steps.verify_step(plan, fresh, memory.accepted_view(), tid, settings, q))
            ledger.verifier(plan, verdict, 0.0)
            memory.record(plan, fresh, verdict, prior_id=record.id, prior_run=record.run_id)
            feedback = prior.note(record, verdict)  # a rejection (and its correction) is the Planner's first feedback
        while stop is None:
            stop = policy.begin_turn() or admit(costs.planner)
            if stop:
                break
            step_id = policy.steps
            view = memory.accepted_view()
            planner_view = view[-1:] if settings.memory.planner_view == "last" else view  # modular-nomem ablation
            gated = feedback is not None and feedback.failure_type is FailureType.incomplete_evidence
            outcome = steps.plan_step(q, planner_view, feedback, step_id, tid, settings, deadline(), lessons=lessons,
                                      allow_answer=not gated, avoid=avoid)  # after a gate refused: look something up
            avoid = ()
            ledger.planner(step_id, outcome)
            if outcome.plan is None:  # an invalid plan never enters memory
                feedback = _rejection(step_id, outcome.failure_type, outcome.error or "no plan")
                memory.record_failure(step_id, "planner", outcome.failure_type, feedback.reason, outcome.raw)
                stop = policy.note_rejection(outcome.failure_type)
                continue
            plan = outcome.plan
            if plan.tool == ANSWER_TOOL:
                gap = check_answer_coverage(q, view) if gate_refusals < settings.verifier.answer_gate else None
                if gap is None or gap.failure is None:
                    stop = Stop(StopReason.answered, detail=plan.justification)
                    break
                gate_refusals += 1  # the Verifier's answer gate: the evidence leaves out what the question names
                feedback = refuse(plan, gap.failure.type, gap.failure.reason)
                stop = policy.note_rejection(gap.failure.type)
                continue
            early = check_evidence_first(q, plan, view) \
                if settings.verifier.evidence_first and plan.tool in settings.tools.allow else None  # else: denied
            if early is not None and early.failure is not None:  # nothing to compute with yet: find evidence first
                feedback, avoid = refuse(plan, early.failure.type, early.failure.reason), ("python", ANSWER_TOOL)
                stop = policy.note_rejection(early.failure.type)
                continue
            stop = policy.note_plan(plan.signature())
            if stop or policy.is_repeat(plan.signature()):  # a repeated plan is refused, not re-run
                feedback = refuse(plan, FailureType.repeated_plan, f"step {step_id} repeats an earlier {plan.tool} call")
                continue
            stop = admit(costs.executor(plan.tool))
            if stop:
                break
            result = steps.execute_step(plan, tid, settings, deadline())
            ledger.executor(plan, result)
            stop = admit(costs.verifier)
            if stop:
                break
            t0 = time.perf_counter()
            shown = memory.accepted_view()
            verdict = steps.verify_step(plan, result, shown, tid, settings, q)
            ledger.verifier(plan, verdict, (time.perf_counter() - t0) * 1000)
            judged.append(JudgedStep(step_id=plan.step_id, plan=plan, result=result, view=shown, verdict=verdict))
            memory.record_judged(judged[-1])  # only accepted results become evidence; a newer source supersedes
            feedback = None if verdict.accepted else verdict
            stop = policy.note_verdict(verdict)
    except Exception as exc:  # a bug or an unreachable backend ends this question, not the batch
        stop = Stop(StopReason.error, detail=f"{type(exc).__name__}: {exc}")

    answer = _finish(question, stop, memory, budget, ledger, costs, steps, settings, run_id, policy.steps)
    if prior:  # lessons, accepted evidence and corrections for later runs (this run's own part file)
        prior.remember(memory.all_items(), memory.debug_trace())
    return ResearchOutcome(answer=answer, records=ledger.records, memory=memory, prior=prior.report() if prior else None,
                           judged=judged)


def _finish(question: Question, stop: Stop, memory: EvolvingMemory, budget: Budget, ledger: RunLedger,
            costs: CallCosts, steps: ModuleSteps, settings: Settings, run_id: str, turns: int) -> Answer:
    """Write the answer from accepted evidence (the reserve guarantees the Generator fits) and grade it honestly."""
    ledger.stop(stop.reason.value, stop.limit.value if stop.limit else None, stop.detail)
    view = memory.accepted_view()
    text = f"Stopped before answering ({stop.reason.value}): {stop.detail}"
    citations = []
    generated_ok = False
    if budget.refuse(costs.generator, keep_answer_reserve=False) is None:
        try:
            gen = steps.generate_answer(question.question, view, question.id, settings, budget.remaining_wall_s())
            ledger.generator(turns, gen)
            text, citations, generated_ok = gen.text, gen.citations, gen.failure_type is None and bool(gen.citations)
        except Exception as exc:
            stop = Stop(StopReason.error, detail=f"generator: {type(exc).__name__}: {exc}")
    verified_steps = {i.step_id for i in view if i.status is MemoryStatus.accepted}
    verified = generated_ok and any(c.step_id in verified_steps for c in citations)
    return Answer(question_id=question.id, question=question.question, text=text, citations=citations,
                  status=answer_status(stop, verified), stop_reason=stop.reason, budget_limit=stop.limit,
                  iterations=turns, cost=ledger.role_costs(), run_id=run_id)


@flow(name="research", flow_run_name="research-{question.id}", retries=0, log_prints=False)
def research_flow(question: Question, settings: Settings, run_id: str, log_path: str | None = None) -> ResearchOutcome:
    """One question through the loop, as one Prefect flow run (paused for human review where configured)."""
    log = RunLog(log_path, run_id=run_id, console=settings.logging.console, level=settings.logging.level) if log_path else None
    try:
        outcome = research(question, settings, run_id=run_id, log=log)
        return review_outcome(outcome, question, settings, run_id)  # pauses for a person only with review: prefect
    finally:
        if log:
            log.close()
