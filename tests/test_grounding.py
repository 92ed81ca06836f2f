"""Evidence first (tasks/checks/grounding.py): a program for a question that states no quantities is refused before it
runs while nothing is accepted, and the next turn must choose a tool that finds evidence."""

from __future__ import annotations

import json

import pytest

from flows.research import DIRECT_STEPS, research
from infra.models import build_backend, clear_backend_cache
from tasks.checks import check_evidence_first
from tasks.contracts import AnswerStatus, FailureType, MemoryItem, Plan, Question
from tests.scripted import answer, plan, scripted_settings

COMPARE = "Which has the larger area: Dydan or Porax?"
DOCS = [{"id": "D4", "title": "Dydan", "published_at": "2023-01-16", "text": "Dydan covers an area of 1,243 square kilometres."},
        {"id": "D64", "title": "Porax", "published_at": "2023-02-01", "text": "The area of Porax is 105 square kilometres."}]
GUESS = "dydan = 1000\nporax = 2000\nprint('Dydan' if dydan > porax else 'Porax')"


@pytest.fixture(autouse=True)
def _fresh_backends():
    clear_backend_cache()
    yield
    clear_backend_cache()


def _python(code=GUESS):
    return Plan(step_id=1, sub_goal="compare the areas", tool="python", args={"code": code})


def test_a_program_with_nothing_to_compute_with_is_refused():
    out = check_evidence_first(COMPARE, _python(), [])
    assert out.failure.type is FailureType.unsupported and "search for the values first" in out.failure.reason


@pytest.mark.parametrize("question", ["Find 36 multiplied by 317, minus 467.",
                                      "Janet has three apples and buys twice as many. How many does she have?"])
def test_a_question_that_states_quantities_keeps_its_programs(question):
    assert check_evidence_first(question, _python("print(36 * 317 - 467)"), []).failure is None


def test_accepted_evidence_or_another_tool_passes():
    item = MemoryItem(id="step-1", step_id=1, status="accepted", content={}, provenance={"tool": "search", "step_id": 1})
    assert check_evidence_first(COMPARE, _python(), [item]).failure is None
    search = Plan(step_id=1, sub_goal="find it", tool="search", args={"query": "Dydan area"})
    assert check_evidence_first(COMPARE, search, []).failure is None


def _run(tmp_path, planner, generator, **overrides):
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text("".join(json.dumps(d) + "\n" for d in DOCS))
    s = scripted_settings(planner, generator, corpus=corpus, as_of="2025-01-01", **overrides)
    return research(Question(id="q", question=COMPARE), s, run_id="t", steps=DIRECT_STEPS), s


def test_in_the_loop_the_refused_program_never_runs_and_the_next_turn_must_find_evidence(tmp_path):
    code = "print('Dydan' if 1243 > 105 else 'Porax')"
    out, s = _run(tmp_path, [plan("python", GUESS), plan("search", "Dydan Porax area"), plan("python", code), plan("answer")],
                  [answer("Dydan", 3)])  # on by default
    assert out.answer.status is AnswerStatus.answered and out.answer.text == "Dydan"
    assert [r.tool for r in out.records if r.role == "executor"] == ["search", "python"]  # the guess never ran
    refusal = next(i for i in out.memory.debug_trace() if i.failure_type is FailureType.unsupported)
    assert refusal.step_id == 1 and "search for the values first" in refusal.reason
    schemas = [r["json_schema"] for r in build_backend(s.models.planner).requests]
    tools = [json.dumps(x) for x in schemas]
    assert '"python"' in tools[0] and '"python"' not in tools[1] and '"answer"' not in tools[1]  # only the turn after
    assert '"python"' in tools[2] and '"answer"' in tools[2]


def test_off_the_program_runs_as_before(tmp_path):
    out, _ = _run(tmp_path, [plan("python", GUESS), plan("answer")], [answer("Porax", 1)], **{"verifier.evidence_first": False})
    assert [r.tool for r in out.records if r.role == "executor"] == ["python"]


def test_a_tool_outside_the_allow_list_is_denied_as_before_not_refused_for_evidence(tmp_path):
    out, _ = _run(tmp_path, [plan("python", GUESS), plan("answer")], [answer("Porax", 1)], **{"tools.allow": ["search"]})
    [executed] = [r for r in out.records if r.role == "executor"]
    assert executed.tool == "python" and executed.detail.startswith("denied")  # permission is decided first
