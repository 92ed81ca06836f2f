"""Shared fixtures: offline, loopback-only environment; one Prefect test harness per session."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

import pytest

_HOME = Path(tempfile.mkdtemp(prefix="agentflow-test-"))
os.environ.setdefault("PREFECT_HOME", str(_HOME / "prefect"))
os.environ.setdefault("DO_NOT_TRACK", "1")
os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
os.environ.setdefault("PREFECT_LOGGING_LEVEL", "WARNING")
os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "120")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
os.environ.setdefault("no_proxy", "127.0.0.1,localhost")

DATASETS_ENV = "AGENTFLOW_DATASETS"

# Real-model tests that check mechanics only (the loop runs, costs are counted, files are written) use the smallest
# registered model; the default (qwen2.5-coder-0.5b) has its own end-to-end test (test_e2e_embedded.py).
MECHANICS_MODEL = "smollm2-135m"
MECHANICS_SETS = [f"models.{role}.model={MECHANICS_MODEL}" for role in ("planner", "generator", "generalist")]


@pytest.fixture(scope="session")
def prefect_harness():
    """A temporary Prefect API for flow tests (about 11 s, so once per session)."""
    from prefect.testing.utilities import prefect_test_harness

    with prefect_test_harness(server_startup_timeout=120):
        yield


@pytest.fixture(scope="session")
def datasets_dir() -> Path:
    """The benchmark files (../shared/datasets); skips visibly when the setting is absent."""
    value = os.environ.get(DATASETS_ENV)
    if not value or not Path(value).is_dir():
        pytest.skip(f"{DATASETS_ENV} is not set to an existing directory (benchmark files not available)")
    return Path(value)


SMALL_CORPUS = [
    {"id": "d1", "title": "Lake Orvanne", "text": "Lake Orvanne is 212 metres deep at its deepest point.",
     "url": "https://example.org/orvanne", "published_at": "2024-03-01"},
    {"id": "d2", "title": "Mount Kelbra", "text": "Mount Kelbra rises 3104 metres above sea level.",
     "published_at": "2023-07-15"},
    {"id": "d3", "title": "Velt Corporation", "text": "Velt Corporation was founded in 1987 by Ama Osei.",
     "published_at": "2022-01-10"},
]


@pytest.fixture
def corpus_file(tmp_path) -> Path:
    path = tmp_path / "corpus.jsonl"
    path.write_text("".join(json.dumps(d) + "\n" for d in SMALL_CORPUS))
    return path
