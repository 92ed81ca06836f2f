"""Flow-GRPO training of the Planner: batches of questions, G rollouts each in Ray actors, one update, repeat.

One Prefect flow run (`train`) drives a `Trainer`: per step it samples a batch of training
questions, collects G trajectories per question from the rollout workers (flows/rollout.py),
updates the LoRA adapter (tasks/learn/grpo.py), ships the new adapter weights to the workers (or reloads
it on the vLLM server), evaluates on the validation split every `eval_every` steps and writes a
checkpoint every `checkpoint_every` steps (and after the last). Only the Planner trains; the other
roles stay on their own backends, frozen.

Layout of --out (a local directory or s3://bucket/prefix)::

    config.yaml                            the resolved settings
    metrics/part-step-<n>.parquet          one row per step (METRICS_SCHEMA)
    rollouts/part-step-<n>.parquet         one row per trajectory (reward, tools, answer; no token ids)
    checkpoints/step-<n>/adapter/          the PEFT adapter (load with --adapter for modular-trained)
    checkpoints/step-<n>/optimizer.pt      AdamW state
    checkpoints/step-<n>/state.json        step, policy version, config
    checkpoints/latest.json                {"step": n, "path": "checkpoints/step-<n>"}
    training_curve.png                     reward, accuracy, KL, clip fraction, entropy per step
"""

from __future__ import annotations

import io
import json
import os
import random
import resource
import shutil
import tempfile
import time
import uuid
from contextlib import contextmanager
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import Any

import pyarrow as pa
from prefect import flow, task
from prefect.cache_policies import NO_CACHE
from prefect.context import FlowRunContext

from flows.rollout import RolloutWorker, Trajectory, tool_distribution
from infra.runtime.events import RunLog
from infra.runtime.settings import ModelConfig, Settings, dump_settings
from infra.runtime.storage import ResultStore

METRICS_VERSION = 1
METRICS_SCHEMA = pa.schema([
    ("step", pa.int64()),
    ("mean_reward", pa.float64()),
    ("accuracy", pa.float64()),            # share of trajectories the mechanical scorer accepted
    ("kl", pa.float64()),                  # token-mean k3 KL to the reference (base model)
    ("clip_frac", pa.float64()),           # share of tokens whose ratio was clipped
    ("entropy", pa.float64()),             # token-mean policy entropy
    ("loss", pa.float64()),
    ("grad_norm", pa.float64()),
    ("turns_per_trajectory", pa.float64()),
    ("tool_choices", pa.string()),         # JSON {tool: count} over all Planner turns of the step
    ("malformed_plans", pa.int64()),
    ("groups", pa.int64()),
    ("zero_signal_groups", pa.int64()),    # groups whose rewards were all equal (no gradient)
    ("trajectories", pa.int64()),
    ("update_tokens", pa.int64()),
    ("updated", pa.bool_()),
    ("rollout_s", pa.float64()),
    ("update_s", pa.float64()),
    ("wall_s", pa.float64()),
    ("val_accuracy", pa.float64()),        # null on steps without evaluation
    ("val_reward", pa.float64()),
    ("rss_mb", pa.float64()),              # peak RSS of the learner process
    ("policy_version", pa.int64()),
    ("metrics_version", pa.int64()),
])

ROLLOUTS_SCHEMA = pa.schema([
    ("step", pa.int64()), ("question_id", pa.string()), ("group_index", pa.int64()), ("reward", pa.float64()),
    ("correct", pa.bool_()), ("status", pa.string()), ("stop_reason", pa.string()), ("turns", pa.int64()),
    ("tools", pa.string()), ("tool_cost", pa.float64()), ("malformed_plans", pa.int64()),
    ("reward_terms", pa.string()), ("answer", pa.string()), ("policy_version", pa.int64()), ("wall_s", pa.float64()),
])


class TrainError(RuntimeError):
    """A training run that cannot start or continue; the message says why."""


# ------------------------------------------------------------------------------------ lifecycle


class TrainPhase(str, Enum):
    created = "created"
    rollout = "rollout"
    update = "update"
    evaluate = "evaluate"
    checkpoint = "checkpoint"
    finished = "finished"
    failed = "failed"


TRANSITIONS: dict[TrainPhase, frozenset[TrainPhase]] = {
    TrainPhase.created: frozenset({TrainPhase.rollout, TrainPhase.evaluate, TrainPhase.finished, TrainPhase.failed}),
    TrainPhase.rollout: frozenset({TrainPhase.update, TrainPhase.failed}),
    TrainPhase.update: frozenset({TrainPhase.rollout, TrainPhase.evaluate, TrainPhase.checkpoint, TrainPhase.finished,
                                  TrainPhase.failed}),
    TrainPhase.evaluate: frozenset({TrainPhase.rollout, TrainPhase.checkpoint, TrainPhase.finished, TrainPhase.failed}),
    TrainPhase.checkpoint: frozenset({TrainPhase.rollout, TrainPhase.finished, TrainPhase.failed}),
    TrainPhase.finished: frozenset(),
    TrainPhase.failed: frozenset(),
}


class IllegalTransition(ValueError):
    """A phase change the training lifecycle does not allow."""


# ------------------------------------------------------------------------------------ data


def load_questions(path: str) -> tuple[list[dict], str | None]:
    """(question records, corpus path or None) from a JSONL file, a world directory or a prepared benchmark."""
    p = Path(path)
    if p.is_dir():
        manifest = json.loads((p / "manifest.json").read_text()) if (p / "manifest.json").is_file() else {}
        records = [json.loads(line) for line in (p / "questions.jsonl").read_text().splitlines() if line.strip()]
        if str(manifest.get("format", "")).startswith("agentflow-world"):
            for r in records:
                r.setdefault("benchmark", "world")
        corpus = p / "corpus.jsonl"
        return records, str(corpus.resolve()) if corpus.is_file() else None
    if p.is_file():
        return [json.loads(line) for line in p.read_text().splitlines() if line.strip()], None
    raise TrainError(f"questions {path!r}: no such file or directory")


def batch_indices(n: int, step: int, k: int, seed: int) -> list[int]:
    """The k question indices of a step: epochs of seeded shuffles of range(n), taken in order (resumable)."""
    out: list[int] = []
    pos = step * k
    while len(out) < k:
        epoch, offset = divmod(pos, n)
        order = list(range(n))
        random.Random(f"{seed}-{epoch}").shuffle(order)
        out.append(order[offset])
        pos += 1
    return out


def policy_config(settings: Settings) -> ModelConfig:
    """The Planner's ModelConfig during training: the trainable policy (local sampling or the vLLM server)."""
    t = settings.train
    base = settings.models.planner.model_copy(deep=True)
    if t.policy_server:
        return base.model_copy(update=dict(backend="vllm_policy", base_url=t.policy_server, model="agentflow-planner",
                                           adapter=None, temperature=t.temperature))
    return base.model_copy(update=dict(backend="hf_policy", model_path=t.base_model, adapter=None, device="cpu",
                                       temperature=t.temperature, seed=None, template_fields=list(t.template_fields)))


# ------------------------------------------------------------------------------------ checkpoints


class Checkpoints:
    """Adapter + optimizer + step + config under <out>/checkpoints, local or S3; `latest.json` written last."""

    def __init__(self, store: ResultStore):
        self.store = store

    def save(self, step: int, policy, learner, settings: Settings, version: int) -> str:
        import torch

        name = f"checkpoints/step-{step:06d}"
        with tempfile.TemporaryDirectory(prefix="agentflow-ckpt-") as tmp:
            policy.save_adapter(Path(tmp) / "adapter")
            buf = io.BytesIO()
            torch.save(learner.state_dict(), buf)
            (Path(tmp) / "optimizer.pt").write_bytes(buf.getvalue())
            state = {"step": step, "policy_version": version, "saved_at": time.time(),
                     "settings": json.loads(settings.model_dump_json())}
            (Path(tmp) / "state.json").write_text(json.dumps(state, indent=2))
            for f in sorted(Path(tmp).rglob("*")):
                if f.is_file():
                    self.store.write_bytes(f"{name}/{f.relative_to(tmp).as_posix()}", f.read_bytes())
        self.store.write_text("checkpoints/latest.json", json.dumps({"step": step, "path": name}))
        return self.store.location(name)

    def latest(self) -> dict | None:
        if not self.store.exists("checkpoints/latest.json"):
            return None
        return json.loads(self.store.read_text("checkpoints/latest.json"))

    def download(self, name: str, into: Path) -> Path:
        """Copy a checkpoint folder to a local directory (PEFT and torch load from local files)."""
        files = self.store.list_files(name)
        if not any(f.endswith("adapter_config.json") for f in files):
            raise TrainError(f"checkpoint {self.store.location(name)} has no adapter")
        for rel in files:
            target = into / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(self.store.read_bytes(f"{name}/{rel}"))
        return into


# ------------------------------------------------------------------------------------ the trainer


def _rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


class Trainer:
    """Learner in this process, rollout workers as Ray actors (or in-process when train.workers == 0)."""

    def __init__(self, settings: Settings, out: str, *, resume: bool = False, run_id: str | None = None,
                 log_dir: str = "runs/logs"):
        import torch

        from infra.models.hf_policy import PolicyModel
        from tasks.learn.grpo import Learner

        settings = settings.model_copy(deep=True)  # the caller's settings stay as they were
        self.settings = settings
        self.cfg = settings.train
        torch.set_num_threads(self.cfg.torch_threads)
        if not self.cfg.train_questions:
            raise TrainError("train.train_questions is not set (a JSONL file or a world directory)")
        self.questions, self.corpus = load_questions(self.cfg.train_questions)
        if not self.questions:
            raise TrainError(f"no questions in {self.cfg.train_questions}")
        self.val, self.val_corpus = load_questions(self.cfg.val_questions) if self.cfg.val_questions else ([], None)
        if self.corpus:
            settings.tools.search.corpus = self.corpus
            if "search" not in settings.tools.allow:
                settings.tools.allow = [*settings.tools.allow, "search"]
        elif "search" in settings.tools.allow and not settings.tools.search.corpus:
            settings.tools.allow = [t for t in settings.tools.allow if t != "search"]
        settings.models.planner = policy_config(settings)
        if getattr(settings.memory, "mode", "run") != "run":  # trajectories of a group must not share memory
            settings.memory.mode = "run"
        self.store = ResultStore(out, s3_endpoint_url=settings.storage.s3_endpoint_url)
        self.checkpoints = Checkpoints(self.store)
        self.run_id = run_id or f"train-{time.strftime('%Y%m%dT%H%M%S')}-{uuid.uuid4().hex[:6]}"
        Path(log_dir).mkdir(parents=True, exist_ok=True)
        self.log = RunLog(Path(log_dir) / f"{self.run_id}.jsonl", run_id=self.run_id, console=settings.logging.console,
                          level=settings.logging.level)
        self.phase = TrainPhase.created
        self._tmp = Path(tempfile.mkdtemp(prefix="agentflow-train-"))
        self.start_step = 0
        self.version = 0
        latest = self.checkpoints.latest() if resume else None
        t0 = time.perf_counter()
        if latest:
            local = self.checkpoints.download(latest["path"], self._tmp / "resume")
            self.policy = PolicyModel(self.cfg.base_model, adapter=str(local / "adapter"), trainable=True,
                                      device=self.cfg.device, template_fields=self.cfg.template_fields)
            self.learner = self._learner(Learner)
            self.learner.load_state_dict(torch.load(local / "optimizer.pt", weights_only=False))
            state = json.loads((local / "state.json").read_text())
            self.start_step, self.version = int(state["step"]), int(state.get("policy_version", state["step"]))
        else:
            self.policy = PolicyModel(self.cfg.base_model, lora=self.cfg.lora, trainable=True, device=self.cfg.device,
                                      seed=self.cfg.seed, template_fields=self.cfg.template_fields)
            self.learner = self._learner(Learner)
        self.load_s = time.perf_counter() - t0
        self.store.write_text("config.yaml", dump_settings(settings))
        self.workers = self._start_workers()
        self.log.event("train_started", start_step=self.start_step, resumed=bool(latest), workers=self.cfg.workers,
                       group_size=self.cfg.group_size, questions=len(self.questions), val=len(self.val),
                       load_s=round(self.load_s, 2))

    def _learner(self, cls):
        c = self.cfg
        return cls(self.policy, learning_rate=c.learning_rate, weight_decay=c.weight_decay, max_grad_norm=c.max_grad_norm,
                   clip_low=c.clip_low, clip_high=c.clip_high, kl_coef=c.kl_coef, epochs=c.epochs_per_batch,
                   share_prefix=c.share_prefix)

    # -------------------------------------------------------------- lifecycle

    def enter(self, phase: TrainPhase) -> None:
        if phase not in TRANSITIONS[self.phase]:
            raise IllegalTransition(f"training cannot go from {self.phase.value} to {phase.value}")
        self.phase = phase

    # -------------------------------------------------------------- workers

    def _start_workers(self) -> list:
        settings_json = self.settings.model_dump_json()
        if self.cfg.workers == 0:
            from infra.models.hf_policy import register_policy

            if not self.cfg.policy_server:
                register_policy(self.settings.models.planner, self.policy)  # sample with the learner's own model
            return [RolloutWorker(settings_json, 0, self.cfg.torch_threads)]
        import ray

        from infra.runtime.cluster import ensure_ray

        ensure_ray(self.settings.ray)
        actor = ray.remote(RolloutWorker).options(num_cpus=self.cfg.worker_cpus, num_gpus=self.cfg.worker_gpus,
                                                  max_restarts=0)
        workers = [actor.remote(settings_json, i, self.cfg.torch_threads) for i in range(self.cfg.workers)]
        ray.get([w.ready.remote() for w in workers])
        return workers

    def _remote(self) -> bool:
        return self.cfg.workers > 0

    def sync_policy(self) -> None:
        """Workers sample from the current adapter: weights shipped to them, or reloaded on the vLLM server."""
        if self.cfg.policy_server:
            from infra.models.vllm_policy import reload_adapter

            adapter_root = Path(self.cfg.policy_server_adapter_dir or self._tmp / "served")
            path = self.policy.save_adapter(adapter_root / f"v{self.version:06d}")
            reload_adapter(self.cfg.policy_server, self.settings.models.planner.model, str(path))
            state = None
        else:
            state = self.policy.lora_state()
        if not self._remote():
            if state is not None:
                self.workers[0].version = self.version  # same model object: nothing to copy
            return
        import ray

        ref = ray.put(state)
        ray.get([w.set_policy.remote(ref, self.version) for w in self.workers])

    def _run_units(self, units: list[tuple[dict, int, int, dict]]) -> list[Trajectory]:
        """Trajectories for (question, group index, seed, options) units, spread round-robin over the workers."""
        if not self._remote():
            return [self.workers[0].rollout(q, g, s, **opts) for q, g, s, opts in units]
        import ray

        refs = [self.workers[i % len(self.workers)].rollout.remote(q, g, s, **opts)
                for i, (q, g, s, opts) in enumerate(units)]
        return ray.get(refs)

    # -------------------------------------------------------------- one step

    def rollouts(self, step: int) -> list[list[Trajectory]]:
        """G trajectories for each question of this step's batch, grouped by question."""
        idx = batch_indices(len(self.questions), step, self.cfg.questions_per_step, self.cfg.seed)
        units = [(self.questions[i], g, hash_seed(self.cfg.seed, step, i, g), {"run_id": self.run_id})
                 for i in idx for g in range(self.cfg.group_size)]
        flat = self._run_units(units)
        return [flat[k * self.cfg.group_size:(k + 1) * self.cfg.group_size] for k in range(len(idx))]

    def update(self, groups: list[list[Trajectory]]):
        from tasks.learn.grpo import group_samples

        samples, stats = group_samples(groups, scale=self.cfg.advantage_scale)
        with torch_threads(update_threads(self.cfg)):  # the workers wait for this update: it may take more cores
            result = self.learner.update(samples)
        if result.updated:
            self.version += 1
        result.extra["zero_signal_groups"] = sum(1 for s in stats if s.zero_signal)
        return result

    def evaluate(self) -> dict[str, float]:
        """Greedy Planner on the first eval_questions validation questions, one trajectory each."""
        qs = self.val[: self.cfg.eval_questions]
        if not qs:
            return {}
        opts = {"temperature": 0.0, "run_id": f"{self.run_id}-val"}
        if self.val_corpus:
            opts["corpus"] = self.val_corpus
        trajs = self._run_units([(q, 0, self.cfg.seed, opts) for q in qs])
        return {"val_accuracy": sum(t.correct for t in trajs) / len(trajs),
                "val_reward": sum(t.reward for t in trajs) / len(trajs)}

    def step_row(self, step: int, groups: list[list[Trajectory]], upd, rollout_s: float, update_s: float,
                 wall_s: float, val: dict[str, float]) -> dict[str, Any]:
        trajs = [t for g in groups for t in g]
        n = max(1, len(trajs))
        return {
            "step": step, "mean_reward": sum(t.reward for t in trajs) / n, "accuracy": sum(t.correct for t in trajs) / n,
            "kl": upd.kl, "clip_frac": upd.clip_frac, "entropy": upd.entropy, "loss": upd.loss,
            "grad_norm": upd.grad_norm, "turns_per_trajectory": sum(len(t.turns) for t in trajs) / n,
            "tool_choices": json.dumps(dict(sorted(tool_distribution(trajs).items()))),
            "malformed_plans": sum(t.malformed_plans for t in trajs), "groups": len(groups),
            "zero_signal_groups": upd.extra.get("zero_signal_groups", 0), "trajectories": len(trajs),
            "update_tokens": upd.tokens, "updated": upd.updated, "rollout_s": rollout_s, "update_s": update_s,
            "wall_s": wall_s, "val_accuracy": val.get("val_accuracy"), "val_reward": val.get("val_reward"),
            "rss_mb": _rss_mb(), "policy_version": self.version, "metrics_version": METRICS_VERSION,
        }

    def record(self, step: int, row: dict[str, Any], groups: list[list[Trajectory]]) -> None:
        key = f"step-{step:06d}"
        self.store.write_part("rollouts", key, [{
            "step": step, "question_id": t.question_id, "group_index": t.group_index, "reward": t.reward,
            "correct": t.correct, "status": t.status, "stop_reason": t.stop_reason, "turns": len(t.turns),
            "tools": json.dumps(t.tools), "tool_cost": t.tool_cost, "malformed_plans": t.malformed_plans,
            "reward_terms": json.dumps(t.reward_terms), "answer": t.answer, "policy_version": t.policy_version,
            "wall_s": t.wall_s} for g in groups for t in g], ROLLOUTS_SCHEMA)
        self.store.write_part("metrics", key, [row], METRICS_SCHEMA)
        self.log.event("train_step", **{k: v for k, v in row.items() if k != "metrics_version"})

    def metrics(self) -> list[dict[str, Any]]:
        table = self.store.read_table("metrics")
        return sorted(table.to_pylist(), key=lambda r: r["step"]) if table.num_rows else []

    def write_curve(self) -> str | None:
        rows = self.metrics()
        if not rows:
            return None
        png = training_curve_png(rows)
        return self.store.write_bytes("training_curve.png", png)

    def close(self) -> None:
        if self._remote():
            import ray

            for w in self.workers:
                try:
                    ray.kill(w)
                except Exception:
                    pass
        self.workers = []
        self.log.close()
        shutil.rmtree(self._tmp, ignore_errors=True)


def update_threads(cfg) -> int:
    """Threads for the policy update: train.update_threads, or every core this process may run on."""
    return cfg.update_threads or len(os.sched_getaffinity(0))


@contextmanager
def torch_threads(n: int):
    """torch's intra-op threads set to n for the block, then put back (the in-process worker samples with the old)."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield n
    finally:
        torch.set_num_threads(before)


def hash_seed(*parts: int) -> int:
    """A stable 31-bit seed from integers (Python's hash() of str is salted per process)."""
    import hashlib

    return int(hashlib.sha256("-".join(map(str, parts)).encode()).hexdigest()[:8], 16) & 0x7FFFFFFF


def training_curve_png(rows: list[dict[str, Any]]) -> bytes:
    """Reward, accuracy (train and validation), KL, clip fraction and entropy per step, as a PNG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    steps = [r["step"] for r in rows]
    fig, axes = plt.subplots(2, 2, figsize=(10, 7))
    ax = axes[0][0]
    ax.plot(steps, [r["mean_reward"] for r in rows], marker="o", label="mean reward")
    ax.plot(steps, [r["accuracy"] for r in rows], marker="o", label="train accuracy")
    val = [(r["step"], r["val_accuracy"]) for r in rows if r.get("val_accuracy") is not None]
    if val:
        ax.plot([s for s, _ in val], [v for _, v in val], marker="s", label="val accuracy")
    ax.set_title("reward and accuracy")
    ax.legend(fontsize=8)
    axes[0][1].plot(steps, [r["kl"] for r in rows], marker="o")
    axes[0][1].set_title("KL to reference (k3)")
    axes[1][0].plot(steps, [r["clip_frac"] for r in rows], marker="o", label="clip fraction")
    axes[1][0].plot(steps, [r["zero_signal_groups"] / max(1, r["groups"]) for r in rows], marker="x",
                    label="zero-signal groups")
    axes[1][0].set_title("clipping and zero-signal groups")
    axes[1][0].legend(fontsize=8)
    axes[1][1].plot(steps, [r["entropy"] for r in rows], marker="o")
    axes[1][1].set_title("entropy")
    for a in axes.flat:
        a.set_xlabel("step")
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=90)
    plt.close(fig)
    return buf.getvalue()


# ------------------------------------------------------------------------------------ Prefect tasks and flow


@task(name="collect_rollouts", retries=0, cache_policy=NO_CACHE, task_run_name="rollouts-step{step}")
def collect_rollouts(trainer: Trainer, step: int) -> list[list[Trajectory]]:
    """G trajectories per question of one batch, from the rollout workers."""
    trainer.enter(TrainPhase.rollout)
    return trainer.rollouts(step)


@task(name="update_policy", retries=0, cache_policy=NO_CACHE, task_run_name="update-step{step}")
def update_policy(trainer: Trainer, step: int, groups: list[list[Trajectory]]):
    """One Flow-GRPO update of the adapter, then the workers get the new weights."""
    trainer.enter(TrainPhase.update)
    result = trainer.update(groups)
    if result.updated:
        trainer.sync_policy()
    return result


@task(name="evaluate_policy", retries=0, cache_policy=NO_CACHE, task_run_name="evaluate-step{step}")
def evaluate_policy(trainer: Trainer, step: int) -> dict[str, float]:
    """Greedy rollouts on the validation split."""
    trainer.enter(TrainPhase.evaluate)
    return trainer.evaluate()


@task(name="save_checkpoint", retries=0, cache_policy=NO_CACHE, task_run_name="checkpoint-step{step}")
def save_checkpoint(trainer: Trainer, step: int) -> str:
    """Adapter, optimizer, step and config to <out>/checkpoints (local or S3)."""
    trainer.enter(TrainPhase.checkpoint)
    return trainer.checkpoints.save(step, trainer.policy, trainer.learner, trainer.settings, trainer.version)


@dataclass
class TrainSummary:
    run_id: str
    out: str
    start_step: int
    steps_done: int
    last_checkpoint: str | None
    adapter: str | None
    metrics: list[dict[str, Any]]
    curve: str | None
    log_path: str


def run_training(settings: Settings, out: str, *, resume: bool = False, run_id: str | None = None,
                 log_dir: str = "runs/logs", steps: ModuleTasks | None = None) -> TrainSummary:
    """The training loop; its steps are Prefect tasks inside the `train` flow, plain functions outside it."""
    steps = steps or (PREFECT_TASKS if FlowRunContext.get() is not None else DIRECT_TASKS)
    trainer = Trainer(settings, out, resume=resume, run_id=run_id, log_dir=log_dir)
    cfg = trainer.cfg
    last_ckpt = None
    done = 0
    try:
        trainer.sync_policy()
        for step in range(trainer.start_step, cfg.steps):
            t0 = time.perf_counter()
            groups = steps.collect_rollouts(trainer, step)
            t1 = time.perf_counter()
            upd = steps.update_policy(trainer, step, groups)
            t2 = time.perf_counter()
            n = step + 1
            val = steps.evaluate_policy(trainer, n) if cfg.eval_every and n % cfg.eval_every == 0 and trainer.val else {}
            row = trainer.step_row(n, groups, upd, t1 - t0, t2 - t1, time.perf_counter() - t0, val)
            trainer.record(n, row, groups)
            publish_training_artifacts(trainer.run_id, trainer.metrics())  # each step: a new version of the table
            if n % cfg.checkpoint_every == 0 or n == cfg.steps:
                last_ckpt = steps.save_checkpoint(trainer, n)
            done += 1
        trainer.enter(TrainPhase.finished)
    except BaseException:
        trainer.phase = TrainPhase.failed
        trainer.log.event("train_failed", phase=trainer.phase.value)
        trainer.close()
        raise
    curve = trainer.write_curve()
    rows = trainer.metrics()
    latest = trainer.checkpoints.latest()
    adapter = trainer.store.location(latest["path"], "adapter") if latest else None
    trainer.log.event("train_finished", steps_done=done, checkpoint=last_ckpt, adapter=adapter)
    log_path = str(trainer.log.path)
    summary = TrainSummary(run_id=trainer.run_id, out=trainer.store.uri, start_step=trainer.start_step, steps_done=done,
                           last_checkpoint=last_ckpt, adapter=adapter, metrics=rows, curve=curve, log_path=log_path)
    trainer.close()
    publish_training_artifacts(summary.run_id, rows, adapter)
    return summary


@dataclass(frozen=True)
class ModuleTasks:
    collect_rollouts: Any
    update_policy: Any
    evaluate_policy: Any
    save_checkpoint: Any


PREFECT_TASKS = ModuleTasks(collect_rollouts, update_policy, evaluate_policy, save_checkpoint)
DIRECT_TASKS = ModuleTasks(collect_rollouts.fn, update_policy.fn, evaluate_policy.fn, save_checkpoint.fn)

ARTIFACT_COLUMNS = ("step", "mean_reward", "accuracy", "val_accuracy", "kl", "clip_frac", "entropy",
                    "turns_per_trajectory", "zero_signal_groups", "tool_choices", "wall_s")


def publish_training_artifacts(run_id: str, metrics: list[dict[str, Any]], adapter: str | None = None) -> None:
    """The metrics so far as the `train-metrics` Prefect table artifact (in a flow run); published after every
    step, so the UI shows training as it goes (each publication is a new version of the key)."""
    if FlowRunContext.get() is None:
        return
    from prefect.artifacts import create_table_artifact

    rows = [{k: (round(v, 4) if isinstance(v, float) else v) for k, v in r.items() if k in ARTIFACT_COLUMNS}
            for r in metrics]
    where = f"adapter: {adapter}" if adapter else f"{len(rows)} steps so far"
    create_table_artifact(rows, key="train-metrics", description=f"Flow-GRPO per-step metrics, run {run_id}; {where}")


@flow(name="train", flow_run_name="train-{out}", retries=0, log_prints=False)
def train(out: str, settings: Settings | None = None, config: str | None = None, overrides: list[str] | None = None,
          resume: bool = False, run_id: str | None = None, log_dir: str = "runs/logs") -> TrainSummary:
    """Flow-GRPO training of the Planner adapter; checkpoints, metrics and the curve under `out`."""
    from infra.runtime.settings import load_settings

    if settings is None:
        settings = load_settings(config, overrides)
    return run_training(settings, out, resume=resume, run_id=run_id, log_dir=log_dir)
