"""The program call (tools.python.program_call): the Planner says what to compute, a second call writes the program."""

import json

import pytest

from flows.research import DIRECT_STEPS, CallCosts, research
from infra.models import build_backend, clear_backend_cache
from tasks.baselines.monolithic import run_monolithic
from tasks.budget import Budget
from tasks.contracts import BudgetLimit, FailureType, Question, Role
from tasks.modules.programs import program_of
from tasks.modules.prompts import monolithic_messages, planner_messages
from tasks.modules.tools import tool_cards
from tests.scripted import answer, plan, scripted_settings

Q = Question(id="m", question="A shop sells 17 tickets at $23 each. How many dollars does it take in?")
TASK = "the dollars from 17 tickets at $23 each"


@pytest.fixture(autouse=True)
def _fresh_backends():
    clear_backend_cache()
    yield
    clear_backend_cache()


def _settings(planner: list[str], cites: int = 1, **kw):
    return scripted_settings(planner, [answer("391 dollars", cites)], **{"tools.python.program_call": True, **kw})


def test_the_planner_says_what_to_compute_and_its_model_writes_the_program():
    s = _settings([plan("python", TASK), "Here it is:\n```python\ntickets = 17\nprice = 23\nprint(tickets * price)\n```",
                   plan("answer")])
    out = research(Q, s, run_id="t", steps=DIRECT_STEPS)
    assert out.answer.text == "391 dollars" and out.answer.citations[0].step_id == 1
    step = out.judged[0]
    assert step.plan.args == {"code": "tickets = 17\nprice = 23\nprint(tickets * price)"}  # the program, not the task
    assert step.result.data["stdout"].strip() == "391" and step.verdict.accepted
    requests = build_backend(s.models.planner).requests
    assert requests[0]["json_schema"] is not None and requests[1]["json_schema"] is None  # a free-form second call
    assert f"Step: {TASK}" in requests[1]["messages"][-1]["content"] and Q.question in requests[1]["messages"][-1]["content"]
    first, second = [r for r in out.records if r.role is Role.planner]
    assert first.tokens_in > 0 and first.tool == "python"
    assert (first.model_calls, second.model_calls) == (2, 1)  # the program call is counted where it was made
    assert sum(r.calls_made() for r in out.records) == 4  # + the Generator; the Verifier asked no model
    assert out.answer.cost[Role.planner].calls == 2  # two planner turns (python, answer); the program call is inside the first


def test_a_turn_with_its_program_call_is_charged_and_admitted_as_two_model_calls():
    s = _settings([plan("python", TASK), "```python\nprint(17 * 23)\n```", plan("answer")])
    costs = CallCosts(s)
    assert costs.planner.calls == 2
    assert costs.planner.model_tokens == 2 * (s.models.planner.max_input_tokens + s.models.planner.max_tokens)
    out = research(Q, s, run_id="t", steps=DIRECT_STEPS)
    # python turn (2 calls) + answer turn (2 declared, 1 made) + the Generator
    assert out.answer.status.value == "answered"
    b = Budget(s.budget.model_copy(update={"max_model_calls": 2}), answer_reserve=costs.generator)
    assert b.refuse(costs.planner) is BudgetLimit.calls  # 2 calls + the Generator's reserved 1 do not fit in 2
    off = scripted_settings([plan("answer")])
    assert CallCosts(off).planner.calls == 1


def test_an_empty_program_reply_is_a_schema_failure_fed_back_to_the_planner():
    s = _settings([plan("python", TASK), "", plan("python", TASK), "```python\nprint(17 * 23)\n```", plan("answer")], cites=2)
    out = research(Q, s, run_id="t", steps=DIRECT_STEPS)
    failures = [i for i in out.memory.debug_trace() if i.failure_type is FailureType.schema]
    assert failures and "wrote no program" in failures[0].reason
    assert out.answer.text == "391 dollars"


def test_the_monolithic_agent_gets_the_same_program_call():
    s = _settings([plan("python", TASK), "```python\nprint(17 * 23)\n```", plan("answer", "391")])
    out = run_monolithic(Q, s, run_id="mono")
    assert out.answer.text == "391"
    assert [r.role for r in out.records][:2] == [Role.planner, Role.executor]
    requests = build_backend(s.models.planner).requests
    assert requests[1]["json_schema"] is None and f"Step: {TASK}" in requests[1]["messages"][-1]["content"]
    assert "391" in requests[2]["messages"][-1]["content"]  # the program's output is in the next turn's transcript


def test_prompts_say_what_tool_input_holds_and_the_demo_shows_a_task_only_with_the_program_call():
    on = tool_cards(_settings([plan("answer")]))
    off = tool_cards(scripted_settings([plan("answer")]))
    for cards, shows_code in ((on, False), (off, True)):
        for messages in (planner_messages(Q.question, cards, [], None, 2000, demos=True),
                         monolithic_messages(Q.question, cards, [], 2000, demos=True)):
            system = messages[0]["content"]
            assert ("tool_input = the code" in system) is shows_code
            assert ("tool_input = what to compute" in system) is not shows_code
            demo_python = [json.loads(m["content"]) for m in messages if m["role"] == "assistant"
                           and json.loads(m["content"])["tool"] == "python"]
            assert demo_python and ("print(" in demo_python[0]["tool_input"]) is shows_code


def test_program_of_reads_the_fenced_block_or_the_bare_reply():
    assert program_of("text\n```python\nprint(1)\n```\nmore") == "print(1)"
    assert program_of("print(2)") == "print(2)"
    assert program_of("") == ""


def test_the_where_programs_are_written_probe_runs_both_programs(tmp_path):
    from flows.bench import programs

    qs = tmp_path / "q.jsonl"
    qs.write_text(json.dumps({"id": "a", "question": Q.question, "answer": "391"}) + "\n")
    s = scripted_settings([plan("python", "print(17 + 23)"), "```python\nprint(17 * 23)\n```"])
    counts = programs.compare([json.loads(qs.read_text())], s, tmp_path / "out.jsonl")
    assert counts == {"questions": 1, "in_plan": 0, "fenced": 1, "planner_chose_python": 1}
    row = json.loads((tmp_path / "out.jsonl").read_text())
    assert row["in_plan_code"] == "print(17 + 23)" and row["fenced_code"] == "print(17 * 23)"
    (tmp_path / "bad.jsonl").write_text('{"id": "a"}\n')
    assert programs.main([str(tmp_path / "bad.jsonl"), "--out", str(tmp_path / "o.jsonl")]) == 2
