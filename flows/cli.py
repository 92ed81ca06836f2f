"""The `agentflow` command line: run one question, run a batch, export schemas, generate worlds."""

from __future__ import annotations

import json
import os
import sys
import uuid
from datetime import datetime, timezone
from pathlib import Path
from typing import Optional

import typer
from rich.console import Console
from rich.table import Table

app = typer.Typer(help="AgentFlow: modular, measurable research agents.", no_args_is_help=True, add_completion=False)
out = Console()
err = Console(stderr=True)

from flows.data_cli import data_app  # noqa: E402
from flows.models_cli import models_app  # noqa: E402
from flows.verifier_eval import verifier_eval_app  # noqa: E402
from flows.world_cli import world_app  # noqa: E402

app.add_typer(world_app, name="world")
app.add_typer(data_app, name="data")
app.add_typer(models_app, name="models")
app.add_typer(verifier_eval_app, name="verifier-eval")

from flows.evaluate import eval_command  # noqa: E402
from flows.injection_eval import injection_eval_command  # noqa: E402
from flows.tool_cli import tool_app  # noqa: E402

app.command("eval")(eval_command)
app.add_typer(tool_app, name="tool")
app.command("injection-eval")(injection_eval_command)


def _prepare_env() -> None:
    """Local, quiet, offline defaults for Prefect and Ray; set before they are imported."""
    home = Path(os.environ.get("AGENTFLOW_HOME", ".")).resolve()
    os.environ.setdefault("PREFECT_HOME", str(home / ".prefect"))
    os.environ.setdefault("DO_NOT_TRACK", "1")
    os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
    os.environ.setdefault("PREFECT_LOGGING_LEVEL", "WARNING")
    os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "120")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    from infra.events import configure_process_logging

    configure_process_logging(os.environ.get("AGENTFLOW_LOG_LEVEL", "warning"))


def _fail(message: str, code: int = 2) -> None:
    err.print(f"[bold red]error:[/] {message}", highlight=False, soft_wrap=True)
    raise typer.Exit(code)


def _new_run_id() -> str:
    return f"{datetime.now(timezone.utc):%Y%m%dT%H%M%S}-{uuid.uuid4().hex[:6]}"


def _settings(config: Optional[Path], corpus: Optional[Path], overrides: list[str], out_dir: Optional[str] = None,
              adapter: Optional[Path] = None):
    from infra.settings import ConfigError, load_settings

    values = {}
    if corpus is not None:
        if not corpus.is_file():
            _fail(f"corpus file {str(corpus)!r} does not exist")
        values["tools.search.corpus"] = str(corpus.resolve())
    if out_dir is not None:
        values["storage.out"] = out_dir
    try:
        settings = load_settings(config, overrides, **values)
    except ConfigError as exc:
        _fail(str(exc))
    if "search" in settings.tools.allow and not settings.tools.search.corpus:
        settings.tools.allow = [t for t in settings.tools.allow if t != "search"]
        err.print("note: no corpus given (--corpus or tools.search.corpus): the search tool is disabled", highlight=False)
    if adapter is not None:  # modular-trained: the Planner on a Flow-GRPO adapter
        from tasks.systems import SystemOptions, SystemUnavailable, check_system, trained_settings

        try:
            check_system("modular-trained", SystemOptions(adapter=str(adapter)))
        except SystemUnavailable as exc:
            _fail(str(exc))
        settings = trained_settings(settings, str(adapter))
    return settings


def _preflight(settings) -> None:
    """Fail fast, with one clear message, on a missing model, an unreachable endpoint or a bad corpus."""
    from infra.models import build_backend
    from infra.models.base import ModelError
    from infra.search import CorpusError, cached_index

    roles = {"planner": settings.models.planner, "generator": settings.models.generator}
    if "generalist" in settings.tools.allow:
        roles["generalist"] = settings.models.generalist
    if settings.models.verifier is not None:
        roles["verifier"] = settings.models.verifier
    if settings.ray.enabled:  # roles served by Ray model servers are checked when the servers start, not loaded here
        served = {r for server in settings.ray.model_servers.values() for r in server.roles}
        roles = {r: cfg for r, cfg in roles.items() if r not in served}
    for role, cfg in roles.items():
        try:
            build_backend(cfg)
        except ModelError as exc:
            _fail(f"{role} model: {exc}")
    if "search" in settings.tools.allow:
        try:
            cached_index(settings.tools.search.corpus)
        except (CorpusError, OSError) as exc:
            _fail(f"corpus: {exc}")


def cost_table(costs: dict, title: str = "Cost per role") -> Table:
    table = Table(title=title)
    for col in ("role", "calls", "tokens in", "tokens out", "latency s", "tool s", "rejections"):
        table.add_column(col, justify="left" if col == "role" else "right")
    for role, c in costs.items():
        c = c if isinstance(c, dict) else c.model_dump()
        table.add_row(str(getattr(role, "value", role)), str(c["calls"]), str(c["tokens_in"]), str(c["tokens_out"]),
                      f"{c['latency_ms'] / 1000:.2f}", f"{c['tool_ms'] / 1000:.2f}", str(c["rejections"]))
    return table


@app.command()
def run(
    question: str = typer.Argument(..., help="The question to research."),
    corpus: Optional[Path] = typer.Option(None, help="JSONL corpus for the search tool."),
    config: Optional[Path] = typer.Option(None, help="Run configuration (YAML/JSON)."),
    set_: list[str] = typer.Option([], "--set", help="Override a config value: section.key=value (repeatable)."),
    as_json: bool = typer.Option(False, "--json", help="Print the Answer record as JSON."),
    log_dir: Path = typer.Option(Path("runs/logs"), help="Where the run's JSON event log goes."),
    adapter: Optional[Path] = typer.Option(None, "--adapter", help="modular-trained: a trained Planner adapter "
                                           "(<train --out>/checkpoints/step-N/adapter)."),
) -> None:
    """Research one question and print the answer, its citations, the stop reason and the cost per role."""
    _prepare_env()
    if not question.strip():
        _fail("the question is empty")
    settings = _settings(config, corpus, set_, adapter=adapter)
    _preflight(settings)
    from flows.research import research_flow
    from tasks.contracts import Question

    run_id = _new_run_id()
    log_path = log_dir / f"{run_id}.jsonl"
    outcome = research_flow(Question(id="q1", question=question), settings, run_id, str(log_path))
    answer = outcome.answer
    if as_json:
        print(answer.model_dump_json(indent=2))
        return
    out.print(f"[bold]Answer[/] ({answer.status.value}, stop: {answer.stop_reason.value}"
              + (f", limit: {answer.budget_limit.value}" if answer.budget_limit else "") + f"):\n{answer.text}")
    for c in answer.citations:
        src = c.source.title or c.source.uri if c.source else "?"
        out.print(f"  [step {c.step_id}] {src}: {c.claim}", highlight=False)
    out.print(cost_table(answer.cost))
    out.print(f"events: {log_path}")


@app.command()
def batch(
    input: Path = typer.Argument(..., help="JSONL file of {id, question, answer?}."),
    out_dir: str = typer.Option("runs", "--out", help="Result location: a directory or s3://bucket/prefix."),
    corpus: Optional[Path] = typer.Option(None, help="JSONL corpus for the search tool."),
    config: Optional[Path] = typer.Option(None, help="Run configuration (YAML/JSON)."),
    set_: list[str] = typer.Option([], "--set", help="Override a config value: section.key=value (repeatable)."),
    limit: Optional[int] = typer.Option(None, min=1, help="Only the first N questions."),
    skip_bad_lines: bool = typer.Option(False, help="Skip malformed input lines (reported) instead of aborting."),
    run_id: Optional[str] = typer.Option(None, "--run-id", "--resume",
                                         help="Run id; an existing one resumes, skipping finished questions."),
    concurrency: Optional[int] = typer.Option(None, min=1, max=256,
                                              help="Questions researched at the same time (default: batch.concurrency)."),
    log_dir: Path = typer.Option(Path("runs/logs"), help="Where the run's JSON event log goes."),
    adapter: Optional[Path] = typer.Option(None, "--adapter", help="modular-trained: a trained Planner adapter "
                                           "(<train --out>/checkpoints/step-N/adapter)."),
) -> None:
    """Research every question of INPUT as tasks of one Prefect flow run; write answers and steps as Parquet."""
    _prepare_env()
    from flows.batch import InputError, batch_research, read_questions

    try:
        report = read_questions(input, skip_bad_lines=skip_bad_lines, limit=limit)
    except InputError as exc:
        _fail(str(exc))
    for skipped in report.skipped:
        err.print(f"skipped {input}: {skipped}", highlight=False)
    if concurrency is not None:
        set_ = [*set_, f"batch.concurrency={concurrency}"]
    settings = _settings(config, corpus, set_, out_dir, adapter=adapter)
    _preflight(settings)
    run_id = run_id or _new_run_id()
    summary = batch_research(str(input), settings, run_id, limit=limit, skip_bad_lines=skip_bad_lines, log_dir=str(log_dir))
    _print_batch(summary, settings)


def _print_batch(summary, settings) -> None:
    from infra.storage import ResultStore
    from tasks.contracts import RoleCost

    store = ResultStore(summary.out, s3_endpoint_url=settings.storage.s3_endpoint_url)
    answers = store.read_table("answers").to_pylist()
    table = Table(title=f"Answers (run {summary.run_id})")
    for col in ("id", "status", "stop", "answer", "gold", "cites"):
        table.add_column(col, overflow="fold")
    totals: dict[str, RoleCost] = {}
    for row in answers:
        table.add_row(row["task_id"], row["status"], row["stop_reason"], row["answer"][:160], row["gold_answer"] or "",
                      str(row["n_citations"]))
        for role, c in json.loads(row["cost_by_role"]).items():
            t = totals.setdefault(role, RoleCost())
            for k, v in c.items():
                setattr(t, k, getattr(t, k) + v)
    out.print(table)
    out.print(cost_table(totals, title="Cost per role (all questions)"))
    out.print(f"{summary.done} answered now, {summary.skipped_existing} already done earlier")
    out.print(f"answers: {store.location('answers')}\nsteps:   {store.location('steps')}\n"
              f"config:  {store.location('config.yaml')}\nevents:  {summary.log_path}")


@app.command()
def train(
    config: Optional[Path] = typer.Option(None, "--config", help="Run configuration with a `train:` section (YAML/JSON)."),
    out_dir: str = typer.Option(..., "--out", help="Checkpoints, metrics and the curve: a directory or s3://bucket/prefix."),
    set_: list[str] = typer.Option([], "--set", help="Override a config value: section.key=value (repeatable)."),
    resume: bool = typer.Option(False, "--resume", help="Continue from the latest checkpoint under --out."),
    log_dir: Path = typer.Option(Path("runs/logs"), help="Where the run's JSON event log goes."),
) -> None:
    """Flow-GRPO: train the Planner's LoRA adapter on the whole research flow (Prefect flow `train`)."""
    _prepare_env()
    from infra.settings import ConfigError, load_settings

    try:
        settings = load_settings(config, set_)
    except ConfigError as exc:
        _fail(str(exc))
    if not settings.train.train_questions:
        _fail("train.train_questions is not set (a JSONL file or a world directory from `agentflow world generate`)")
    from flows.train import TrainError
    from flows.train import train as train_flow

    try:
        summary = train_flow(out_dir, settings=settings, resume=resume, log_dir=str(log_dir))
    except TrainError as exc:
        _fail(str(exc))
    table = Table(title=f"Flow-GRPO (run {summary.run_id})")
    for col in ("step", "reward", "acc", "val acc", "kl", "clip", "entropy", "turns", "zero-signal", "tools", "s"):
        table.add_column(col, justify="right")
    for r in summary.metrics:
        val = "" if r["val_accuracy"] is None else f"{r['val_accuracy']:.2f}"
        table.add_row(str(r["step"]), f"{r['mean_reward']:.3f}", f"{r['accuracy']:.2f}", val, f"{r['kl']:.4f}",
                      f"{r['clip_frac']:.3f}", f"{r['entropy']:.3f}", f"{r['turns_per_trajectory']:.1f}",
                      f"{r['zero_signal_groups']}/{r['groups']}", r["tool_choices"], f"{r['wall_s']:.0f}")
    out.print(table)
    out.print(f"steps this run: {summary.steps_done} (from step {summary.start_step})\n"
              f"adapter: {summary.adapter}\ncurve:   {summary.curve}\nevents:  {summary.log_path}")


@app.command()
def schemas(out_dir: Optional[Path] = typer.Option(None, "--out", help="Write one <Name>.schema.json per contract here.")) -> None:
    """Print (or write) the JSON schemas of every contract."""
    from tasks.contracts import json_schemas

    all_schemas = json_schemas()
    if out_dir is None:
        print(json.dumps(all_schemas, indent=2))
        return
    out_dir.mkdir(parents=True, exist_ok=True)
    for name, schema in all_schemas.items():
        (out_dir / f"{name}.schema.json").write_text(json.dumps(schema, indent=2))
    out.print(f"wrote {len(all_schemas)} schemas to {out_dir}")


def main() -> None:  # pragma: no cover
    app(prog_name="agentflow")


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
