"""The research loop with scripted models: stops, budgets, memory hygiene (no Prefect needed)."""

import pytest
from hypothesis import HealthCheck, given
from hypothesis import settings as hsettings
from hypothesis import strategies as st

from flows.research import DIRECT_STEPS, research
from infra.models import clear_backend_cache
from tasks.contracts import AnswerStatus, BudgetLimit, FailureType, MemoryStatus, Question, Role, StopReason
from tests.scripted import answer, plan, scripted_settings

Q = Question(id="q1", question="How deep is Lake Orvanne?")


@pytest.fixture(autouse=True)
def _fresh_backends():
    clear_backend_cache()
    yield
    clear_backend_cache()


def _run(settings, question=Q):
    return research(question, settings, run_id="test", steps=DIRECT_STEPS)


def test_search_then_answer_cites_the_verified_source(corpus_file):
    s = scripted_settings([plan("search", "Lake Orvanne depth"), plan("answer")],
                          [answer("Lake Orvanne is 212 metres deep.", 1)], corpus=corpus_file)
    out = _run(s)
    a = out.answer
    assert a.status is AnswerStatus.answered and a.stop_reason is StopReason.answered
    assert a.citations[0].step_id == 1 and a.citations[0].source.uri == "corpus://d1"
    assert a.cost[Role.planner].calls == 2 and a.cost[Role.executor].calls == 1
    assert a.cost[Role.verifier].calls == 1 and a.cost[Role.generator].calls == 1
    assert a.cost[Role.planner].tokens_in > 0 and a.cost[Role.generator].tokens_out > 0
    assert [r.role for r in out.records] == [Role.planner, Role.executor, Role.verifier, Role.planner, Role.generator]


def test_python_tool_runs_in_the_sandbox_and_its_output_is_evidence():
    s = scripted_settings([plan("python", "print(17 * 23)"), plan("answer")], [answer("17 * 23 = 391", 1)])
    out = _run(s, Question(id="m", question="What is 17 * 23?"))
    assert out.answer.status is AnswerStatus.answered
    assert out.memory.accepted_view()[0].content["stdout"].strip() == "391"


def test_same_plan_forever_stops_as_repeated_plan_and_is_not_rerun(corpus_file):
    s = scripted_settings([plan("search", "Lake Orvanne depth")], corpus=corpus_file)
    out = _run(s)
    assert out.answer.stop_reason is StopReason.repeated_plan
    assert out.answer.status is AnswerStatus.uncertain  # never a confident answer
    assert out.answer.cost[Role.executor].calls == 1  # repeats are refused, not executed
    assert out.answer.cost[Role.planner].rejections >= 1


def test_always_rejected_results_stop_as_no_progress_and_never_enter_memory():
    codes = [plan("python", f"raise SystemExit({i})") for i in range(1, 10)]
    s = scripted_settings(codes, budget={"max_consecutive_rejections": 3, "max_steps": 9},
                          verifier={"evidence_first": False})  # the programs must run: this is the tool-error path
    out = _run(s)
    assert out.answer.stop_reason is StopReason.no_progress
    assert out.answer.status is AnswerStatus.uncertain
    assert out.memory.accepted_view() == []
    assert {i.failure_type for i in out.memory.debug_trace()} == {FailureType.tool_error}
    assert out.answer.citations == []


def test_invalid_planner_output_is_logged_as_schema_and_charged():
    s = scripted_settings(["this is not json", '{"tool": "search"}', "{}"], budget={"max_consecutive_rejections": 3})
    out = _run(s)
    assert out.answer.stop_reason is StopReason.no_progress
    planner_records = [r for r in out.records if r.role is Role.planner]
    assert [r.failure_type for r in planner_records] == [FailureType.schema] * 3
    assert all(r.tokens_in > 0 for r in planner_records)  # invalid output still costs tokens
    assert len(out.memory) == 0 and len(out.memory.debug_trace()) == 3


def test_unknown_tool_is_denied_by_the_executor():
    s = scripted_settings([plan("shell", "rm -rf /"), plan("answer")])
    out = _run(s)
    ex = [r for r in out.records if r.role is Role.executor][0]
    assert ex.detail.startswith("denied")
    assert out.memory.debug_trace()[0].failure_type is FailureType.denied


def test_token_budget_stops_the_loop_but_the_answer_still_fits(corpus_file):
    queries = [plan("search", f"Lake Orvanne depth {i}") for i in range(20)]
    s = scripted_settings(queries, [answer("212 metres", 1)], corpus=corpus_file,
                          budget={"max_tokens": 9000, "max_steps": 20, "max_calls_per_role": {"planner": 20, "executor": 20, "verifier": 20, "generator": 1}, "max_model_calls": 40, "max_tool_cost": 100})
    out = _run(s)
    assert out.answer.stop_reason is StopReason.budget_exhausted
    assert out.answer.budget_limit is BudgetLimit.tokens
    assert out.answer.status is AnswerStatus.budget_exhausted
    assert out.answer.cost[Role.generator].calls == 1
    used = sum(r.tokens_in + r.tokens_out for r in out.records)
    assert used <= 9000


def test_answer_from_an_estimate_only_is_uncertain():
    s = scripted_settings([plan("generalist", "What is 17 * 23?"), plan("answer")], [answer("391", 1)], generalist=["391"])
    out = _run(s, Question(id="m", question="What is 17 * 23?"))
    assert out.memory.accepted_view()[0].status is MemoryStatus.estimate
    assert out.answer.status is AnswerStatus.uncertain  # a model's own guess is not verified evidence


def test_answer_without_evidence_is_uncertain_and_makes_no_model_call():
    s = scripted_settings([plan("answer")])
    out = _run(s)
    assert out.answer.status is AnswerStatus.uncertain
    assert out.answer.cost[Role.generator].tokens_in == 0


def test_generator_citing_unknown_steps_falls_back_to_cited_evidence(corpus_file):
    s = scripted_settings([plan("search", "Mount Kelbra"), plan("answer")], [answer("made up", 7)], corpus=corpus_file)
    out = _run(s, Question(id="k", question="How high is Mount Kelbra?"))
    assert all(c.step_id == 1 for c in out.answer.citations)
    assert out.answer.status is AnswerStatus.uncertain


ADVERSARIAL = st.sampled_from([
    plan("search", "Lake Orvanne depth"),
    plan("search", "Mount Kelbra"),
    plan("python", "print(1)"),
    plan("python", "while True: pass"),
    plan("generalist", "guess"),
    plan("shell", "ls"),
    plan("answer"),
    "garbage",
    '{"sub_goal": "x", "tool": "search", "tool_input": ""}',
])


@hsettings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(script=st.lists(ADVERSARIAL, min_size=1, max_size=12), max_tokens=st.integers(1200, 12000),
       max_calls=st.integers(2, 14), max_cost=st.floats(0, 6), max_steps=st.integers(1, 8))
def test_budget_is_never_exceeded(corpus_file, script, max_tokens, max_calls, max_cost, max_steps):
    clear_backend_cache()
    s = scripted_settings(script, [answer("a", 1)], corpus=corpus_file,
                          budget={"max_tokens": max_tokens, "max_model_calls": max_calls, "max_tool_cost": max_cost,
                                  "max_steps": max_steps, "max_wall_s": 60, "answer_reserve_s": 5},
                          **{"tools.python.timeout_s": 1.0})
    out = _run(s)
    recs = out.records
    b = s.budget
    assert sum(r.tokens_in + r.tokens_out for r in recs) <= b.max_tokens
    model_calls = sum(1 for r in recs if r.model is not None)
    assert model_calls <= b.max_model_calls
    for role in Role:
        assert sum(1 for r in recs if r.role is role) <= b.max_calls_per_role.get(role.value, 10**6)
    assert sum(1 for r in recs if r.role is Role.planner) <= b.max_steps
    tool_cost = sum(s.tools.python.cost if r.tool == "python" else s.tools.search.cost if r.tool == "search"
                    else s.tools.generalist.cost for r in recs if r.role is Role.executor and r.tool in ("python", "search", "generalist"))
    assert tool_cost <= b.max_tool_cost + 1e-9
    assert out.answer.status is not AnswerStatus.answered or out.answer.stop_reason is StopReason.answered


def test_a_bare_expression_prints_its_value_and_newlines_in_code_are_data():
    code_with_newline = '{"sub_goal": "multiply", "tool": "python", "tool_input": "x = 17\n23 * x", "justification": "j"}'
    s = scripted_settings([plan("python", "17 * 23"), code_with_newline, plan("answer")], [answer("391", 1)])
    out = _run(s, Question(id="m", question="What is 17 * 23?"))
    view = out.memory.accepted_view()
    assert view[0].content["stdout"].strip() == "391"
    ran = [r for r in out.records if r.role is Role.executor]
    assert len(ran) == 2  # the reply with a raw newline inside a string was parsed, not rejected


def test_a_program_that_prints_nothing_prints_its_last_value_as_a_notebook_cell():
    from tasks.modules.tools import echo_expression

    run = {}
    for code, shown in [("rolls = 3 * 24\nsold = rolls * 2 / 3", "48.0"), ("a = 4\na * 5", "20"),
                        ("total = 3\ntotal += 4", "7"), ("x = 2\nprint(x + 1)", "3"), ("import math", "")]:
        exec(compile(echo_expression(code), "<program>", "exec"), {"print": lambda v: run.__setitem__(code, str(v))})
        assert run.get(code, "") == shown, code
    assert echo_expression("x = 2\nprint(x)") == "x = 2\nprint(x)"  # a program that prints runs as written
    assert echo_expression("a, b = 1, 2") == "a, b = 1, 2"  # no single name to show
    assert echo_expression("def (:") == "def (:"  # a syntax error is the sandbox's to report


def test_memory_off_ablation_shows_the_planner_only_the_last_step(corpus_file):
    import infra.models as models

    script = [plan("search", "Lake Orvanne"), plan("search", "Mount Kelbra"), plan("search", "Velt Corporation"), plan("answer")]
    for mode, sees_first_doc in (("all", True), ("last", False)):
        clear_backend_cache()
        s = scripted_settings(script, [answer("x", 1)], corpus=corpus_file, **{"memory.planner_view": mode})
        _run(s)
        fourth_prompt = models.build_backend(s.models.planner).requests[3]["messages"][-1]["content"]
        assert ("Lake Orvanne is 212" in fourth_prompt) is sees_first_doc
        assert "Velt Corporation was founded" in fourth_prompt
