"""`agentflow eval`: systems x seeds x questions of one benchmark under one budget and tool set (flows/evaluate.py);
print the per-system table, stop reasons and failure attribution, and where the results went."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Optional

import typer
from rich.console import Console
from rich.table import Table

from flows.cli.startup import preflight, prepare_env
from flows.evaluate import (
    ATTEMPT_COLUMNS,
    EvalError,
    EvalSummary,
    _cell,
    claim_output,
    evaluate,
    load_questions,
    parse_memory,
    resolve_data,
    with_data,
)
from flows.systems import SYSTEMS, SystemOptions, SystemUnavailable, parse_systems
from infra.data.benchmarks import DatasetError, ensure_backends
from infra.runtime.storage import ResultStore


def eval_command(
    benchmark: str = typer.Option(..., "--benchmark", help="Benchmark name (see `agentflow data list`)."),
    data: Path = typer.Option(..., "--data", help="A prepared benchmark directory (`agentflow data prepare`), or the "
                                                  "raw datasets directory, prepared on the fly into OUT/data."),
    systems: str = typer.Option("direct,monolithic,modular", "--systems",
                                help=f"Comma-separated systems: {', '.join(SYSTEMS)}."),
    seeds: int = typer.Option(1, "--seeds", min=1, help="Seeds per system (each model config's sampling seed)."),
    limit: Optional[int] = typer.Option(None, "--limit", min=1, help="Only the first N questions."),
    out: str = typer.Option(..., "--out", help="Result directory (or s3://bucket/prefix); re-running resumes."),
    config: Optional[Path] = typer.Option(None, "--config", help="Run configuration (YAML/JSON)."),
    set_: list[str] = typer.Option([], "--set", help="Override a config value: section.key=value (repeatable)."),
    adapter: Optional[str] = typer.Option(None, "--adapter", help="modular-trained: the trained Planner adapter."),
    progress: bool = typer.Option(True, "--progress/--no-progress", help="Show the progress bar."),
    attempts: int = typer.Option(1, "--attempts", min=1, help="Run the same questions K times in sequence."),
    memory: str = typer.Option("run", "--memory", help="Memory modes to compare, comma-separated: persistent (kept "
                               "across attempts, re-verified before use), run (one run), off (none)."),
    plant: int = typer.Option(0, "--plant", min=0, help="Plant a false accepted fact in persistent memory for the "
                              "first N questions that can carry one (contamination recovery)."),
) -> None:
    """Evaluate systems on a benchmark under one budget and tool set; write results.parquet, summary.json, report.html."""
    prepare_env()
    err = Console(stderr=True)

    def fail(message: str, code: int = 2) -> None:
        err.print(f"[bold red]error:[/] {message}", highlight=False, markup=True, soft_wrap=True)
        raise typer.Exit(code)

    from rich.markup import escape

    from infra.data.benchmarks import BackendRequiredError
    from infra.runtime.settings import ConfigError, load_settings

    try:
        settings = load_settings(config, set_)
    except ConfigError as exc:
        fail(escape(str(exc)))
    try:
        names = parse_systems(systems, SystemOptions(adapter=adapter))
        modes = parse_memory(memory)
        data_dir = resolve_data(benchmark, data, out)
        bench = load_questions(data_dir, limit)
        ensure_backends(bench, available=[])
    except (SystemUnavailable, EvalError, DatasetError, BackendRequiredError, KeyError) as exc:
        fail(escape(str(exc).strip("'\"")))
    settings = with_data(settings, data_dir)
    try:
        claim_output(ResultStore(out, s3_endpoint_url=settings.storage.s3_endpoint_url), bench, settings)
    except EvalError as exc:
        fail(escape(str(exc)))
    if seeds > 1 and settings.models.planner.temperature == 0:
        err.print("note: the planner's temperature is 0, so seeds change nothing for greedy decoding", highlight=False)
    preflight(settings)
    t0 = time.perf_counter()
    wide = Console(width=None if Console().is_terminal else 120)  # logs and CI get the whole table
    result = evaluate(benchmark, str(data_dir), names, seeds, out, settings, limit=limit, adapter=adapter,
                      progress=progress, attempts=attempts, memory=modes, plant=plant)
    wide.print(summary_table(result))
    if result.summary.get("attempts"):
        wide.print(attempts_rich_table(result.summary["attempts"]))
    wide.print(stop_lines(result), highlight=False)
    wide.print(f"{result.done} run now, {result.skipped_existing} done earlier; wall time {time.perf_counter() - t0:.1f} s\n"
                    f"results: {result.path('results.parquet')}\nsummary: {result.path('summary.json')}\n"
                    f"report:  {result.path('report.html')}", highlight=False)


def summary_table(result: EvalSummary) -> Table:
    """Per-system results as a rich table (the figures of summary.json; the report has them all)."""
    s = result.summary
    table = Table(title=f"{result.benchmark}: {result.questions} questions x {len(result.seeds)} seeds")
    for col in ("system", "accuracy", "95% CI", "tokens/q", "p50/p95 s", "iters", "wrong tools", "no evid.", "rej."):
        table.add_column(col, justify="left" if col == "system" else "right")
    for name, m in s["systems"].items():
        a, lat, rej = m["accuracy"], m["latency_s"], m["verifier_rejection_rate"]
        ci = a["ci95"]
        table.add_row(name, f"{a['mean']:.2f}±{a['std']:.2f}", f"{ci[0]:.2f}-{ci[1]:.2f}" if ci else "-",
                      f"{m['tokens']['per_question']:.0f}", f"{lat['p50']:.1f}/{lat['p95']:.1f}",
                      f"{m['mean_iterations']:.1f}", str(m["wrong_tool_calls"]), str(m["missing_evidence"]),
                      f"{rej:.2f}" if rej is not None else "-")
    return table


def attempts_rich_table(rows: list[dict]) -> Table:
    table = Table(title="Per attempt and memory mode")
    for _, title in ATTEMPT_COLUMNS:
        table.add_column(title, justify="left" if title in ("system", "memory") else "right")
    for r in rows:
        table.add_row(*(_cell(r[k]) for k, _ in ATTEMPT_COLUMNS))
    return table


def stop_lines(result: EvalSummary) -> str:
    """Stop reasons and failure attribution per system, one line each."""
    lines = []
    for name, m in result.summary["systems"].items():
        stops = ", ".join(f"{k} {v}" for k, v in m["stop_reasons"].items())
        failed = ", ".join(f"{k} {v}" for k, v in m["failure_attribution"].items() if v) or "none"
        lines.append(f"{name}: stops {stops}; failed in {failed}")
    return "\n".join(lines)
