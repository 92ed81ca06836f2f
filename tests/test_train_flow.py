"""The `train` flow end to end on a tiny policy: Ray rollout workers, the real loop and tools, metrics, curve,
artifact, a checkpoint that resumes; the CLI; the lifecycle. The real SmolLM2 run is in test_train_e2e.py."""

from __future__ import annotations

import json
import tempfile

import pytest

pytest.importorskip("torch")
pytest.importorskip("peft")

from flows.train import IllegalTransition, Trainer, TrainPhase, batch_indices  # noqa: E402
from infra.models import clear_backend_cache  # noqa: E402
from infra.runtime.settings import ModelConfig, load_settings  # noqa: E402
from tests.scripted import answer  # noqa: E402
from tests.tiny_policy import write_tiny_model  # noqa: E402

_RAY_TMP = tempfile.TemporaryDirectory(prefix="aft-")  # a short path (unix sockets); removed at exit


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    from infra.data.world import generate_world, write_world

    root = tmp_path_factory.mktemp("world")
    write_world(generate_world(seed=0, n_questions=6, split="train"), root / "train")
    write_world(generate_world(seed=1, n_questions=3, split="test"), root / "test")
    return root


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory):
    return write_tiny_model(tmp_path_factory.mktemp("tiny") / "model")


def _settings(world, tiny_dir, tmp_path, **extra):
    values = {
        "models.planner.max_input_tokens": 8192, "models.planner.max_tokens": 24,
        "models.generator": ModelConfig(backend="scripted", model="g", script=[answer("42", 1)]).model_dump(),
        "tools.allow": ["python", "search"], "tools.python.sandbox": "process", "budget.max_steps": 3,
        "train.train_questions": str(world / "train"), "train.val_questions": str(world / "test"),
        "train.base_model": str(tiny_dir), "train.steps": 2, "train.questions_per_step": 2, "train.group_size": 2,
        "train.workers": 1, "train.eval_every": 2, "train.eval_questions": 2, "train.checkpoint_every": 1,
        "ray.temp_dir": _RAY_TMP.name, "ray.num_cpus": 2,  # short: unix socket paths
    }
    values.update(extra)
    return load_settings(None, None, **values)


def test_batches_are_seeded_epochs_and_resumable():
    a = [batch_indices(5, s, 2, seed=0) for s in range(5)]
    flat = [i for b in a for i in b]
    assert sorted(flat[:5]) == list(range(5)) and sorted(flat[5:10]) == list(range(5))  # each epoch covers all
    assert batch_indices(5, 3, 2, seed=0) == a[3]  # a resumed run draws the same batch
    assert [batch_indices(5, s, 2, seed=1) for s in range(5)] != a


def test_illegal_phase_change_is_refused(world, tiny_dir, tmp_path):
    s = _settings(world, tiny_dir, tmp_path, **{"train.workers": 0})
    clear_backend_cache()
    trainer = Trainer(s, str(tmp_path / "out"), log_dir=str(tmp_path / "logs"))
    try:
        with pytest.raises(IllegalTransition, match="created to update"):
            trainer.enter(TrainPhase.update)
        trainer.enter(TrainPhase.rollout)
        trainer.enter(TrainPhase.update)
        trainer.enter(TrainPhase.finished)
        with pytest.raises(IllegalTransition):
            trainer.enter(TrainPhase.rollout)
    finally:
        trainer.close()


@pytest.mark.slow  # about 90 s on 2 cores: Prefect harness, a Ray actor, three steps
def test_train_flow_with_ray_workers_checkpoints_and_resumes(prefect_harness, world, tiny_dir, tmp_path):
    import pyarrow.parquet as pq
    from prefect.client.orchestration import get_client

    from flows.train import train
    from infra.runtime.services import shutdown_ray
    from infra.runtime.storage import ResultStore

    out = str(tmp_path / "out")
    clear_backend_cache()
    try:
        s1 = train(out, settings=_settings(world, tiny_dir, tmp_path), log_dir=str(tmp_path / "logs"))
        assert [r["step"] for r in s1.metrics] == [1, 2] and s1.steps_done == 2
        row = s1.metrics[-1]
        assert row["trajectories"] == 4 and row["groups"] == 2 and row["val_accuracy"] is not None
        assert s1.metrics[0]["val_accuracy"] is None  # eval_every 2
        tools = json.loads(row["tool_choices"])
        assert sum(tools.values()) > 0 and set(tools) <= {"python", "search", "answer", "invalid"}
        assert row["rss_mb"] > 0 and row["wall_s"] > 0 and row["metrics_version"] == 1
        store = ResultStore(out)
        assert store.read_table("rollouts").num_rows == 8
        assert store.exists("training_curve.png") and store.read_bytes("training_curve.png")[:4] == b"\x89PNG"
        assert s1.adapter.endswith("checkpoints/step-000002/adapter")
        assert (tmp_path / "out/checkpoints/step-000002/adapter/adapter_config.json").is_file()
        events = [json.loads(line)["event"] for line in open(s1.log_path)]
        assert events.count("train_step") == 2 and "train_finished" in events

        # resume: the same --out continues after step 2 instead of starting over
        s2 = train(out, settings=_settings(world, tiny_dir, tmp_path, **{"train.steps": 3}), resume=True,
                   log_dir=str(tmp_path / "logs"))
        assert s2.start_step == 2 and s2.steps_done == 1 and [r["step"] for r in s2.metrics] == [1, 2, 3]
        assert pq.read_table(str(tmp_path / "out/metrics")).num_rows == 3

        from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterKey

        async def versions():
            async with get_client() as client:
                return await client.read_artifacts(artifact_filter=ArtifactFilter(key=ArtifactFilterKey(any_=["train-metrics"])))

        import asyncio

        # published after every step (2 + 1) and once at each end (2): the UI follows training as it goes
        assert len(asyncio.run(versions())) == 5
    finally:
        shutdown_ray()


def test_cli_train_refuses_without_questions(tmp_path):
    from typer.testing import CliRunner

    from flows.cli.app import app

    r = CliRunner().invoke(app, ["train", "--out", str(tmp_path / "o")])
    assert r.exit_code == 2 and "train.train_questions" in r.output


def test_the_update_gets_every_core_and_gives_them_back():
    import os

    import torch

    from flows.train import torch_threads, update_threads
    from infra.runtime.settings import TrainConfig

    assert update_threads(TrainConfig(update_threads=0)) == len(os.sched_getaffinity(0))  # 0: every core it may use
    assert update_threads(TrainConfig(update_threads=3)) == 3
    before = torch.get_num_threads()
    with pytest.raises(RuntimeError):
        with torch_threads(before + 1):
            assert torch.get_num_threads() == before + 1
            raise RuntimeError("an update that fails")
    assert torch.get_num_threads() == before  # the in-process worker samples with its own setting again
