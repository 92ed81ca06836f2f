"""Harvesting labeled verification cases from real runs: judged steps kept by evaluations and batches, labeled
against the gold (accept / reject / left out), named by their error, and measured by `verifier-eval run`."""

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from flows.cli.app import app
from flows.evaluate import JUDGED_EVAL_SCHEMA, RESULTS_SCHEMA, run_unit, unit_key
from flows.systems import SystemOptions
from infra.models import clear_backend_cache
from infra.runtime.storage import ResultStore
from tasks.eval.harvest import HarvestError, JudgedRow, error_category, harvest, label, read_run
from tests.scripted import answer, plan, scripted_settings

KM = {"id": "gsm8k-0001", "benchmark": "gsm8k", "answer_type": "number", "answer": "120",
      "question": "Ann runs 27 km on Monday, twice as far on Tuesday, and 15 km less than Tuesday on Wednesday. "
                  "How many km does she run in total?",
      "solution": "Tuesday 27*2=<<27*2=54>>54 km. Wednesday 54-15=<<54-15=39>>39 km. 27+54+39=<<27+54+39=120>>120."}
SIX = {"id": "gsm8k-0002", "benchmark": "gsm8k", "answer_type": "number", "answer": "42",
       "question": "What is 6 times 7?", "solution": "6*7=<<6*7=42>>42"}
CHANGE = {"id": "gsm8k-0003", "benchmark": "gsm8k", "answer_type": "number", "answer": "29",
          "question": "5 adults pay $13 each and 8 children $7 each, with three $50 notes. How much change do they get?",
          "solution": "5*13=<<5*13=65>>65. 8*7=<<8*7=56>>56. 150-65-56=<<150-65-56=29>>29"}
NAMED = {"id": "gsm8k-0004", "benchmark": "gsm8k", "answer_type": "number", "answer": "54",
         "question": "Ann runs 27 km on Monday and twice as far on Tuesday. How far does she run on Tuesday?",
         "solution": "27*2=<<27*2=54>>54"}


@pytest.fixture(autouse=True)
def _fresh_backends():
    clear_backend_cache()
    yield


def _unit(out: Path, record: dict, code: str, final: str, seed: int = 0, system: str = "modular"):
    """One modular run of one question with a scripted Planner (python `code`, then answer), written as an
    evaluation writes it (judged part first, results part last)."""
    s = scripted_settings([plan("python", code, sub_goal="compute it"), plan("answer", final)], [answer(final, 1)])
    result = run_unit(system, seed, record, s, run_id="r", log=None, options=SystemOptions(prefect_tasks=False))
    store = ResultStore(str(out))
    unit = unit_key(system, seed, record["id"])
    store.write_part("parts/judged", unit, result.judged, JUDGED_EVAL_SCHEMA)
    store.write_part("parts/results", unit, [result.row], RESULTS_SCHEMA)
    return result


@pytest.fixture
def eval_dir(tmp_path):
    out = tmp_path / "eval"
    _unit(out, KM, "print(27 + 2 * 15 - 15)", "42")      # every operand is in the question, combined wrongly: 42
    _unit(out, SIX, "print(6 * 7)", "42")                  # the gold
    _unit(out, CHANGE, "print((5 * 13) + (8 * 7) - 150)", "-29")  # a negative amount of change
    _unit(out, NAMED, "tuesday = 27 * 2\nprint(tuesday)", "54")  # the gold, answered right
    return out


def test_an_evaluation_keeps_every_judged_step_and_the_harvest_labels_them(eval_dir):
    rows = read_run(eval_dir)
    assert sorted(r.record["id"] for r in rows) == ["gsm8k-0001", "gsm8k-0002", "gsm8k-0003", "gsm8k-0004"]
    km = next(r for r in rows if r.record["id"] == "gsm8k-0001")
    assert km.step.plan.args["code"] == "print(27 + 2 * 15 - 15)" and km.step.result.data["stdout"].strip() == "42"
    assert not km.answered_correctly and km.record["solution"].startswith("Tuesday")

    got = harvest([eval_dir])
    by = {c["id"].split("-", 1)[1].rsplit("-", 1)[0]: c for c in got.cases}
    assert got.steps == 4
    assert by["gsm8k-0002"]["label"] == "accept" and by["gsm8k-0002"]["category"] == "correct"
    assert by["gsm8k-0004"]["label"] == "accept"
    if km.step.verdict.accepted:  # the Verifier of the run let it through: a false accept to measure
        assert by["gsm8k-0001"]["label"] == "reject" and by["gsm8k-0001"]["category"] == "wrong_operation"
    else:
        assert got.left_out["rejected_not_gold"] >= 1
    case = got.cases[0]
    assert case["question_seen"] and case["plan"]["tool"] == "python" and case["result"]["status"] == "ok"
    assert {"id", "category", "plan", "result", "label", "memory", "as_of", "question"} <= set(case)


def test_labels_follow_the_gold_not_the_verdict():
    from tasks.contracts import JudgedStep, Plan, Result, ResultStatus, Verdict

    def row(value: str, accepted: bool, correct: bool, record=KM, code="print(1)") -> JudgedRow:
        p = Plan(step_id=1, sub_goal="s", tool="python", args={"code": code})
        r = Result(step_id=1, tool="python", status=ResultStatus.ok, data={"stdout": value + "\n", "stderr": "", "exit_code": 0})
        return JudgedRow("x", record, JudgedStep(step_id=1, plan=p, result=r, verdict=Verdict(step_id=1, accepted=accepted)),
                         correct, None)

    assert label(row("120", accepted=False, correct=False)) == ("accept", "correct")  # a false reject to measure
    assert label(row("54", accepted=True, correct=False)) == (None, "intermediate_value")  # the solution passes 54
    assert label(row("42", accepted=False, correct=False)) == (None, "rejected_not_gold")
    assert label(row("41", accepted=True, correct=True)) == (None, "accepted_on_a_correct_answer")
    assert label(row("42", accepted=True, correct=False, code="print(27 + 2 * 15 - 15)")) == ("reject", "wrong_operation")
    assert label(row("-29", accepted=True, correct=False, record=CHANGE, code="print(5*13 + 8*7 - 150)")) == \
        ("reject", "impossible_value")
    assert label(row("66", accepted=True, correct=False, code="print(27 * 2 + 12)")) == ("reject", "ignored_quantity")
    assert label(row("10000", accepted=True, correct=False, code="print('Sella', 10000)")) == \
        ("reject", "unsupported_number")
    assert error_category(row("95", True, False, code="print(27 + 2 * 27 + 14)")) == "ignored_quantity"
    # with_rejected: an error the run's Verifier caught is labeled by the same value rule
    assert label(row("42", accepted=False, correct=False, code="print(27 + 2 * 15 - 15)"), with_rejected=True) == \
        ("reject", "wrong_operation")
    assert label(row("54", accepted=False, correct=False), with_rejected=True) == (None, "intermediate_value")
    assert label(row("41", accepted=False, correct=True), with_rejected=True) == (None, "rejected_on_a_correct_answer")


def test_the_same_step_made_twice_is_one_case(tmp_path):
    out = tmp_path / "eval"
    _unit(out, SIX, "print(6 * 7)", "42")
    _unit(out, SIX, "print(6 * 7)", "42", system="modular-nomem")  # the ablation made the very same step
    _unit(out, SIX, "print(42)", "42", seed=1)  # another step: another case
    got = harvest([out])
    assert got.steps == 3 and len(got.cases) == 2 and got.left_out["duplicate_step"] == 1


def test_a_batch_run_is_harvested_too(prefect_harness, tmp_path):
    from flows.batch import batch_research

    qfile = tmp_path / "q.jsonl"
    qfile.write_text(json.dumps({"id": "b1", "question": "What is 6 times 7?", "answer": "42"}) + "\n")
    s = scripted_settings([plan("python", "print(6 * 7)"), plan("answer", "42")], [answer("42", 1)],
                          **{"storage.out": str(tmp_path / "runs")})
    summary = batch_research(str(qfile), s, "run-1", log_dir=str(tmp_path / "logs"), progress=False)
    got = harvest([Path(summary.out)])
    assert [(c["label"], c["category"], c["gold"]) for c in got.cases] == [("accept", "correct", "42")]


def test_harvest_cli_writes_cases_that_verifier_eval_runs(eval_dir, tmp_path):
    out = tmp_path / "cases.jsonl"
    r = CliRunner().invoke(app, ["verifier-eval", "harvest", str(eval_dir), "--out", str(out)])
    assert r.exit_code == 0, r.output
    assert "accept" in r.output and "left out" in r.output
    cases = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(cases) >= 2 and all(c["question_seen"] for c in cases)
    report = tmp_path / "report.json"
    r = CliRunner().invoke(app, ["verifier-eval", "run", "--labeled", str(out), "--verifier", "deterministic",
                                 "--out", str(report)])
    assert r.exit_code == 0, r.output
    summary = json.loads(report.read_text())
    assert summary["overall"]["cases"] == len(cases)
    assert summary["per_category"]["correct"]["false_reject_ci95"] is not None
    in_run = summary["per_verdict_in_run"]
    assert sum(b["cases"] for b in in_run.values()) == len(cases)
    # with --with-rejected every error of the runs is a case; the run's own (deterministic) Verifier then accepts
    # exactly the reject cases it accepted in its run
    both = tmp_path / "all.jsonl"
    r = CliRunner().invoke(app, ["verifier-eval", "harvest", str(eval_dir), "--out", str(both), "--with-rejected"])
    assert r.exit_code == 0, r.output
    every = [json.loads(line) for line in both.read_text().splitlines()]
    assert len(every) >= len(cases) and {c["id"].split("-", 1)[1] for c in cases} <= {c["id"].split("-", 1)[1] for c in every}
    assert any(c["label"] == "reject" for c in every)  # the KM program: its run accepted or rejected it, a case either way


def test_harvest_cli_refuses_bad_input_and_keeps_what_was_written(tmp_path):
    out = tmp_path / "cases.jsonl"
    out.write_text("kept\n")
    r = CliRunner().invoke(app, ["verifier-eval", "harvest", str(tmp_path / "nowhere"), "--out", str(out)])
    assert r.exit_code == 2 and "does not exist" in r.output
    (tmp_path / "empty").mkdir()
    r = CliRunner().invoke(app, ["verifier-eval", "harvest", str(tmp_path / "empty"), "--out", str(out)])
    assert r.exit_code == 2 and "holds no judged steps" in r.output
    assert out.read_text() == "kept\n"
    with pytest.raises(HarvestError):
        read_run(tmp_path / "empty")
