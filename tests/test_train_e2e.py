"""A short real Flow-GRPO run on CPU: SmolLM2-135M-Instruct from its GGUF as the Planner policy (transformers +
LoRA) in a Ray rollout worker, the embedded llama.cpp Generator, the real tools and budget; a checkpoint that resumes."""

from __future__ import annotations

import json
import tempfile

import pytest

from tests.conftest import MECHANICS_MODEL

pytest.importorskip("torch")
pytest.importorskip("peft")
pytest.importorskip("gguf")


_RAY_TMP = tempfile.TemporaryDirectory(prefix="afe-")  # a short path (unix sockets); removed at exit


@pytest.mark.slow
def test_real_training_run_writes_a_checkpoint_that_resumes(tmp_path):
    from flows.train import run_training
    from infra.data.world import generate_world, write_world
    from infra.models import clear_backend_cache, locate_embedded_model
    from infra.models.base import ModelError
    from infra.runtime.services import shutdown_ray
    from infra.runtime.settings import load_settings

    try:
        locate_embedded_model(MECHANICS_MODEL)
    except ModelError as exc:
        pytest.skip(str(exc))
    write_world(generate_world(seed=0, n_questions=4, split="train"), tmp_path / "world")

    def settings(steps: int, workers: int):
        return load_settings(None, None, **{
            "models.planner.max_tokens": 32, "models.generator.max_tokens": 48, "budget.max_steps": 2,
            "models.generator.model": MECHANICS_MODEL, "train.base_model": MECHANICS_MODEL,
            "tools.allow": ["python", "search"],
            "train.train_questions": str(tmp_path / "world"), "train.steps": steps, "train.questions_per_step": 1,
            "train.group_size": 2, "train.workers": workers, "train.eval_every": 0, "train.checkpoint_every": 1,
            "ray.temp_dir": _RAY_TMP.name, "ray.num_cpus": 2,
        })

    out = str(tmp_path / "out")
    clear_backend_cache()
    try:
        s1 = run_training(settings(1, workers=1), out, log_dir=str(tmp_path / "logs"))
    finally:
        shutdown_ray()
    row = s1.metrics[0]
    assert row["trajectories"] == 2 and row["turns_per_trajectory"] >= 1
    assert set(json.loads(row["tool_choices"])) <= {"python", "search", "answer", "invalid"}
    assert row["kl"] == pytest.approx(0.0, abs=1e-6)  # step 0: the adapter starts as the identity
    assert (tmp_path / "out/checkpoints/step-000001/adapter/adapter_config.json").is_file()
    assert (tmp_path / "out/checkpoints/step-000001/optimizer.pt").is_file()

    clear_backend_cache()
    s2 = run_training(settings(2, workers=0), out, resume=True, log_dir=str(tmp_path / "logs"))
    assert s2.start_step == 1 and [r["step"] for r in s2.metrics] == [1, 2]
    assert json.loads((tmp_path / "out/checkpoints/latest.json").read_text())["step"] == 2
