"""End to end with the REAL embedded models via llama.cpp (the default Qwen2.5-Coder-0.5B; SmolLM2-135M where only
mechanics are checked), real Prefect, real sandbox."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from tests.conftest import MECHANICS_SETS, SMALL_CORPUS

pytestmark = pytest.mark.slow
AGENTFLOW = [sys.executable, "-m", "flows.cli"]
ROOT = Path(__file__).resolve().parents[1]


def _cli(args, tmp_path, timeout=600):
    env = dict(os.environ, AGENTFLOW_HOME=str(tmp_path), PREFECT_HOME=str(tmp_path / "prefect"))
    env.pop("PREFECT_API_URL", None)
    return subprocess.run([*AGENTFLOW, *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)


def test_batch_with_the_real_model_writes_parquet_with_per_role_tokens(tmp_path):
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text("".join(json.dumps(d) + "\n" for d in SMALL_CORPUS))
    questions = tmp_path / "q.jsonl"
    questions.write_text(json.dumps({"id": "orvanne", "question": "How deep is Lake Orvanne?", "answer": "212 metres"}) + "\n"
                         + json.dumps({"id": "velt", "question": "Who founded Velt Corporation?", "answer": "Ama Osei"}) + "\n")
    out = tmp_path / "out"
    res = _cli(["batch", str(questions), "--corpus", str(corpus), "--out", str(out), "--run-id", "e2e",
                "--log-dir", str(tmp_path / "logs"), "--set", "budget.max_steps=3"], tmp_path)
    assert res.returncode == 0, res.stderr[-3000:]
    answers = pq.read_table(out / "e2e" / "answers").to_pylist()
    steps = pq.read_table(out / "e2e" / "steps").to_pylist()
    assert sorted(a["task_id"] for a in answers) == ["orvanne", "velt"]
    for a in answers:
        assert a["status"] in {"answered", "uncertain", "needs_review", "budget_exhausted", "failed"}
        assert a["status"] != "failed", a
        costs = json.loads(a["cost_by_role"])
        assert costs["planner"]["calls"] >= 1 and costs["planner"]["tokens_in"] > 0 and costs["planner"]["tokens_out"] > 0
    planner_steps = [s for s in steps if s["role"] == "planner"]
    assert planner_steps and all(s["model"] == "qwen2.5-coder-0.5b" for s in planner_steps)
    assert all(s["tokens_in"] > 0 for s in planner_steps)
    assert (out / "e2e" / "config.yaml").is_file()
    events = (tmp_path / "logs" / "e2e.jsonl").read_text().splitlines()
    assert sum(1 for e in events if json.loads(e)["event"] == "model_call") >= 2
    assert "Cost per role" in res.stdout


def test_run_json_returns_an_answer_record_with_costs(tmp_path):
    sets = [a for s in MECHANICS_SETS for a in ("--set", s)]
    res = _cli(["run", "What is 17 * 23?", "--json", "--log-dir", str(tmp_path / "logs"),
                "--set", "budget.max_steps=3", *sets], tmp_path)
    assert res.returncode == 0, res.stderr[-3000:]
    answer = json.loads(res.stdout)
    assert answer["status"] in {"answered", "uncertain", "needs_review", "budget_exhausted"}
    assert answer["stop_reason"] in {"answered", "budget_exhausted", "repeated_plan", "no_progress", "conflicting_evidence"}
    assert isinstance(answer["citations"], list)
    assert answer["cost"]["planner"]["calls"] >= 1 and answer["cost"]["planner"]["tokens_in"] > 0
    assert answer["iterations"] <= 3
