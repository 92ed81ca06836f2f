"""`agentflow train`: Flow-GRPO on the whole research flow; print the per-step table and where the adapter went."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer
from rich.table import Table

from flows.cli.startup import console, fail, prepare_env


def train(
    config: Optional[Path] = typer.Option(None, "--config", help="Run configuration with a `train:` section (YAML/JSON)."),
    out_dir: str = typer.Option(..., "--out", help="Checkpoints, metrics and the curve: a directory or s3://bucket/prefix."),
    set_: list[str] = typer.Option([], "--set", help="Override a config value: section.key=value (repeatable)."),
    resume: bool = typer.Option(False, "--resume", help="Continue from the latest checkpoint under --out."),
    log_dir: Path = typer.Option(Path("runs/logs"), help="Where the run's JSON event log goes."),
) -> None:
    """Flow-GRPO: train the Planner's LoRA adapter on the whole research flow (Prefect flow `train`)."""
    prepare_env()
    from infra.runtime.settings import ConfigError, load_settings

    try:
        settings = load_settings(config, set_)
    except ConfigError as exc:
        fail(str(exc))
    if not settings.train.train_questions:
        fail("train.train_questions is not set (a JSONL file or a world directory from `agentflow world generate`)")
    from flows.train import TrainError
    from flows.train import train as train_flow

    try:
        summary = train_flow(out_dir, settings=settings, resume=resume, log_dir=str(log_dir))
    except TrainError as exc:
        fail(str(exc))
    table = Table(title=f"Flow-GRPO (run {summary.run_id})")
    for col in ("step", "reward", "acc", "val acc", "kl", "clip", "entropy", "turns", "zero-signal", "tools", "s"):
        table.add_column(col, justify="right")
    for r in summary.metrics:
        val = "" if r["val_accuracy"] is None else f"{r['val_accuracy']:.2f}"
        table.add_row(str(r["step"]), f"{r['mean_reward']:.3f}", f"{r['accuracy']:.2f}", val, f"{r['kl']:.4f}",
                      f"{r['clip_frac']:.3f}", f"{r['entropy']:.3f}", f"{r['turns_per_trajectory']:.1f}",
                      f"{r['zero_signal_groups']}/{r['groups']}", r["tool_choices"], f"{r['wall_s']:.0f}")
    console.print(table)
    console.print(f"steps this run: {summary.steps_done} (from step {summary.start_step})\n"
              f"adapter: {summary.adapter}\ncurve:   {summary.curve}\nevents:  {summary.log_path}")
