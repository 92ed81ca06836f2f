"""Flow-GRPO reward: one number per trajectory from the mechanical score plus explicit, configurable terms.

``reward = correct * cfg.correct + safe_stop - tool_cost - malformed_plans``, where

- ``correct``: the benchmark's mechanical scorer on the final answer (0 or 1);
- ``safe_stop``: ``cfg.safe_stop`` when the run stopped ``uncertain`` after at least one tool ran (a
  Planner that never looks earns no credit for "I don't know"), the answer was not already scored
  correct, and ``cfg.safe_stop_when`` holds: ``unanswerable`` (the default) - the question itself has
  no answer (expected status other than answered), so the stop is verified by the data;
  ``evidence_missing`` - no accepted evidence holds the gold facts, on any question. The second
  credits giving up on answerable questions the policy failed to research: on the 0.5B base it was
  the larger part of the reward in 15 of 20 steps of a claim seed (docs/training.md), i.e. the policy
  was paid more for stopping than for answering;
- ``tool_cost``: ``cfg.tool_cost`` per tool cost unit spent (the budget's unit);
- ``malformed_plans``: ``cfg.malformed_plan`` per Planner output that was not a valid plan.

Pure: facts in, a breakdown out. The rollout worker gathers the facts (tasks/rollout.py).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass
from typing import Any

from infra.runtime.settings import RewardConfig


@dataclass(frozen=True)
class TrajectoryFacts:
    """What the reward needs to know about one finished trajectory."""

    correct: bool
    status: str
    """The Answer's status (answered, uncertain, needs_review, budget_exhausted, failed)."""
    tool_calls: int
    tool_cost: float
    malformed_plans: int
    evidence_missing: bool
    """No accepted evidence holds the gold facts (see :func:`evidence_missing`)."""
    answerable: bool = True
    """The question has an answer (its expected status is ``answered``, or it states none)."""


@dataclass(frozen=True)
class RewardBreakdown:
    total: float
    correct: float
    safe_stop: float
    tool_cost: float
    malformed_plan: float

    def as_dict(self) -> dict[str, float]:
        return asdict(self)


def compute_reward(facts: TrajectoryFacts, cfg: RewardConfig) -> RewardBreakdown:
    """The trajectory's reward and its terms (penalties are reported as positive magnitudes)."""
    correct = cfg.correct if facts.correct else 0.0
    verified = not facts.answerable if cfg.safe_stop_when == "unanswerable" else facts.evidence_missing
    safe = cfg.safe_stop if (not facts.correct and facts.status == "uncertain" and facts.tool_calls > 0
                             and verified) else 0.0
    cost = cfg.tool_cost * max(0.0, facts.tool_cost)
    malformed = cfg.malformed_plan * max(0, facts.malformed_plans)
    total = correct + safe - cost - malformed
    return RewardBreakdown(total=total, correct=correct, safe_stop=safe, tool_cost=cost, malformed_plan=malformed)


def evidence_missing(accepted_contents: Iterable[Any], gold_doc_ids: Iterable[str] | None) -> bool:
    """True when no accepted evidence holds the gold facts.

    With gold document ids (the synthetic world), evidence is present iff some accepted item's
    content mentions one of them; without them (other benchmarks), iff anything was accepted.
    """
    contents = list(accepted_contents)
    golds = [g for g in (gold_doc_ids or []) if g]
    if not golds:
        return not contents
    text = " ".join(c if isinstance(c, str) else json.dumps(c, default=str) for c in contents)
    return not any(re.search(rf"(?<![\w-]){re.escape(g)}(?![\w-])", text) for g in golds)


def answerable(question: Mapping[str, Any]) -> bool:
    """Whether a question record has an answer (benchmarks without ``expected_status`` always do)."""
    return str(question.get("expected_status") or "answered") == "answered"


def gold_doc_ids(question: Mapping[str, Any]) -> list[str]:
    """The gold document ids of a question record, when it has them."""
    ids = question.get("gold_doc_ids") or []
    return [str(i) for i in ids] if isinstance(ids, list) else []
