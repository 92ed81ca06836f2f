"""The Generator replayed on a run's own verified evidence: the view is rebuilt as the loop built it, unchanged
settings give the recorded answer back, and other settings are scored beside it."""

import json
from pathlib import Path

from flows.bench import generator as probe
from flows.evaluate import JUDGED_EVAL_SCHEMA, RESULTS_SCHEMA, run_unit, unit_key
from flows.systems import SystemOptions
from infra.models import clear_backend_cache
from infra.runtime.settings import dump_settings
from infra.runtime.storage import ResultStore
from tasks.contracts import JudgedStep, Plan, Result, ResultStatus, Verdict
from tests.scripted import answer, plan, scripted_settings

SIX = {"id": "gsm8k-0002", "benchmark": "gsm8k", "answer_type": "number", "answer": "42", "question": "What is 6 times 7?"}
KM = {"id": "gsm8k-0001", "benchmark": "gsm8k", "answer_type": "number", "answer": "120",
      "question": "Ann runs 27 km, twice as far on Tuesday and 15 km less than Tuesday on Wednesday. Total km?"}


def _unit(out: Path, record: dict, steps: list[str], final: str) -> None:
    """One question through the modular system (scripted models), written as an evaluation writes it."""
    clear_backend_cache()
    s = scripted_settings([*steps, plan("answer", final)], [answer(final, 1)])
    result = run_unit("modular", 0, record, s, run_id="r", log=None, options=SystemOptions(prefect_tasks=False))
    store = ResultStore(str(out))
    unit = unit_key("modular", 0, record["id"])
    store.write_part("parts/judged", unit, result.judged, JUDGED_EVAL_SCHEMA)
    store.write_part("parts/results", unit, [result.row], RESULTS_SCHEMA)
    store.write_text("settings/modular.seed0.yaml", dump_settings(s))


def _step(step_id: int, text: str, accepted: bool, supersedes: str | None = None) -> JudgedStep:
    p = Plan(step_id=step_id, sub_goal="find it", tool="search", args={"query": f"q{step_id}"})
    r = Result(step_id=step_id, tool="search", status=ResultStatus.ok,
               data={"passages": [{"doc_id": f"d{step_id}", "title": "T", "text": text}]})
    return JudgedStep(step_id=step_id, plan=p, result=r,
                      verdict=Verdict(step_id=step_id, accepted=accepted, supersedes=supersedes))


def test_the_view_is_rebuilt_as_the_loop_built_it():
    view = probe.final_view([_step(3, "newer: 12", True, supersedes="step-1"), _step(1, "older: 10", True),
                             _step(2, "rejected: 11", False)])
    assert [i.step_id for i in view] == [3]  # step 1 superseded by step 3, step 2 never evidence
    assert probe.final_view([]) == []


def test_unchanged_settings_give_the_recorded_answers_and_overrides_are_scored_beside_them(tmp_path, capsys):
    out = tmp_path / "eval"
    _unit(out, SIX, [plan("python", "print(6 * 7)", sub_goal="compute it")], "42")
    _unit(out, KM, [plan("python", "print(27 + 2 * 15 - 15)", sub_goal="compute it")], "42")  # printed 42, gold 120
    same = probe.replay(out, out=tmp_path / "same.jsonl", every=True)
    assert same == {"system": "modular", "overrides": [], "questions": 2, "gold_offered": 1, "recorded_correct": 1,
                    "replayed_correct": 1, "better": 0, "worse": 0, "difference_points": 0.0,
                    "difference_ci95": [0.0, 0.0], "called": 2, "same_answer": 2}
    assert len((tmp_path / "same.jsonl").read_text().splitlines()) == 2
    # without --every, the question whose gold (120) no span offers, recorded wrong, is wrong without a call
    quick = probe.replay(out)
    assert (quick["called"], quick["same_answer"], quick["replayed_correct"], quick["worse"]) == (1, 1, 1, 0)
    # another Generator (here: a script that answers 7) on the same evidence
    seven = json.dumps([answer("7", 1)])
    other = probe.replay(out, overrides=[f"models.generator.script={seven}"], out=tmp_path / "seven.jsonl")
    assert (other["replayed_correct"], other["worse"], other["same_answer"]) == (0, 1, 0)
    assert other["difference_points"] == -50.0  # one of two questions lost
    assert probe.main(["replay", str(out), "--json", str(tmp_path / "s.json")]) == 0
    assert '"replayed_correct": 1' in (tmp_path / "s.json").read_text()
    # replays of several directories pool into one paired difference
    both = probe.pool([tmp_path / "same.jsonl", tmp_path / "seven.jsonl"])
    assert (both["questions"], both["recorded_correct"], both["replayed_correct"], both["worse"]) == (4, 2, 1, 1)
    assert probe.main(["pool", str(tmp_path / "same.jsonl"), str(tmp_path / "seven.jsonl")]) == 0


def test_a_directory_that_is_not_an_evaluation_is_refused(tmp_path, capsys):
    assert probe.main(["replay", str(tmp_path)]) == 2
    assert "not an evaluation directory" in capsys.readouterr().err
    assert probe.main(["pool", str(tmp_path / "none.jsonl")]) == 2
    assert "no such replay file" in capsys.readouterr().err
    (tmp_path / "x.jsonl").write_text('{"a": 1}\n')
    assert probe.main(["pool", str(tmp_path / "x.jsonl")]) == 2
    assert "not a replay's JSON lines" in capsys.readouterr().err
    out = tmp_path / "eval"
    _unit(out, SIX, [plan("python", "print(6 * 7)", sub_goal="compute it")], "42")
    assert probe.main(["replay", str(out), "--system", "monolithic"]) == 2
    assert "no finished question of monolithic" in capsys.readouterr().err
    (out / "settings" / "modular.seed0.yaml").unlink()
    assert probe.main(["replay", str(out)]) == 2
    assert "no stored settings" in capsys.readouterr().err
