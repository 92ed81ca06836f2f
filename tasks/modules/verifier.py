"""Verifier: judge a step with small named checks in a fixed order, and an LLM judge only for what they leave open.

The checks (tasks/checks/) run first and stop at the first decisive failure, whose failure type,
reason and next action go to the Planner. What they cannot decide (a yes/no claim, a subject named
only in part, an operand found nowhere) goes to the judge (settings.models.verifier) in hybrid
mode; in deterministic mode, or with no judge configured, it passes at low confidence
(settings.verifier.undecided). A judge that shares a model with the Planner or the Executor is not
independent evidence: the verdict says so and its confidence is capped.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from prefect import task
from prefect.cache_policies import NO_CACHE
from pydantic import ValidationError

from infra.models import build_backend
from infra.models.base import ModelError
from infra.runtime.settings import ModelConfig, Settings
from infra.tools.sandbox import SandboxLimits
from tasks.checks import (
    CHECKS,
    CheckFn,
    CheckOptions,
    Outcome,
    StepContext,
    as_of_datetime,
    explicit_claim,
)
from tasks.contracts import (
    Check,
    Claim,
    FailureType,
    JudgeDraft,
    MemoryItem,
    ModelUsage,
    NextAction,
    Plan,
    Result,
    ToolCard,
    Verdict,
)
from tasks.checks.injection import quarantine
from tasks.checks.quantities import last_printed
from tasks.checks.text import canonical_number
from tasks.modules.prompts import ParseError, judge_messages, parse_json_reply, render_evidence, render_result
from tasks.modules.recompute import Recomputer, applies
from tasks.modules.tools import echo_expression, python_sandbox, tool_cards

MODES = ("deterministic", "llm", "hybrid")

# Confidence of an accepted step, by how much of it the checks could establish.
CONFIDENCE = {"claim_checked": 0.9, "recomputed": 0.9, "evidence_only": 0.7, "undecided": 0.4, "estimate": 0.3,
              "judge": 0.7, "rejected": 0.9, "judge_rejected": 0.6}

_MODEL_IDENTITY = ("backend", "model", "model_path", "base_url")


def same_model(a: ModelConfig | None, b: ModelConfig | None) -> bool:
    """Two configs that reach the same model (same backend, name, weights file and endpoint)."""
    return a is not None and b is not None and all(getattr(a, k) == getattr(b, k) for k in _MODEL_IDENTITY)


def judge_is_independent(settings: Settings) -> bool:
    """False when the judge is the Planner's model or the model behind the Executor's generalist tool."""
    judge = settings.models.verifier
    return not (same_model(judge, settings.models.planner) or same_model(judge, settings.models.generalist))


def judge_schema() -> dict[str, Any]:
    schema = JudgeDraft.model_json_schema()
    schema["required"] = ["verdict", "failure_type", "reason"]
    return schema


@dataclass
class JudgeReply:
    accepted: bool | None  # None: no usable verdict
    failure_type: FailureType | None = None
    reason: str = ""
    usage: ModelUsage | None = None
    error: str | None = None


class Judge:
    """An LLM asked only about what the checks could not decide."""

    def __init__(self, config: ModelConfig, independent: bool, cap: float):
        self.config = config
        self.backend = build_backend(config)
        self.independent = independent
        self.cap = cap
        self.schema = judge_schema()

    @property
    def max_chars(self) -> int:
        return max(600, (self.config.max_input_tokens - 160) * 3)

    def ask(self, messages: list[dict[str, str]]) -> JudgeReply:
        try:
            c = self.backend.complete(messages, json_schema=self.schema, max_tokens=min(self.config.max_tokens, 120),
                                      temperature=0.0, seed=self.config.seed)
        except ModelError as exc:
            return JudgeReply(None, error=f"model error: {exc}")
        usage = ModelUsage(model=c.model, tokens_in=c.tokens_in, tokens_out=c.tokens_out, latency_ms=c.latency_ms)
        try:
            draft = parse_json_reply(c.text, JudgeDraft)
        except ParseError as exc:
            return JudgeReply(None, usage=usage, error=str(exc))
        ftype = None if draft.failure_type == "none" else FailureType(draft.failure_type)
        return JudgeReply(draft.verdict == "accept", ftype, draft.reason, usage)

    def confidence(self, value: float) -> float:
        return value if self.independent else min(value, self.cap)


@lru_cache(maxsize=8)
def _sandbox(settings_json: str):
    return python_sandbox(Settings.model_validate_json(settings_json))


def sandbox_rerun(settings: Settings):
    """Run a program where the python tool runs its own, with its limits: code -> (status, stdout, exit_code)."""
    c = settings.tools.python
    limits = SandboxLimits(timeout_s=c.timeout_s, memory_mb=c.memory_mb, max_output_bytes=c.max_output_bytes,
                           max_processes=c.max_processes)
    key = settings.model_copy(update={"as_of": None}).model_dump_json()

    def rerun(code: str) -> tuple[str, str, int | None]:
        out = _sandbox(key).run_python(echo_expression(code), limits)
        return out.status, out.stdout, out.exit_code

    return rerun


def _claim_text(claim: Claim | None) -> str:
    if claim is None:
        return ""
    what = f"{claim.subject} / {claim.attribute}" if claim.attribute else claim.subject
    return f"{what}: {claim.value}" + (f" (cites {', '.join(claim.cites)})" if claim.cites else " (cites nothing)")


def _step_text(plan: Plan | dict) -> str:
    if isinstance(plan, Plan):
        return (f"{plan.sub_goal} | tool {plan.tool} {json.dumps(plan.args, default=str)[:400]} | expected: "
                f"{plan.expected_evidence or '-'} | criterion: {plan.success_criterion or '-'}")
    return json.dumps(plan, default=str)[:600]


class Verifier:
    """Checks in order (the first decisive failure rejects the step), then the judge for what remains open."""

    def __init__(self, settings: Settings, *, mode: str | None = None, judge: Judge | None | bool = True,
                 cards: dict[str, ToolCard] | None = None, checks: list[CheckFn] | None = None, rerun=None):
        self.settings = settings
        self.mode = mode or settings.verifier.mode
        if self.mode not in MODES:
            raise ValueError(f"verifier mode {self.mode!r}: use one of {', '.join(MODES)}")
        self.cards = cards if cards is not None else tool_cards(settings)
        self.checks = checks or CHECKS
        v = settings.verifier
        self.options = CheckOptions(recompute=v.recompute, recompute_max_ms=v.recompute_max_s * 1000,
                                    rerun=rerun or sandbox_rerun(settings),
                                    max_source_age_days=v.max_source_age_days, evidence_ttl_s=settings.memory.evidence_ttl_s,
                                    on_conflict=NextAction(v.on_conflict), supersede_in_result=v.supersede_in_result)
        if judge is True:
            cfg = settings.models.verifier
            judge = Judge(cfg, judge_is_independent(settings), v.judge_confidence_cap) if cfg and self.mode != "deterministic" else None
        self.judge: Judge | None = judge or None
        self.recomputer = Recomputer(self.judge.config, self.options.rerun, samples=v.independent_samples,
                                     quorum=v.independent_quorum, temperature=v.independent_temperature) \
            if self.judge is not None and self.mode == "hybrid" and v.independent else None
        if self.mode == "llm" and self.judge is None:
            raise ValueError("verifier.mode=llm needs a judge model (models.verifier)")

    # ------------------------------------------------------------------ entry points

    def verify(self, plan: Plan, result: Result, view: list[MemoryItem], question: str = "") -> Verdict:
        """Judge one step's result against its plan and the accepted evidence; `question` (its text) is given data
        too: numbers it states ground a program's operands."""
        ctx = StepContext(plan=plan, result=result, card=self.cards.get(plan.tool), view=view,
                          as_of=as_of_datetime(self.settings.as_of), options=self.options, question=question)
        if self.mode == "llm":
            try:
                claim = explicit_claim(result)
            except ValidationError:
                claim = None
            return self._judge_only(plan.step_id, _step_text(plan), _claim_text(claim), render_result(result.model_dump(mode="json")), view)
        done: list[Check] = []
        questions: list[str] = []
        supersedes, superseded, quarantined = None, [], []
        for fn in self.checks:
            out: Outcome = fn(ctx)
            done.append(out.check)
            if out.failure is not None:
                f = out.failure
                return Verdict(step_id=plan.step_id, accepted=False, checks=done, failure_type=f.type, reason=f.reason,
                               confidence=CONFIDENCE["rejected"], next_action=f.next_action)
            if out.undecided:
                questions.append(out.undecided)
            supersedes = supersedes or out.supersedes
            superseded += out.superseded
            if out.quarantined:  # the later checks, the judge and memory judge the rest; nothing reads these passages
                quarantined += out.quarantined
                ctx.result = quarantine(ctx.result, out.quarantined)
        evidence = _evidence(ctx)
        if questions:
            return _keeping(self._settle(ctx, done, questions, evidence, supersedes), superseded, quarantined)
        usage = None
        if self.recomputer is not None and result.tool == "python" and question and applies(question):
            rejected, usage = self._independent(ctx, done)
            if rejected is not None:
                return rejected
        if result.model:
            level = "estimate"
        elif ctx.explicit:
            level = "claim_checked"
        else:
            level = "recomputed" if result.tool == "python" else "evidence_only"
        return Verdict(step_id=plan.step_id, accepted=True, checks=done, evidence=evidence, confidence=CONFIDENCE[level],
                       reason="passed " + ", ".join(c.name for c in done), next_action=NextAction.continue_,
                       supersedes=supersedes, superseded=superseded, quarantined=quarantined, usage=usage)

    def _independent(self, ctx: StepContext, done: list[Check]) -> tuple[Verdict | None, ModelUsage | None]:
        """The Verifier's own programs for the question: (a rejection when a quorum agrees on another value, the
        cost of the programs drawn for this step)."""
        last, mine = last_printed(str((ctx.result.data or {}).get("stdout") or ""))
        if mine is None:
            return None, None  # nothing to compare: no program is drawn
        ag = self.recomputer.check(ctx.question, mine)
        if not ag.rejects:
            done.append(Check(name="independent", passed=True, detail=ag.detail()[:500]))
            return None, ag.usage
        theirs = canonical_number(str(ag.against))
        done.append(Check(name="independent", passed=False, detail=f"{ag.detail()}; the step {last[:80]}"[:500]))
        return Verdict(step_id=ctx.plan.step_id, accepted=False, checks=done, failure_type=FailureType.recomputation,
                       reason=(f"{ag.quorum} independent program(s) for the question printed {theirs}, this step printed "
                               f"{last[:80]}: check each quantity's role and each operation, then compute again")[:600],
                       confidence=CONFIDENCE["judge_rejected"], next_action=NextAction.replan, usage=ag.usage,
                       judge_independent=self.judge.independent), ag.usage

    def verify_raw(self, plan: Any, result: Any, view: list[MemoryItem], question: str = "") -> Verdict:
        """Judge records that may be invalid (labeled cases): a record that fails its contract is a schema failure."""
        step_id = plan.get("step_id") if isinstance(plan, dict) and isinstance(plan.get("step_id"), int) else 0
        step_id = max(step_id, 0)
        try:
            p = Plan.model_validate(plan)
            r = Result.model_validate(result)
        except ValidationError as exc:
            if self.mode == "llm":
                return self._judge_only(step_id, _step_text(plan), "", json.dumps(result, default=str)[:3000], view)
            first = exc.errors()[0]
            loc = ".".join(str(x) for x in first["loc"]) or "(root)"
            what = f"{exc.title} invalid at {loc}: {first['msg']}"
            return Verdict(step_id=step_id, accepted=False, checks=[Check(name="schema", passed=False, detail=what[:500])],
                           failure_type=FailureType.schema, reason=f"{what}; the record never enters memory",
                           confidence=CONFIDENCE["rejected"], next_action=NextAction.replan)
        return self.verify(p, r, view, question)

    # ------------------------------------------------------------------ the judge

    def _messages(self, step: str, claim: str, result: str, view: list[MemoryItem], questions: list[str]):
        max_chars = self.judge.max_chars if self.judge else 4000
        as_of = as_of_datetime(self.settings.as_of).date().isoformat()
        return judge_messages(as_of, step, claim, result, render_evidence(view, max_chars // 3), questions, max_chars)

    def _settle(self, ctx: StepContext, done: list[Check], questions: list[str], evidence: str, supersedes: str | None) -> Verdict:
        """Checks passed but left questions: the judge answers them, or the configured policy does."""
        plan = ctx.plan
        reply = None
        if self.judge is not None and self.mode == "hybrid":
            reply = self.judge.ask(self._messages(_step_text(plan), _claim_text(ctx.claim),
                                                  render_result(ctx.result.data), ctx.view, questions))
            if reply.accepted is not None:
                done.append(Check(name="judge", passed=reply.accepted, detail=(reply.reason or "-")[:500]))
                return self._from_judge(plan.step_id, done, reply, evidence, supersedes)
            done.append(Check(name="judge", passed=False, detail=f"no verdict: {reply.error}"[:500]))
        usage = reply.usage if reply else None
        independent = self.judge.independent if reply else None
        if self.settings.verifier.undecided == "reject":
            return Verdict(step_id=plan.step_id, accepted=False, checks=done, failure_type=FailureType.unsupported,
                           reason="the checks could not confirm the step: " + "; ".join(questions), confidence=CONFIDENCE["undecided"],
                           next_action=NextAction.replan, usage=usage, judge_independent=independent)
        return Verdict(step_id=plan.step_id, accepted=True, checks=done, evidence=evidence,
                       confidence=CONFIDENCE["estimate" if ctx.result.model else "undecided"],
                       reason="passed the checks; left open: " + "; ".join(questions), next_action=NextAction.continue_,
                       supersedes=supersedes, usage=usage, judge_independent=independent)

    def _from_judge(self, step_id: int, done: list[Check], reply: JudgeReply, evidence: str, supersedes: str | None) -> Verdict:
        j = self.judge
        if reply.accepted:
            return Verdict(step_id=step_id, accepted=True, checks=done, evidence=evidence,
                           confidence=j.confidence(CONFIDENCE["judge"]), reason=f"judge: {reply.reason}"[:600],
                           next_action=NextAction.continue_, supersedes=supersedes, usage=reply.usage,
                           judge_independent=j.independent)
        ftype = reply.failure_type or FailureType.unsupported
        action = self.options.on_conflict if ftype is FailureType.conflict else NextAction.replan
        return Verdict(step_id=step_id, accepted=False, checks=done, failure_type=ftype,
                       reason=f"judge: {reply.reason or 'the result does not support the step'}"[:600],
                       confidence=j.confidence(CONFIDENCE["judge_rejected"]), next_action=action, usage=reply.usage,
                       judge_independent=j.independent)

    def _judge_only(self, step_id: int, step: str, claim: str, result: str, view: list[MemoryItem]) -> Verdict:
        reply = self.judge.ask(self._messages(step, claim, result, view, []))
        if reply.accepted is None:
            return Verdict(step_id=step_id, accepted=False, checks=[Check(name="judge", passed=False, detail=str(reply.error)[:500])],
                           failure_type=FailureType.model_error, reason=f"the judge gave no verdict: {reply.error}"[:600],
                           confidence=0.0, next_action=NextAction.replan, usage=reply.usage,
                           judge_independent=self.judge.independent)
        return self._from_judge(step_id, [Check(name="judge", passed=reply.accepted, detail=(reply.reason or "-")[:500])],
                                reply, result[:300] if reply.accepted else "", None)


def _keeping(verdict: Verdict, superseded: list, quarantined: list) -> Verdict:
    """An accepted step keeps the record of which of its sentences a newer passage replaced and which passages were
    quarantined; a rejected one keeps nothing."""
    if not verdict.accepted or not (superseded or quarantined):
        return verdict
    return verdict.model_copy(update={"superseded": superseded, "quarantined": quarantined})


def _evidence(ctx: StepContext, limit: int = 300) -> str:
    """The accepted evidence in one line: the claim and its source, or the result's first unit."""
    if ctx.claim is not None and ctx.explicit:
        src = ", ".join(ctx.claim.cites)
        return f"{_claim_text(ctx.claim)}"[:limit] if src else ctx.claim.value[:limit]
    data = ctx.result.data if isinstance(ctx.result.data, dict) else {}
    if data.get("passages"):
        p = data["passages"][0]
        return f"{p.get('title', '')}: {p.get('text', '')}"[:limit]
    if "stdout" in data:
        return str(data["stdout"]).strip()[:limit]
    return str(data.get("text", ""))[:limit]


def build_verifier(settings: Settings, mode: str | None = None) -> Verifier:
    return Verifier(settings, mode=mode)


@task(name="verify_step", retries=0, cache_policy=NO_CACHE, task_run_name="verify-{task_id}-step{plan.step_id}")
def verify_step(plan: Plan, result: Result, view: list[MemoryItem], task_id: str, settings: Settings,
                question: str = "") -> Verdict:
    """Judge one step's result against its plan, the accepted evidence and the question's own data."""
    return build_verifier(settings).verify(plan, result, view, question)
