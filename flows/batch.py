"""Batch research: every question of an input file as tasks of ONE flow run, results as Parquet.

Each finished question is written at once (answers and steps part files keyed by question id), so
an interrupted batch keeps what it finished and a re-run with the same run id skips it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from prefect import flow
from pydantic import ValidationError
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from infra.events import RunLog
from infra.settings import Settings, dump_settings
from infra.storage import ResultStore
from flows.research import PREFECT_STEPS, ModuleSteps, research
from tasks.contracts import Question
from tasks.tables import ANSWERS_SCHEMA, STEPS_SCHEMA, answer_row, step_rows


class InputError(ValueError):
    """A batch input file that cannot be read; the message names the file and line."""


@dataclass
class InputReport:
    questions: list[Question]
    skipped: list[str] = field(default_factory=list)  # "line N: why"


def read_questions(path: str | Path, *, skip_bad_lines: bool = False, limit: int | None = None) -> InputReport:
    """Read {id, question, answer?} JSON lines. A bad line aborts (default) or is skipped and reported."""
    p = Path(path)
    if not p.is_file():
        raise InputError(f"input file {str(p)!r} does not exist")
    report = InputReport(questions=[])
    seen: set[str] = set()
    with p.open(encoding="utf-8") as fh:
        for n, line in enumerate(fh, start=1):
            if not line.strip():
                continue
            try:
                q = Question.model_validate(json.loads(line))
                if q.id in seen:
                    raise ValueError(f"duplicate id {q.id!r}")
            except (json.JSONDecodeError, ValidationError, ValueError) as exc:
                why = _short(exc)
                if not skip_bad_lines:
                    raise InputError(f"{p}: line {n}: {why}") from exc
                report.skipped.append(f"line {n}: {why}")
                continue
            seen.add(q.id)
            report.questions.append(q)
            if limit is not None and len(report.questions) >= limit:
                break
    if not report.questions:
        raise InputError(f"{p}: no valid questions")
    return report


def _short(exc: Exception) -> str:
    if isinstance(exc, ValidationError):
        e = exc.errors()[0]
        return f"{'.'.join(str(x) for x in e['loc']) or 'record'}: {e['msg']}"
    if isinstance(exc, json.JSONDecodeError):
        return f"not valid JSON ({exc.msg} at column {exc.colno})"
    return str(exc)


@dataclass
class BatchSummary:
    run_id: str
    out: str
    done: int
    skipped_existing: int
    log_path: str


@flow(name="batch-research", flow_run_name="batch-{run_id}", retries=0)
def batch_research(input_path: str, settings: Settings, run_id: str, limit: int | None = None,
                   skip_bad_lines: bool = False, log_dir: str = "runs/logs", progress: bool = True) -> BatchSummary:
    """Research every question of `input_path`; results under settings.storage.out/<run_id>."""
    report = read_questions(input_path, skip_bad_lines=skip_bad_lines, limit=limit)
    return run_batch(report, settings, run_id, log_dir=log_dir, progress=progress)


def run_batch(report: InputReport, settings: Settings, run_id: str, *, log_dir: str, progress: bool = True,
              steps: ModuleSteps = PREFECT_STEPS) -> BatchSummary:
    store = ResultStore(f"{settings.storage.out.rstrip('/')}/{run_id}", s3_endpoint_url=settings.storage.s3_endpoint_url)
    store.write_text("config.yaml", dump_settings(settings))
    log_path = Path(log_dir) / f"{run_id}.jsonl"
    log = RunLog(log_path, run_id=run_id, console=settings.logging.console, level=settings.logging.level)
    for skipped in report.skipped:
        log.warning("input_line_skipped", detail=skipped)
    done = existing = 0
    console = Console(stderr=True)
    try:
        with Progress(TextColumn("[bold]research"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                      TextColumn("{task.description}"), console=console, disable=not progress, transient=False) as bar:
            job = bar.add_task("", total=len(report.questions))
            for q in report.questions:
                if store.has_part("answers", q.id):  # finished in an earlier attempt of this run
                    existing += 1
                    bar.advance(job)
                    continue
                bar.update(job, description=q.id)
                outcome = research(q, settings, run_id=run_id, log=log, steps=steps)
                # steps first: an answers part marks the question finished
                store.write_part("steps", q.id, step_rows(outcome.records), STEPS_SCHEMA)
                store.write_part("answers", q.id, [answer_row(outcome.answer, q)], ANSWERS_SCHEMA)
                done += 1
                bar.advance(job)
    finally:
        log.close()
    if not store.local:
        store.write_text(f"logs/{run_id}.jsonl", log_path.read_text())
    return BatchSummary(run_id=run_id, out=store.uri, done=done, skipped_existing=existing, log_path=str(log_path))
