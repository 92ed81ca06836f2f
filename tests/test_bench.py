"""`make bench` itself: a small run of the orchestration and throughput benchmarks writes their figures.

In a subprocess, as `make bench` runs it: its own Ray instance and Prefect database, nothing shared
with the other tests. Sizes are tiny: this checks that the benchmark code works, not the figures.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_orchestration_and_throughput_benchmarks_write_their_figures(tmp_path):
    out = tmp_path / "results.json"
    env = os.environ | {"PREFECT_HOME": str(tmp_path / "prefect")}
    cmd = [sys.executable, "-m", "flows.bench", "run", "--out", str(out), "--only", "orchestration",
           "--only", "throughput", "--questions", "3", "--repeat", "1", "--tool-questions", "2", "--tool-wait-s", "0.1"]
    r = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stderr[-3000:]
    figures = json.loads(out.read_text())
    assert figures["command"].startswith("python -m flows.bench") and set(figures) >= {"orchestration", "throughput"}
    orch = figures["orchestration"]
    assert "error" not in orch, orch
    assert orch["scripted_latency_ms"] == 50.0 and orch["fixed_per_flow_run_s"] > 0
    for concurrency in ("concurrency_1", "concurrency_4"):
        row = orch[concurrency]
        assert row["direct_s"] > 0 and row["prefect_ray_module_tasks_s"] > 0 and row["prefect_ray_question_tasks_s"] > 0
        assert row["ratio_module_tasks"] == pytest.approx(row["prefect_ray_module_tasks_s"] / row["direct_s"], rel=0.01)
        assert row["answered"]["direct"] == row["answered"]["system"]  # the same loop, the same answers
    assert orch["overhead_ratio"] == orch["concurrency_1"]["ratio_module_tasks"]
    tool = figures["throughput"]
    assert "error" not in tool, tool
    assert [tool[f"concurrency_{c}"]["answered"] for c in (1, 2, 4)] == [2, 2, 2]
    assert "embedded_model" not in figures  # --only: nothing else ran
