"""The compute gate (tasks/checks/computed.py): an answer to a question that asks for a computed value waits for a
program; the turn after the refusal is a python step whose program the model writes from the question and evidence."""

from __future__ import annotations

import json

import pytest

from flows.research import DIRECT_STEPS, research
from infra.models import build_backend, clear_backend_cache
from tasks.checks import check_computed
from tasks.checks.computed import asks_for_computation
from tasks.contracts import AnswerStatus, FailureType, MemoryItem, Question
from tests.scripted import answer, plan, scripted_settings

RATIO = "What is the ratio of the area of Dydan to the area of Porax, rounded to two decimal places?"
DOCS = [{"id": "D4", "title": "Dydan", "published_at": "2023-01-16",
         "text": "Dydan is a city in the Maigou region. Dydan covers an area of 1,243 square kilometres."},
        {"id": "D64", "title": "Porax", "published_at": "2023-02-01",
         "text": "Porax is a city in the Gabryth region. The area of Porax is 105 square kilometres."}]
PROGRAM = "```python\ndydan = 1243\nporax = 105\nprint(round(dydan / porax, 2))\n```"


@pytest.fixture(autouse=True)
def _fresh_backends():
    clear_backend_cache()
    yield
    clear_backend_cache()


@pytest.mark.parametrize("question", [RATIO, "What is the difference between the population of A and of B?",
                                      "How many more employees does Acme have than Bolt?",
                                      "What is the total number of pails he gets in a week?"])
def test_questions_that_ask_for_a_computed_value(question):
    assert asks_for_computation(question)


@pytest.mark.parametrize("question", ["What is the population of Dydan?", "Who founded Velt Corporation?",
                                      "Which has the larger area: Dydan or Porax?"])
def test_lookups_and_comparisons_do_not(question):
    assert not asks_for_computation(question)
    assert check_computed(question, []).failure is None


def _item(tool: str) -> MemoryItem:
    return MemoryItem(id="step-1", step_id=1, status="accepted", content={"stdout": "11.84\n"} if tool == "python" else {},
                      provenance={"tool": tool, "step_id": 1})


def test_the_gate_refuses_until_a_program_s_result_is_accepted():
    out = check_computed(RATIO, [_item("search")])
    assert out.failure.type is FailureType.needs_computation and "ratio" in out.failure.reason
    assert check_computed(RATIO, [_item("search"), _item("python")]).failure is None


def _run(tmp_path, planner_replies, generator_replies, **overrides):
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text("".join(json.dumps(d) + "\n" for d in DOCS))
    s = scripted_settings(planner_replies, generator_replies, corpus=corpus, as_of="2025-01-01", **overrides)
    return research(Question(id="q", question=RATIO), s, run_id="t", steps=DIRECT_STEPS), s


def test_in_the_loop_the_refused_answer_is_followed_by_a_program_over_the_verified_values(tmp_path):
    # planner calls: the search plan, an answer plan (refused), the compute turn's program, the answer plan
    out, s = _run(tmp_path, [plan("search", "Dydan Porax area"), plan("answer"), PROGRAM, plan("answer")],
                  [answer("11.84", 3)], **{"verifier.compute_gate": 1})
    assert out.answer.status is AnswerStatus.answered and out.answer.text == "11.84"
    steps = [(r.role, r.tool, r.accepted) for r in out.records if r.role in ("planner", "verifier")]
    assert steps[:2] == [("planner", "search", True), ("verifier", "search", True)]
    assert ("planner", "python", True) in steps and ("verifier", "python", True) in steps
    refusal = next(i for i in out.memory.debug_trace() if i.failure_type is FailureType.needs_computation)
    assert "compute it with python" in refusal.reason
    python = next(i for i in out.memory.accepted_view() if i.provenance.tool == "python")
    assert python.content["stdout"].strip() == "11.84" and "1243" in python.args["code"]
    program_prompt = build_backend(s.models.planner).requests[2]["messages"][-1]["content"]
    assert RATIO in program_prompt and "1,243 square kilometres" in program_prompt  # the question and the evidence


def test_with_the_gate_off_or_python_not_allowed_the_answer_is_not_held(tmp_path):
    out, _ = _run(tmp_path, [plan("search", "Dydan Porax area"), plan("answer")], [answer("1243", 1)])
    assert out.answer.status is AnswerStatus.answered and not any(
        i.failure_type is FailureType.needs_computation for i in out.memory.debug_trace())
    clear_backend_cache()
    out, _ = _run(tmp_path, [plan("search", "Dydan Porax area"), plan("answer")], [answer("1243", 1)],
                  **{"verifier.compute_gate": 1, "tools.allow": ["search"]})
    assert not any(i.failure_type is FailureType.needs_computation for i in out.memory.debug_trace())
