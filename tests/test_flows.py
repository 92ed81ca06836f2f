"""Flows under the Prefect test harness with scripted models; CLI input handling."""

import json
import time

import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from flows.batch import InputError, batch_research, read_questions
from flows.cli.app import app
from flows.research import research_flow
from infra.models import clear_backend_cache
from infra.runtime.storage import ResultStore
from tasks.contracts import AnswerStatus, Question, Role
from tests.scripted import answer, plan, scripted_settings


@pytest.fixture(autouse=True)
def _fresh_backends():
    clear_backend_cache()
    yield


def test_research_flow_runs_each_module_as_a_named_prefect_task(prefect_harness, corpus_file, tmp_path):
    from prefect.client.orchestration import get_client

    s = scripted_settings([plan("search", "Lake Orvanne depth"), plan("answer")],
                          [answer("212 metres", 1)], corpus=corpus_file)
    log = tmp_path / "events.jsonl"
    out = research_flow(Question(id="orv", question="How deep is Lake Orvanne?"), s, "run-flow-1", str(log))
    assert out.answer.status is AnswerStatus.answered

    import anyio

    async def names():
        async with get_client() as client:
            runs = await client.read_task_runs()
            return {r.name for r in runs}

    expected = {"plan-orv-step1", "execute-orv-step1", "verify-orv-step1", "plan-orv-step2", "answer-orv"}
    deadline = time.monotonic() + 60  # the API records task events asynchronously
    while not expected <= (got := anyio.run(names)) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert expected <= got
    events = [json.loads(line) for line in log.read_text().splitlines()]
    kinds = [e["event"] for e in events]
    assert kinds == ["model_call", "tool_call", "verdict", "model_call", "stop", "model_call"]
    assert all(e["run_id"] == "run-flow-1" and e["task_id"] == "orv" for e in events)
    assert events[0]["role"] == "planner" and events[0]["tokens_in"] > 0


def _write_questions(path, n):
    path.write_text("".join(json.dumps({"id": f"q{i}", "question": "How deep is Lake Orvanne?", "answer": "212"}) + "\n"
                            for i in range(n)))


def test_batch_writes_parquet_and_resumes_without_duplicates(prefect_harness, corpus_file, tmp_path):
    questions = tmp_path / "q.jsonl"
    _write_questions(questions, 3)
    s = scripted_settings([plan("search", "Lake Orvanne depth"), plan("answer")], [answer("212 metres", 1)],
                          corpus=corpus_file, **{"storage.out": str(tmp_path / "out")})
    summary = batch_research(str(questions), s, "batch-1", log_dir=str(tmp_path / "logs"), progress=False)
    assert summary.done == 3
    store = ResultStore(str(tmp_path / "out" / "batch-1"))
    answers = store.read_table("answers").to_pylist()
    steps = store.read_table("steps").to_pylist()
    assert sorted(r["task_id"] for r in answers) == ["q0", "q1", "q2"]
    assert {r["role"] for r in steps} == {"planner", "executor", "verifier", "generator"}
    assert all(r["run_id"] == "batch-1" for r in steps)
    assert (tmp_path / "out" / "batch-1" / "config.yaml").read_text().count("corpus") >= 1
    # Resume: nothing re-run, nothing duplicated.
    again = batch_research(str(questions), s, "batch-1", log_dir=str(tmp_path / "logs"), progress=False)
    assert again.done == 0 and again.skipped_existing == 3
    assert store.read_table("answers").num_rows == 3
    # Files are plain Parquet readable by any tool.
    part = next((tmp_path / "out" / "batch-1" / "answers").glob("part-*.parquet"))
    assert pq.read_table(part).column_names[:3] == ["run_id", "task_id", "question"]


def test_bad_input_line_is_reported_with_its_number(tmp_path):
    bad = tmp_path / "q.jsonl"
    bad.write_text('{"id": "a", "question": "ok?"}\n{"id": "b", "question": \n{"id": "c"}\n')
    with pytest.raises(InputError, match="line 2"):
        read_questions(bad)
    report = read_questions(bad, skip_bad_lines=True)
    assert [q.id for q in report.questions] == ["a"]
    assert report.skipped[0].startswith("line 2") and report.skipped[1].startswith("line 3: question")


def test_cli_rejects_bad_input_and_bad_config_with_clear_messages(tmp_path):
    runner = CliRunner()
    bad = tmp_path / "q.jsonl"
    bad.write_text('{"id": "a", "question": "ok?"}\nnot json\n')
    res = runner.invoke(app, ["batch", str(bad), "--out", str(tmp_path / "out")])
    assert res.exit_code == 2 and "line 2" in res.output
    good = tmp_path / "g.jsonl"
    good.write_text('{"id": "a", "question": "ok?"}\n')
    cfg = tmp_path / "c.yaml"
    cfg.write_text("budget:\n  max_tokens: -5\n")
    res = runner.invoke(app, ["batch", str(good), "--config", str(cfg)])
    assert res.exit_code == 2 and "budget.max_tokens" in res.output
    res = runner.invoke(app, ["run", "x", "--config", str(tmp_path / "missing.yaml")])
    assert res.exit_code == 2 and "does not exist" in res.output
    res = runner.invoke(app, ["run", "x", "--set", "models.planner.backend=openai", "--set",
                              "models.planner.base_url=http://127.0.0.1:9/v1"])
    assert res.exit_code == 2 and "planner model" in res.output
    assert not (tmp_path / "out").exists()  # nothing half-written
