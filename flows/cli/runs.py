"""`agentflow run` and `agentflow batch`: research one question, or every question of a JSONL file as one Prefect
flow run; print the answers, their citations and the cost per role."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import typer
from rich.table import Table

from flows.cli.startup import console, err_console, fail, new_run_id, preflight, prepare_env, run_settings


def cost_table(costs: dict, title: str = "Cost per role") -> Table:
    table = Table(title=title)
    for col in ("role", "calls", "tokens in", "tokens out", "latency s", "tool s", "rejections"):
        table.add_column(col, justify="left" if col == "role" else "right")
    for role, c in costs.items():
        c = c if isinstance(c, dict) else c.model_dump()
        table.add_row(str(getattr(role, "value", role)), str(c["calls"]), str(c["tokens_in"]), str(c["tokens_out"]),
                      f"{c['latency_ms'] / 1000:.2f}", f"{c['tool_ms'] / 1000:.2f}", str(c["rejections"]))
    return table


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
    prepare_env()
    if not question.strip():
        fail("the question is empty")
    settings = run_settings(config, corpus, set_, adapter=adapter)
    preflight(settings)
    from flows.research import research_flow
    from tasks.contracts import Question

    run_id = new_run_id()
    log_path = log_dir / f"{run_id}.jsonl"
    outcome = research_flow(Question(id="q1", question=question), settings, run_id, str(log_path))
    answer = outcome.answer
    if as_json:
        print(answer.model_dump_json(indent=2))
        return
    console.print(f"[bold]Answer[/] ({answer.status.value}, stop: {answer.stop_reason.value}"
              + (f", limit: {answer.budget_limit.value}" if answer.budget_limit else "") + f"):\n{answer.text}")
    for c in answer.citations:
        src = c.source.title or c.source.uri if c.source else "?"
        console.print(f"  [step {c.step_id}] {src}: {c.claim}", highlight=False)
    console.print(cost_table(answer.cost))
    console.print(f"events: {log_path}")


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
    prepare_env()
    from flows.batch import InputError, batch_research, read_questions

    try:
        report = read_questions(input, skip_bad_lines=skip_bad_lines, limit=limit)
    except InputError as exc:
        fail(str(exc))
    for skipped in report.skipped:
        err_console.print(f"skipped {input}: {skipped}", highlight=False)
    if concurrency is not None:
        set_ = [*set_, f"batch.concurrency={concurrency}"]
    settings = run_settings(config, corpus, set_, out_dir, adapter=adapter)
    preflight(settings)
    run_id = run_id or new_run_id()
    summary = batch_research(str(input), settings, run_id, limit=limit, skip_bad_lines=skip_bad_lines, log_dir=str(log_dir))
    _print_batch(summary, settings)


def _print_batch(summary, settings) -> None:
    from infra.runtime.storage import ResultStore
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
    console.print(table)
    console.print(cost_table(totals, title="Cost per role (all questions)"))
    console.print(f"{summary.done} answered now, {summary.skipped_existing} already done earlier")
    console.print(f"answers: {store.location('answers')}\nsteps:   {store.location('steps')}\n"
              f"config:  {store.location('config.yaml')}\nevents:  {summary.log_path}")
