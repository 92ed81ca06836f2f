"""prefect.yaml against a real local Prefect server on a free loopback port: deploy `batch-research`, trigger
it, let a process worker run it, read the Parquet results and the run's artifacts.

The model is the scripted research model behind an OpenAI-compatible endpoint on 127.0.0.1 (in this
test process); the flow run itself is a separate process started by the worker.
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import yaml

from flows.bench.suite import scripted_reply
from infra.runtime.model_server import ScriptedModelServer
from tests.conftest import SMALL_CORPUS

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[1]
PREFECT = str(Path(sys.executable).with_name("prefect"))
NO_PROXY = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _api(api: str, path: str, body: dict | None = None):
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(f"{api}{path}", data=data, headers={"Content-Type": "application/json"},
                                 method="POST" if body is not None else "GET")
    with NO_PROXY.open(req, timeout=30) as resp:
        return json.load(resp)


def _prefect(args: list[str], env: dict, timeout: int = 180) -> str:
    res = subprocess.run([PREFECT, *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)
    assert res.returncode == 0, f"prefect {' '.join(args)}:\n{res.stdout[-3000:]}\n{res.stderr[-3000:]}"
    return res.stdout


def test_batch_research_deploys_runs_on_a_worker_and_writes_parquet(tmp_path):
    port = _free_port()
    api = f"http://127.0.0.1:{port}/api"
    env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_")}
    env.update(PREFECT_HOME=str(tmp_path / "prefect"), PREFECT_API_URL=api, AGENTFLOW_HOME=str(ROOT),
               AGENTFLOW_DATASETS=str(tmp_path / "datasets"), DO_NOT_TRACK="1", PREFECT_SERVER_ANALYTICS_ENABLED="false",
               PREFECT_LOGGING_LEVEL="WARNING", no_proxy="127.0.0.1,localhost", NO_PROXY="127.0.0.1,localhost")
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text("".join(json.dumps(d) + "\n" for d in SMALL_CORPUS))
    questions = tmp_path / "q.jsonl"
    questions.write_text("".join(json.dumps({"id": f"q{i}", "question": f"Run: print({i} * {i})" if i % 2 else "How deep is Lake Orvanne?"})
                                 + "\n" for i in range(4)))
    server_log = open(tmp_path / "server.log", "w")
    server = subprocess.Popen([PREFECT, "server", "start", "--host", "127.0.0.1", "--port", str(port)], cwd=tmp_path, env=env,
                              stdout=server_log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        with ScriptedModelServer(scripted_reply, latency_ms=10) as model:
            m = {"backend": "openai", "base_url": model.base_url, "model": "scripted", "max_transport_retries": 0}
            config = tmp_path / "config.yaml"
            config.write_text(yaml.safe_dump({"models": {"planner": m, "generator": m, "generalist": m},
                                              "tools": {"allow": ["search", "python"], "search": {"corpus": str(corpus)}}}))
            deadline = time.monotonic() + 180
            while True:
                assert server.poll() is None, (tmp_path / "server.log").read_text()[-3000:]
                try:
                    if _api(api, "/health") is True:
                        break
                except OSError:
                    pass
                assert time.monotonic() < deadline, "the Prefect server did not become healthy"
                time.sleep(0.5)

            _prefect(["work-pool", "create", "local", "--type", "process"], env)
            _prefect(["--no-prompt", "deploy", "--name", "batch-research"], env)
            deployment = _api(api, "/deployments/name/batch-research/batch-research")
            assert deployment["entrypoint"] == "flows/batch.py:batch_research"
            assert [s["schedule"]["cron"] for s in deployment["schedules"]] == ["0 3 * * *"]
            assert deployment["work_pool_name"] == "local"

            params = {"input_path": str(questions), "output": str(tmp_path / "out"), "config": str(config), "overrides": [],
                      "log_dir": str(tmp_path / "logs")}
            out = _prefect(["deployment", "run", "batch-research/batch-research", "--params", json.dumps(params)], env)
            run_id = re.search(r"UUID: ([0-9a-f-]{36})", out).group(1)
            worker = subprocess.run([PREFECT, "worker", "start", "--pool", "local", "--run-once"], cwd=tmp_path, env=env,
                                    capture_output=True, text=True, timeout=300)
            flow_run = _api(api, f"/flow_runs/{run_id}")
            assert flow_run["state"]["type"] == "COMPLETED", worker.stdout[-3000:] + worker.stderr[-3000:]
            artifacts = _api(api, "/artifacts/filter", {"artifacts": {"flow_run_id": {"any_": [run_id]}}})
            expected = {"question-q0", "plan-q0-step1", "execute-q1-step1", "answer-q3"}
            deadline = time.monotonic() + 60  # the API records task events asynchronously
            while True:
                tasks = _api(api, "/task_runs/filter", {"flow_runs": {"id": {"any_": [run_id]}}, "limit": 100})
                if expected <= {t["name"] for t in tasks} or time.monotonic() > deadline:
                    break
                time.sleep(0.5)
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)
        server_log.close()

    runs = list((tmp_path / "out").iterdir())  # the run id came from the flow run: one new folder
    assert len(runs) == 1 and flow_run["name"] == f"batch-{runs[0].name}"
    answers = pq.read_table(runs[0] / "answers").to_pylist()
    assert sorted(a["task_id"] for a in answers) == ["q0", "q1", "q2", "q3"]
    assert all(a["status"] == "answered" and a["run_id"] == runs[0].name for a in answers)
    assert {a["task_id"]: a["answer"] for a in answers}["q3"] == "9"
    assert {a["key"] for a in artifacts} == {"batch-answers", "batch-cost-by-role", "batch-stop-reasons"}
    assert expected <= {t["name"] for t in tasks}
