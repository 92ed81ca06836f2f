"""Failure attribution: each documented rule on a hand-built trace."""

import pytest

from tasks.contracts import (
    Answer,
    AnswerStatus,
    BudgetLimit,
    Citation,
    FailureType,
    NextAction,
    Plan,
    Result,
    ResultStatus,
    Role,
    StepRecord,
    StopReason,
    Verdict,
)
from tasks.eval.attribution import Evidence, attribute, contains_gold, evidence_from_memory, evidence_text
from tasks.memory import EvolvingMemory

NUM_Q = {"id": "gsm8k-1", "question": "How many?", "answer": "18", "answer_type": "number", "benchmark": "gsm8k"}
TEXT_Q = {"id": "hotpotqa-1", "question": "Who founded Velt?", "answer": "Ama Osei", "aliases": ["A. Osei"],
          "answer_type": "text", "benchmark": "hotpotqa"}


def ans(text="17", status="answered", stop="answered", cites=(), limit=None):
    return Answer(text=text, status=AnswerStatus(status), stop_reason=StopReason(stop),
                  budget_limit=BudgetLimit(limit) if limit else None,
                  citations=[Citation(claim=text, step_id=s) for s in cites])


def rec(role, step, tool=None, detail="", accepted=None, failure=None):
    return StepRecord(run_id="r", task_id="t", step_id=step, role=Role(role), tool=tool, detail=detail,
                      accepted=accepted, failure_type=FailureType(failure) if failure else None)


def ev(step, text, status="accepted", tool="python", failure=None):
    return Evidence(step_id=step, tool=tool, status=status, text=text, failure_type=failure)


def run(question=NUM_Q, answer=None, records=(), evidence=(), correct=False, tools=("python", "generalist"), extracted=None):
    return attribute(question=question, answer=answer or ans(), records=list(records), evidence=list(evidence),
                     correct=correct, tools=tools, extracted=extracted)


def test_right_and_answered_needs_no_attribution():
    assert run(answer=ans("18", cites=[1]), evidence=[ev(1, "18")], correct=True) is None


@pytest.mark.parametrize("stop,limit,module,cause", [
    ("budget_exhausted", "steps", "budget", "steps"),
    ("repeated_plan", None, "planner", "repeated_plan"),
    ("conflicting_evidence", None, "verifier", "conflict"),
])
def test_right_but_not_answered(stop, limit, module, cause):
    status = "budget_exhausted" if stop == "budget_exhausted" else "uncertain"
    a = run(answer=ans("18", status=status, stop=stop, limit=limit), correct=True)
    assert (a.module, a.cause) == (module, cause)


def test_right_but_uncited_is_the_generator():
    a = run(answer=ans("18", status="uncertain"), evidence=[ev(1, "18")], correct=True)
    assert (a.module, a.cause) == ("generator", "uncited")


def test_run_error_is_the_system():
    a = run(answer=ans("Stopped before answering (error): boom", status="failed", stop="error"))
    assert (a.module, a.cause) == ("system", "run_error")


def test_right_evidence_accepted_but_answer_wrong_is_the_generator():
    a = run(answer=ans("17", cites=[2]), evidence=[ev(1, "printed 18"), ev(2, "17")],
            records=[rec("executor", 1, "python", "ok"), rec("executor", 2, "python", "ok")])
    assert (a.module, a.cause, a.step_id) == ("generator", "wrong_answer", 1)
    uncited = run(answer=ans("17", status="uncertain"), evidence=[ev(1, "18")])
    assert (uncited.module, uncited.cause) == ("generator", "uncited")


def test_rejected_result_with_the_gold_is_a_verifier_false_reject():
    a = run(answer=ans("17", cites=[2]), evidence=[ev(1, "18", status="rejected", failure="recomputation"), ev(2, "17")])
    assert (a.module, a.cause, a.step_id) == ("verifier", "false_reject", 1)


def test_answer_from_accepted_wrong_evidence_is_a_verifier_false_accept():
    a = run(answer=ans("17", cites=[1]), evidence=[ev(1, "17")], records=[rec("executor", 1, "python", "ok")])
    assert (a.module, a.cause, a.step_id) == ("verifier", "false_accept", 1)
    # uncited, but the extracted value appears in accepted evidence: it was used
    b = run(answer=ans("It is 17."), evidence=[ev(3, "the total is 17")], extracted="17")
    assert (b.module, b.cause, b.step_id) == ("verifier", "false_accept", 3)


def test_denied_tool_is_the_planner_choosing_a_wrong_tool():
    a = run(records=[rec("executor", 1, "search", "denied: tool 'search' is not in the allow-list")])
    assert (a.module, a.cause, a.step_id) == ("planner", "wrong_tool", 1)


def test_every_tool_call_failing_is_the_executor():
    bad = run(records=[rec("executor", 1, "python", "error: invalid arguments for python: 'code' is a required property"),
                       rec("executor", 2, "python", "error: NameError")])
    assert (bad.module, bad.cause, bad.step_id) == ("executor", "bad_arguments", 1)
    err = run(records=[rec("executor", 1, "python", "timeout: ran past 10 s")])
    assert (err.module, err.cause) == ("executor", "tool_error")


def test_repeated_plan_and_budget_stops():
    ok_call = [rec("executor", 1, "python", "ok")]
    a = run(answer=ans("Stopped before answering (repeated_plan): x", status="uncertain", stop="repeated_plan"), records=ok_call)
    assert (a.module, a.cause) == ("planner", "repeated_plan")
    b = run(answer=ans("no idea", status="budget_exhausted", stop="budget_exhausted", limit="tokens"), records=ok_call)
    assert (b.module, b.cause) == ("budget", "tokens")


def test_tools_that_cannot_serve_the_question_are_a_wrong_tool():
    # a corpus is available (search), yet the planner only ran python
    a = run(question=TEXT_Q, answer=ans("Bob"), records=[rec("executor", 1, "python", "ok")],
            tools=("search", "python"))
    assert (a.module, a.cause) == ("planner", "wrong_tool")


def test_a_wrong_tool_is_the_planner_even_when_it_also_failed():
    # a retrieval question (search available) attempted only with python code that did not run
    a = run(question=TEXT_Q, answer=ans("I could not establish a verified answer: x", status="uncertain", stop="no_progress"),
            records=[rec("executor", 1, "python", "error: SyntaxError")], tools=("search", "python"))
    assert (a.module, a.cause, a.step_id) == ("planner", "wrong_tool", 1)


def test_invalid_plans_without_any_tool_call():
    a = run(answer=ans("I could not establish a verified answer: no evidence passed verification.", status="uncertain",
                       stop="no_progress"),
            records=[rec("planner", 1, failure="schema", detail="PlanDraft invalid"), rec("planner", 2, failure="schema")])
    assert (a.module, a.cause, a.step_id) == ("planner", "invalid_plan", 1)


def test_direct_system_wrong_answer_is_the_generator():
    a = run(answer=ans("Answer: 17"), records=[rec("generator", 1)])
    assert (a.module, a.cause) == ("generator", "wrong_answer")


def test_otherwise_the_planner_answered_too_early():
    a = run(answer=ans("I could not establish a verified answer: no evidence passed verification.", status="uncertain"),
            records=[rec("planner", 1, tool="answer", accepted=True)])
    assert (a.module, a.cause) == ("planner", "missing_step")


def test_gold_in_text_per_answer_type():
    assert contains_gold("printed: 18", NUM_Q) and contains_gold("it is 18.0", NUM_Q)
    assert not contains_gold("118 and 81, or 1,8", NUM_Q)
    assert contains_gold("$2,125 in all", {**NUM_Q, "answer": "2125"})
    assert contains_gold("Velt was founded by Ama Osei in 1987.", TEXT_Q)
    assert contains_gold("founded by A. Osei", TEXT_Q)
    assert not contains_gold("Ama Oseibert", TEXT_Q)
    yes = {"answer": "yes", "answer_type": "text", "benchmark": "hotpotqa"}
    assert not contains_gold("yes, both are", yes)  # a yes/no gold says nothing about evidence
    g24 = {"answer": "1 2 3 4", "numbers": [1, 2, 3, 4], "answer_type": "game24", "benchmark": "game24"}
    assert contains_gold("(1+2+3)*4", g24) and not contains_gold("1+2+3+4", g24)


def test_evidence_from_memory_keeps_accepted_and_judged_rejections():
    m = EvolvingMemory()
    p1 = Plan(step_id=1, sub_goal="s", tool="search", args={"query": "velt"})
    r1 = Result(step_id=1, tool="search", status=ResultStatus.ok,
                data={"passages": [{"doc_id": "d3", "title": "Velt", "text": "founded by Ama Osei"}]})
    m.record(p1, r1, Verdict(step_id=1, accepted=True))
    p2 = Plan(step_id=2, sub_goal="s", tool="python", args={"code": "print(1)"})
    r2 = Result(step_id=2, tool="python", status=ResultStatus.error, data={"stdout": "1987\n"}, error="exit 1")
    m.record(p2, r2, Verdict(step_id=2, accepted=False, failure_type=FailureType.tool_error, reason="failed",
                             next_action=NextAction.replan))
    m.record_failure(3, "planner", FailureType.schema, "bad json", "{")
    got = evidence_from_memory(m)
    assert [(e.step_id, e.status) for e in got] == [(1, "accepted"), (2, "rejected")]
    assert got[0].text == "[d3] Velt: founded by Ama Osei"
    assert got[1].text == "1987\nerror: exit 1" and got[1].failure_type == "tool_error"
    assert evidence_text({"text": "model says"}) == "model says"
    assert evidence_text(None) == ""
