"""Rollouts for Flow-GRPO: the whole research flow with a sampling Planner policy, one trajectory at a time.

A `RolloutWorker` holds its own copy of the Planner policy (the `hf_policy` backend: transformers +
LoRA; or `vllm_policy`: a vLLM server) and runs the real loop (Planner -> Executor -> Verifier ->
Generator, the real tools and budget) as plain functions (DIRECT_STEPS: no Prefect server per
worker). After each trajectory it drains the policy's recorded turns (prompt ids, sampled ids,
their logprobs), scores the answer with the benchmark's mechanical scorer and computes the reward.
As a Ray actor (`remote_workers`) the learner ships the adapter's weights to it after each update.
"""

from __future__ import annotations

import os
import time
from collections import Counter
from dataclasses import asdict, dataclass, field
from typing import Any

from infra.models import build_backend
from infra.runtime.settings import Settings
from tasks.contracts import FailureType, Question, Role
from tasks.eval.scorers import score_question
from tasks.learn.reward import TrajectoryFacts, answerable, compute_reward, evidence_missing, gold_doc_ids
from tasks.modules.tools import tool_cards

INVALID_TOOL = "invalid"
"""The tool name counted for a Planner turn whose output was not a valid plan."""


@dataclass
class Trajectory:
    """One run of the flow on one question, with the Planner turns that produced it and its reward."""

    question_id: str
    group_index: int
    reward: float
    correct: bool
    status: str
    stop_reason: str
    answer: str
    reward_terms: dict[str, float] = field(default_factory=dict)
    turns: list[dict[str, Any]] = field(default_factory=list)
    """Planner turns: prompt_ids, completion_ids, logprobs, temperature, finish_reason, text."""
    tools: list[str] = field(default_factory=list)
    """The tool each Planner turn chose ('answer', a tool name, or 'invalid')."""
    tool_calls: int = 0
    tool_cost: float = 0.0
    malformed_plans: int = 0
    policy_version: int = 0
    wall_s: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def trajectory_facts(question: dict, outcome, settings: Settings, correct: bool) -> TrajectoryFacts:
    """What the reward needs, read from the loop's step records and its accepted memory."""
    cards = tool_cards(settings)
    executed = [r for r in outcome.records if r.role is Role.executor]
    cost = sum(cards[r.tool].cost for r in executed if r.tool in cards and not r.detail.startswith("denied"))
    malformed = sum(1 for r in outcome.records if r.role is Role.planner and r.failure_type is FailureType.schema)
    accepted = [item.content for item in outcome.memory.accepted_view()]
    return TrajectoryFacts(correct=correct, status=outcome.answer.status.value, tool_calls=len(executed), tool_cost=cost,
                           malformed_plans=malformed, evidence_missing=evidence_missing(accepted, gold_doc_ids(question)),
                           answerable=answerable(question))


class RolloutWorker:
    """Runs trajectories with its own copy of the Planner policy; plain object or Ray actor."""

    def __init__(self, settings_json: str, worker_id: int = 0, torch_threads: int = 1):
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        try:
            import torch

            torch.set_num_threads(torch_threads)
        except ImportError:  # the vllm_policy path needs no torch in the worker
            pass
        self.settings = Settings.model_validate_json(settings_json)
        self.worker_id = worker_id
        self.version = 0
        planner = self.settings.models.planner
        if planner.backend == "hf_policy":
            from infra.models.hf_policy import policy_model

            policy_model(planner, lora=self.settings.train.lora)  # the learner's LoRA shape; its weights come later
        build_backend(planner)  # load the policy now, not inside the first trajectory

    def ready(self) -> int:
        return self.worker_id

    def set_policy(self, lora_state: dict | None, version: int) -> int:
        """Take the learner's adapter weights (hf_policy); a server-side policy is reloaded by the learner."""
        backend = build_backend(self.settings.models.planner)
        policy = getattr(backend, "policy", None)
        if lora_state is not None and policy is not None:
            policy.load_lora_state(lora_state, version)
        self.version = version
        return version

    def rollout(self, question: dict, group_index: int, seed: int, *, temperature: float | None = None,
                corpus: str | None = None, run_id: str = "train") -> Trajectory:
        """One trajectory of the research flow on `question`; never raises for model or tool failures."""
        from flows.research import DIRECT_STEPS, research

        settings = self.settings
        if temperature is not None or corpus is not None:
            settings = settings.model_copy(deep=True)
            if temperature is not None:
                settings.models.planner.temperature = temperature
            if corpus is not None:
                settings.tools.search.corpus = corpus
                if "search" not in settings.tools.allow:
                    settings.tools.allow = [*settings.tools.allow, "search"]
        backend = build_backend(settings.models.planner)
        recorder = getattr(backend, "policy", backend)
        if hasattr(recorder, "recording"):
            recorder.recording = True
        drain = getattr(backend, "drain_turns", list)  # a non-policy backend (scripted, in tests) records nothing
        drain()  # nothing left over from an earlier, interrupted call
        _seed_everything(seed)
        t0 = time.perf_counter()
        q = Question(id=str(question["id"]), question=question["question"], answer=question.get("answer"))
        outcome = research(q, settings, run_id=f"{run_id}-{q.id}-g{group_index}", steps=DIRECT_STEPS)
        turns = drain()
        answer = outcome.answer
        correct = bool(score_question(question, answer.text, status=answer.status.value).correct)
        facts = trajectory_facts(question, outcome, settings, correct)
        reward = compute_reward(facts, settings.train.reward)
        tools = [r.tool or INVALID_TOOL for r in outcome.records if r.role is Role.planner]
        return Trajectory(question_id=q.id, group_index=group_index, reward=reward.total, correct=correct,
                          status=answer.status.value, stop_reason=answer.stop_reason.value, answer=answer.text[:500],
                          reward_terms=reward.as_dict(), turns=[t.to_dict() for t in turns], tools=tools,
                          tool_calls=facts.tool_calls, tool_cost=facts.tool_cost, malformed_plans=facts.malformed_plans,
                          policy_version=self.version, wall_s=time.perf_counter() - t0)


def _seed_everything(seed: int) -> None:
    import random

    random.seed(seed)
    try:
        import torch

        torch.manual_seed(seed)
    except ImportError:
        pass


def tool_distribution(trajectories: list[Trajectory]) -> dict[str, int]:
    """How often each tool was chosen over all Planner turns of a batch."""
    return dict(Counter(t for tr in trajectories for t in tr.tools))
