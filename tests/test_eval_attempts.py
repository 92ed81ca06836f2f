"""`agentflow eval --attempts K --memory persistent,off --plant N` on a small synthetic world (scripted models):
per-attempt rows, planted false accepts rejected then found superseded, the report's attempts table."""

from __future__ import annotations

import json

import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from flows.evaluate import EvalError, evaluate, parse_memory
from infra.data.benchmarks import prepare
from infra.data.world import generate_world, write_world
from infra.models import clear_backend_cache
from tasks.eval.contamination import carries, plant_for, planted_value
from tests.scripted import answer, plan, scripted_settings


@pytest.fixture(autouse=True)
def _fresh_backends():
    clear_backend_cache()
    yield
    clear_backend_cache()


@pytest.fixture(scope="module")
def world_data(tmp_path_factory):
    root = tmp_path_factory.mktemp("world")
    write_world(generate_world(0, 8, "test"), root / "raw")
    return prepare("world", root / "raw", root / "prepared")


def test_planted_values_are_wrong_and_graded_by_the_question_scorer(world_data):
    rows = [json.loads(line) for line in (world_data / "questions.jsonl").read_text().splitlines()]
    plants = [(r, plant_for(r)) for r in rows]
    planted = [(r, p) for r, p in plants if p is not None]
    assert len(planted) >= 4
    for r, p in planted:
        value, number = planted_value(r)
        assert p.planted and p.content["claim"]["value"] == value and str(value) != str(r["answer"])
        assert carries(r, value, number, f"The answer is {value}.")
        assert not carries(r, value, number, f"The answer is {r['answer']}.")
        assert not carries(r, value, number, "I could not establish a verified answer: no evidence passed verification.")


def test_attempts_compare_persistent_and_off_memory_with_planted_items(prefect_harness, world_data, tmp_path):
    s = scripted_settings([plan("answer")], [answer("unknown", 1)], as_of="2025-01-01")
    out = tmp_path / "eval"
    got = evaluate("world", str(world_data), ["modular"], 1, str(out), s, limit=4, progress=False, prefect_tasks=False,
                   attempts=2, memory=["persistent", "off"], plant=2)
    assert got.done == 2 * 2 * 4
    assert got.systems == ["modular.persistent.a1", "modular.off.a1", "modular.persistent.a2", "modular.off.a2"]
    table = {(r["memory"], r["attempt"]): r for r in got.summary["attempts"]}
    assert set(table) == {("persistent", 1), ("persistent", 2), ("off", 1), ("off", 2)}
    p1, p2, o1 = table[("persistent", 1)], table[("persistent", 2)], table[("off", 1)]
    # attempt 1 re-verifies the planted false accepts and rejects them; attempt 2 finds them superseded
    assert p1["planted"] == p1["planted_read"] == p1["planted_rejected"] == 2 and p1["planted_accepted"] == 0
    assert p2["planted_superseded"] == 2 and p2["planted_rejected"] == 0
    assert p1["contamination_recovery_rate"] == p2["contamination_recovery_rate"] == 1.0
    assert o1["planted"] == 2 and o1["planted_read"] == 0 and o1["contamination_recovery_rate"] is None
    for r in got.summary["attempts"]:
        assert r["planted_in_answer_rate"] == 0.0 and r["wrong_citations"] == 0 and r["questions"] == 4
        assert r["tokens_per_question"] > 0 and r["success"] is not None

    rows = pq.read_table(out / "results.parquet").to_pylist()
    assert {(r["base_system"], r["memory"], r["attempt"]) for r in rows} == {
        ("modular", m, a) for m in ("persistent", "off") for a in (1, 2)}
    planted_rows = [r for r in rows if r["planted_id"] and r["memory"] == "persistent"]
    assert sorted(r["planted_status"] for r in planted_rows) == ["rejected", "rejected", "superseded", "superseded"]
    assert (out / "memory" / "modular.s0" / "records" / "part-planted.parquet").is_file()
    assert "Attempts and memory" in (out / "report.html").read_text()
    assert json.loads((out / "summary.json").read_text())["run"]["memory"] == ["persistent", "off"]

    # resuming the same evaluation runs nothing again
    clear_backend_cache()
    again = evaluate("world", str(world_data), ["modular"], 1, str(out), s, limit=4, progress=False, prefect_tasks=False,
                     attempts=2, memory=["persistent", "off"], plant=2)
    assert again.done == 0 and again.skipped_existing == 16


def test_memory_modes_are_checked():
    assert parse_memory("persistent, off") == ["persistent", "off"]
    with pytest.raises(EvalError):
        parse_memory("forever")


def test_cli_accepts_attempts_memory_and_plant(world_data, tmp_path):
    from flows.cli.app import app

    res = CliRunner().invoke(app, ["eval", "--benchmark", "world", "--data", str(world_data), "--out", str(tmp_path / "o"),
                                   "--memory", "sometimes", "--attempts", "2"])
    assert res.exit_code == 2 and "--memory" in res.output


def test_wrong_citations_count_unaccepted_steps_and_evidence_that_does_not_state_the_value():
    from tasks.contracts import Answer, AnswerStatus, Citation, StopReason
    from tasks.eval.contamination import wrong_citations

    a = Answer(text="It is 212 metres.", status=AnswerStatus.answered, stop_reason=StopReason.answered,
               citations=[Citation(claim="x", step_id=1), Citation(claim="y", step_id=2), Citation(claim="z", step_id=9)])
    accepted = {1: "Lake Orvanne is 212 metres deep.", 2: "Mount Kelbra rises 3104 metres."}
    assert wrong_citations(a, accepted, "212") == 2  # step 2 does not state 212; step 9 is not accepted evidence
    assert wrong_citations(a, accepted, None) == 1  # nothing to check but where it points

    from tasks.eval.contamination import answer_value

    q = {"question": "What is the depth of Lake Orvanne, 2 miles north?", "answer_type": "number"}
    assert answer_value(q, "It is 2 times 212 metres.", "It is 2 times 212 metres.") == "212"  # world: whole text
    assert answer_value(q, 'Latest: <evidence step="5">depth 212</evidence>', None) == "212"  # markup aside
    assert answer_value({"answer_type": "number", "question": "?"}, "The answer is 7 apples", "7") == "7"
    assert answer_value({"answer_type": "yes_no", "question": "?"}, "Yes.", "Yes.") is None
