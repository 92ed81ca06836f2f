"""Concurrent batches: questions as tasks of ONE flow run, streamed to Parquet exactly once, resumable after
a SIGKILL of the whole process. The model is the scripted research model behind a real OpenAI-compatible
HTTP endpoint on 127.0.0.1 with a fixed latency (so concurrency is observable)."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import yaml
from typer.testing import CliRunner

from flows.batch import batch_research
from flows.bench.suite import scripted_reply
from flows.cli.app import app
from infra.models import clear_backend_cache
from infra.runtime.model_server import ScriptedModelServer
from infra.runtime.storage import ResultStore

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def model():
    with ScriptedModelServer(scripted_reply, latency_ms=30) as server:
        yield server


@pytest.fixture(autouse=True)
def _fresh_backends():
    clear_backend_cache()
    yield


def _config(model: ScriptedModelServer, corpus: Path, **extra) -> dict:
    m = {"backend": "openai", "base_url": model.base_url, "model": "scripted", "max_transport_retries": 0}
    cfg = {"models": {"planner": m, "generator": m, "generalist": m},
           "tools": {"allow": ["search", "python"], "search": {"corpus": str(corpus)}},
           "verifier": {"recompute": False}}
    for dotted, value in extra.items():
        node = cfg
        *parents, leaf = dotted.split(".")
        for part in parents:
            node = node.setdefault(part, {})
        node[leaf] = value
    return cfg


def _settings(model, corpus, **extra):
    from infra.runtime.settings import Settings

    return Settings.model_validate(_config(model, corpus, **extra))


def _questions(path: Path, n: int) -> list[str]:
    """Half search questions, half "Run: <code>" questions whose answer is i*i."""
    rows = [{"id": f"q{i:03d}", "question": f"Run: print({i} * {i})" if i % 2 else "How deep is Lake Orvanne?",
             "answer": str(i * i) if i % 2 else "212 metres"} for i in range(n)]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return [r["id"] for r in rows]


def _read(client_call):
    import anyio
    from prefect.client.orchestration import get_client

    async def go():
        async with get_client() as client:
            return await client_call(client)

    return anyio.run(go)


def _task_runs(flow_run_id, expected: set[str], timeout_s: float = 60.0):
    """The flow run's task runs once `expected` names are all recorded (the API records task events asynchronously)."""
    from prefect.client.schemas.filters import FlowRunFilter

    deadline = time.monotonic() + timeout_s
    while True:
        tasks = _read(lambda c: c.read_task_runs(flow_run_filter=FlowRunFilter(id={"any_": [flow_run_id]})))
        if expected <= {t.name for t in tasks} or time.monotonic() > deadline:
            return tasks
        time.sleep(0.5)


def test_concurrent_batch_is_one_flow_run_with_named_tasks_and_artifacts(prefect_harness, model, corpus_file, tmp_path):
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterKey, FlowRunFilter, FlowRunFilterName

    qfile = tmp_path / "q.jsonl"
    ids = _questions(qfile, 8)
    s = _settings(model, corpus_file, **{"storage.out": str(tmp_path / "out"), "batch.concurrency": 4})
    model.max_in_flight = 0
    summary = batch_research(str(qfile), s, "conc-1", log_dir=str(tmp_path / "logs"), progress=False)
    assert (summary.done, summary.failed, summary.concurrency) == (8, 0, 4)
    assert model.max_in_flight >= 2  # questions really overlapped

    answers = ResultStore(summary.out).read_table("answers").to_pylist()
    assert sorted(a["task_id"] for a in answers) == ids  # each question exactly once
    assert all(a["status"] == "answered" for a in answers)
    assert {a["task_id"]: a["answer"] for a in answers if a["gold_answer"] != "212 metres"} == \
        {a["task_id"]: a["gold_answer"] for a in answers if a["gold_answer"] != "212 metres"}

    runs = _read(lambda c: c.read_flow_runs(flow_run_filter=FlowRunFilter(name=FlowRunFilterName(any_=["batch-conc-1"]))))
    assert len(runs) == 1 and runs[0].state.is_completed()
    expected = {f"question-{i}" for i in ids} | {"plan-q000-step1", "execute-q000-step1", "verify-q000-step1", "answer-q000"}
    tasks = _task_runs(runs[0].id, expected)
    assert expected <= {t.name for t in tasks}  # one task per question (and its module tasks), in this one flow run
    assert all(t.flow_run_id == runs[0].id for t in tasks)

    arts = _read(lambda c: c.read_artifacts(artifact_filter=ArtifactFilter(
        key=ArtifactFilterKey(any_=["batch-answers", "batch-cost-by-role", "batch-stop-reasons"]))))
    by_key = {a.key: a for a in arts if a.flow_run_id == runs[0].id}
    assert set(by_key) == {"batch-answers", "batch-cost-by-role", "batch-stop-reasons"}
    md = by_key["batch-answers"].data
    assert "q007" in md and "[step 1]" in md and "Lake Orvanne" in md and "| answered | answered |" in md
    costs = json.loads(by_key["batch-cost-by-role"].data)
    assert {r["role"] for r in costs} >= {"planner", "executor", "verifier", "generator"}
    assert next(r for r in costs if r["role"] == "planner")["calls"] == 16
    assert json.loads(by_key["batch-stop-reasons"].data) == [{"stop_reason": "answered", "status": "answered", "questions": 8}]

    again = batch_research(str(qfile), s, "conc-1", log_dir=str(tmp_path / "logs"), progress=False)
    assert (again.done, again.skipped_existing) == (0, 8)
    assert ResultStore(summary.out).read_table("answers").num_rows == 8


def test_runs_without_an_id_get_one_from_the_flow_run_and_question_level_tasks(prefect_harness, model, corpus_file, tmp_path):
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterName

    qfile = tmp_path / "q.jsonl"
    _questions(qfile, 2)
    s = _settings(model, corpus_file, **{"storage.out": str(tmp_path / "out"), "batch.module_tasks": False})
    first = batch_research(str(qfile), s, log_dir=str(tmp_path / "logs"), progress=False)
    second = batch_research(str(qfile), s, log_dir=str(tmp_path / "logs"), progress=False)
    assert re.fullmatch(r"\d{8}T\d{6}-[0-9a-f]{8}", first.run_id)
    assert first.run_id != second.run_id and second.done == 2  # scheduled runs never collide
    runs = _read(lambda c: c.read_flow_runs(flow_run_filter=FlowRunFilter(name=FlowRunFilterName(any_=[f"batch-{first.run_id}"]))))
    assert len(runs) == 1
    tasks = _task_runs(runs[0].id, {"question-q000", "question-q001"})
    time.sleep(1.0)  # anything else would have been recorded by now
    tasks = _task_runs(runs[0].id, set())
    assert sorted(t.name for t in tasks) == ["question-q000", "question-q001"]  # module calls are not tasks here


def test_cli_takes_concurrency_and_resume(prefect_harness, model, corpus_file, tmp_path):
    qfile = tmp_path / "q.jsonl"
    _questions(qfile, 4)
    cfg = tmp_path / "cfg.yaml"
    cfg.write_text(yaml.safe_dump(_config(model, corpus_file)))
    args = ["batch", str(qfile), "--config", str(cfg), "--out", str(tmp_path / "out"), "--log-dir", str(tmp_path / "logs"),
            "--resume", "cli-run", "--concurrency", "3"]
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 0, res.output
    assert "4 answered now, 0 already done earlier" in res.output
    assert "concurrency: 3" in (tmp_path / "out" / "cli-run" / "config.yaml").read_text()
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 0, res.output
    assert "0 answered now, 4 already done earlier" in res.output


@pytest.mark.slow
def test_sigkill_mid_batch_then_resume_yields_every_question_once(corpus_file, tmp_path):
    """The whole process dies (SIGKILL) while questions are in flight; `--resume` finishes the rest, no duplicates."""
    n = 12
    qfile = tmp_path / "q.jsonl"
    ids = _questions(qfile, n)
    out = tmp_path / "out"
    with ScriptedModelServer(scripted_reply, latency_ms=250) as slow:
        cfg = tmp_path / "cfg.yaml"
        cfg.write_text(yaml.safe_dump(_config(slow, corpus_file)))
        env = dict(os.environ, AGENTFLOW_HOME=str(tmp_path), PREFECT_HOME=str(tmp_path / "prefect"))
        env.pop("PREFECT_API_URL", None)
        args = [sys.executable, "-m", "flows.cli", "batch", str(qfile), "--config", str(cfg), "--out", str(out),
                "--log-dir", str(tmp_path / "logs"), "--run-id", "killed", "--concurrency", "2"]
        answers_dir = out / "killed" / "answers"
        with open(tmp_path / "first.log", "w") as log:
            proc = subprocess.Popen(args, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
            deadline = time.monotonic() + 240
            while time.monotonic() < deadline and proc.poll() is None:
                if answers_dir.is_dir() and len(list(answers_dir.glob("part-*.parquet"))) >= 2:
                    break
                time.sleep(0.05)
            assert proc.poll() is None, (tmp_path / "first.log").read_text()[-3000:]
            os.killpg(proc.pid, signal.SIGKILL)  # the process and everything it started (its Prefect API server)
            proc.wait()
        finished = len(list(answers_dir.glob("part-*.parquet")))
        assert 2 <= finished < n  # killed mid-batch
        res = subprocess.run([*args[:-4], "--resume", "killed", "--concurrency", "2"], cwd=ROOT, env=env,
                             capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr[-3000:]
    assert f"{n - finished} answered now, {finished} already done earlier" in res.stdout
    answers = pq.read_table(answers_dir).to_pylist()
    assert sorted(a["task_id"] for a in answers) == ids
    steps = pq.read_table(out / "killed" / "steps").to_pylist()
    assert {s["task_id"] for s in steps} == set(ids)
    per_question = {i: sum(1 for s in steps if s["task_id"] == i) for i in ids}
    assert len(set(per_question.values())) == 1, per_question  # no question's steps written twice
