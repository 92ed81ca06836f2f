"""The monolithic ReAct baseline under the same budget, tools and reply format as the modular loop."""

import pytest

from infra.models import clear_backend_cache
from tasks.baselines.monolithic import run_monolithic
from tasks.contracts import AnswerStatus, BudgetLimit, Question, Role, StopReason
from tests.scripted import plan, scripted_settings

Q = Question(id="q1", question="How deep is Lake Orvanne?")


@pytest.fixture(autouse=True)
def _fresh():
    clear_backend_cache()


def test_react_agent_searches_then_answers_in_one_context(corpus_file):
    s = scripted_settings([plan("search", "Lake Orvanne depth"), plan("answer", "212 metres")], corpus=corpus_file)
    out = run_monolithic(Q, s, run_id="mono")
    assert out.answer.status is AnswerStatus.answered and out.answer.text == "212 metres"
    assert out.answer.cost[Role.planner].calls == 2 and out.answer.cost[Role.executor].calls == 1
    assert Role.verifier not in out.answer.cost  # no separate judge: that is the baseline


def test_same_budget_applies(corpus_file):
    s = scripted_settings([plan("search", f"Lake Orvanne {i}") for i in range(30)], ["final guess"], corpus=corpus_file,
                          budget={"max_steps": 3})
    s.models.generator = s.models.planner  # the final answer uses the same single model
    out = run_monolithic(Q, s, run_id="mono")
    assert out.answer.stop_reason is StopReason.budget_exhausted and out.answer.budget_limit is BudgetLimit.steps
    assert out.answer.status is AnswerStatus.budget_exhausted
    assert out.answer.cost[Role.planner].calls == 3
    assert out.answer.cost[Role.generator].calls == 1  # the reserved final answer


def test_repeated_plans_stop_the_baseline_too(corpus_file):
    s = scripted_settings([plan("search", "Lake Orvanne depth")], corpus=corpus_file)
    out = run_monolithic(Q, s, run_id="mono")
    assert out.answer.stop_reason is StopReason.repeated_plan
    assert out.answer.status is AnswerStatus.uncertain
