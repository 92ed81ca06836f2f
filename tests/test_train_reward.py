"""The Flow-GRPO reward: mechanical score plus explicit safe-stop, tool-cost and malformed-plan terms."""

from __future__ import annotations

import pytest

from infra.runtime.settings import RewardConfig
from tasks.learn.reward import TrajectoryFacts, answerable, compute_reward, evidence_missing, gold_doc_ids


def facts(**kw) -> TrajectoryFacts:
    base = dict(correct=False, status="answered", tool_calls=0, tool_cost=0.0, malformed_plans=0, evidence_missing=False)
    base.update(kw)
    return TrajectoryFacts(**base)


CFG = RewardConfig(correct=1.0, safe_stop=0.25, tool_cost=0.02, malformed_plan=0.1)


def test_correct_answer_minus_tool_cost():
    r = compute_reward(facts(correct=True, tool_calls=2, tool_cost=2.0), CFG)
    assert r.total == pytest.approx(1.0 - 0.04)
    assert (r.correct, r.safe_stop, r.tool_cost, r.malformed_plan) == (1.0, 0.0, pytest.approx(0.04), 0.0)


def test_wrong_answer_with_malformed_plans():
    r = compute_reward(facts(correct=False, malformed_plans=3), CFG)
    assert r.total == pytest.approx(-0.3) and r.malformed_plan == pytest.approx(0.3)


def test_by_default_a_safe_stop_is_credited_only_on_a_question_without_an_answer():
    assert CFG.safe_stop_when == "unanswerable"
    stopped = dict(status="uncertain", tool_calls=1, tool_cost=1.0, evidence_missing=True)
    # an answerable question the policy failed to research: stopping earns what a wrong answer earns
    assert compute_reward(facts(**stopped), CFG).safe_stop == 0.0
    assert compute_reward(facts(**stopped), CFG).total == compute_reward(facts(tool_calls=1, tool_cost=1.0), CFG).total
    assert compute_reward(facts(**stopped, answerable=False), CFG).total == pytest.approx(0.25 - 0.02)
    assert compute_reward(facts(**stopped | {"tool_calls": 0}, answerable=False), CFG).safe_stop == 0.0  # never looked
    # a scorer that already counts the stop correct (the world's) pays once
    r = compute_reward(facts(**stopped | {"correct": True}, answerable=False), CFG)
    assert (r.correct, r.safe_stop) == (1.0, 0.0)


def test_answerable_reads_the_expected_status():
    assert answerable({"expected_status": "answered"}) and answerable({"question": "2+2?"})
    assert not answerable({"expected_status": "uncertain"})


def test_evidence_missing_rule_credits_a_stop_when_evidence_really_is_missing_after_looking():
    CFG = RewardConfig(correct=1.0, safe_stop=0.25, tool_cost=0.02, malformed_plan=0.1, safe_stop_when="evidence_missing")
    looked = facts(status="uncertain", tool_calls=1, tool_cost=1.0, evidence_missing=True)
    assert compute_reward(looked, CFG).total == pytest.approx(0.25 - 0.02)
    # never looked: no credit for "I don't know"
    assert compute_reward(facts(status="uncertain", tool_calls=0, evidence_missing=True), CFG).safe_stop == 0.0
    # the evidence was there: stopping is not safe, it is giving up
    assert compute_reward(facts(status="uncertain", tool_calls=1, evidence_missing=False), CFG).safe_stop == 0.0
    # a wrong answer is never a safe stop
    assert compute_reward(facts(status="answered", tool_calls=1, evidence_missing=True), CFG).safe_stop == 0.0
    # an expected-uncertain question scored correct gets the correct reward, not both
    r = compute_reward(facts(correct=True, status="uncertain", tool_calls=1, evidence_missing=True), CFG)
    assert (r.correct, r.safe_stop) == (1.0, 0.0)


def test_terms_are_configurable():
    cfg = RewardConfig(correct=2.0, safe_stop=0.0, tool_cost=0.0, malformed_plan=0.0)
    assert compute_reward(facts(correct=True, tool_cost=5, malformed_plans=2), cfg).total == 2.0


def test_evidence_missing_with_and_without_gold_documents():
    passages = [{"passages": [{"doc_id": "w1-d12", "text": "..."}]}]
    assert not evidence_missing(passages, ["w1-d12"])
    assert evidence_missing(passages, ["w1-d1"])  # a prefix of another id is not a match
    assert evidence_missing([], ["w1-d12"])
    assert not evidence_missing(["anything"], None) and evidence_missing([], None)
    assert gold_doc_ids({"gold_doc_ids": ["a", 3]}) == ["a", "3"] and gold_doc_ids({}) == []
