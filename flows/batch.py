"""Batch research: every question of an input file as tasks of ONE flow run, results as Parquet.

Questions run `batch.concurrency` at a time (threads of the flow run, each question one
`answer_question` task). Each finished question is written at once (steps, then answers: part files
keyed by question id, written atomically), so an interrupted batch keeps what it finished and a
re-run with the same run id (`--resume RUN_ID`) skips it: every question ends up exactly once.
With settings.ray.enabled the tools and model servers run as Ray actors (infra.runtime.services).
"""

from __future__ import annotations

import contextvars
import json
import uuid
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable

from prefect import flow, task
from prefect.cache_policies import NO_CACHE
from prefect.context import FlowRunContext
from prefect.utilities.annotations import quote
from pydantic import BaseModel, ValidationError
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from flows.research import DIRECT_STEPS, PREFECT_STEPS, ModuleSteps, research
from flows.review import needs_human, review_outcome
from infra.runtime.events import RunLog
from infra.runtime.settings import ConfigError, Settings, dump_settings, load_settings
from infra.runtime.storage import ResultStore
from tasks.contracts import Plan, Question
from tasks.eval.tables import ANSWERS_SCHEMA, JUDGED_SCHEMA, STEPS_SCHEMA, answer_row, judged_rows, step_rows
from tasks.outcome import ResearchOutcome


class InputError(ValueError):
    """A batch input file that cannot be read; the message names the file and line."""


@dataclass
class InputReport:
    questions: list[Question]
    skipped: list[str] = field(default_factory=list)  # "line N: why"


def _open_input(path: str | Path, s3_endpoint_url: str | None):
    """A local file, or any fsspec URI (s3://bucket/key with the configured endpoint)."""
    text = str(path)
    if "://" not in text or text.startswith("file://"):
        p = Path(text.removeprefix("file://"))
        if not p.is_file():
            raise InputError(f"input file {str(p)!r} does not exist")
        return p.open(encoding="utf-8")
    import fsspec

    options = {"client_kwargs": {"endpoint_url": s3_endpoint_url}} if text.startswith("s3://") and s3_endpoint_url else {}
    try:
        fs, root = fsspec.core.url_to_fs(text, **options)
        if not fs.isfile(root):
            raise InputError(f"input file {text!r} does not exist")
        return fs.open(root, "rt", encoding="utf-8")
    except InputError:
        raise
    except Exception as exc:
        raise InputError(f"cannot read input {text!r}: {exc}") from exc


def read_questions(path: str | Path, *, skip_bad_lines: bool = False, limit: int | None = None,
                   s3_endpoint_url: str | None = None) -> InputReport:
    """Read {id, question, answer?} JSON lines (a path or URI). A bad line aborts (default) or is skipped and reported."""
    p = str(path)
    report = InputReport(questions=[])
    seen: set[str] = set()
    with _open_input(path, s3_endpoint_url) as fh:
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
    failed: int = 0  # questions that raised (a bug): nothing written, a resume runs them again
    concurrency: int = 1


def default_run_id() -> str:
    """A run id for runs started without one: <scheduled start>-<flow run id> in Prefect, else <now>-<random>."""
    from prefect.runtime import flow_run

    if flow_run.id:
        start = flow_run.scheduled_start_time or datetime.now(timezone.utc)
        return f"{start:%Y%m%dT%H%M%S}-{str(flow_run.id)[:8]}"
    return f"{datetime.now(timezone.utc):%Y%m%dT%H%M%S}-{uuid.uuid4().hex[:6]}"


def _batch_run_name() -> str:
    from prefect.runtime import flow_run

    return f"batch-{flow_run.parameters.get('run_id') or default_run_id()}"


def _quoting(module_task: Callable) -> Callable:
    """Call a module task with its records, settings and memory view quoted: Prefect then skips walking them
    for task inputs (the Settings tree alone costs about 3 ms per task). The Plan stays unquoted: task run
    names read plan.step_id. Names and results are unchanged."""
    def call(*args: Any, **kwargs: Any) -> Any:
        return module_task(*(quote(a) if isinstance(a, (BaseModel, list, dict)) and not isinstance(a, Plan) else a
                             for a in args), **kwargs)

    return call


BATCH_STEPS = ModuleSteps(*(_quoting(t) for t in (PREFECT_STEPS.plan_step, PREFECT_STEPS.execute_step,
                                                   PREFECT_STEPS.verify_step, PREFECT_STEPS.generate_answer)))


@task(name="answer_question", retries=0, cache_policy=NO_CACHE, task_run_name="question-{question.id}")
def answer_question(question: Question, settings: Settings, run_id: str, log: RunLog | None = None,
                    module_tasks: bool = True) -> ResearchOutcome:
    """Research one question of a batch (its module calls are tasks of their own when module_tasks)."""
    return research(question, settings, run_id=run_id, log=log, steps=BATCH_STEPS if module_tasks else DIRECT_STEPS)


def resolve_batch_settings(settings: Settings | None = None, config: str | None = None, output: str | None = None,
                           concurrency: int | None = None, overrides: list[str] | None = None) -> Settings:
    """The run's settings: `settings`, or the `config` file plus `overrides` (section.key=value); then the
    output URI and concurrency."""
    if settings is not None and (config is not None or overrides):
        raise ConfigError("give either settings, or a config file and/or overrides, not both")
    values: dict[str, Any] = {}
    if output is not None:
        values["storage.out"] = output
    if concurrency is not None:
        values["batch.concurrency"] = concurrency
    if settings is None:
        return load_settings(config, overrides, **values)
    if not values:
        return settings
    tree = settings.model_dump(mode="json")
    for dotted, value in values.items():
        section, key = dotted.split(".")
        tree[section][key] = value
    try:
        return Settings.model_validate(tree)
    except ValidationError as exc:
        raise ConfigError(_short(exc)) from exc


@flow(name="batch-research", flow_run_name=_batch_run_name, retries=0, log_prints=False)
def batch_research(input_path: str, settings: Settings | None = None, run_id: str | None = None, limit: int | None = None,
                   skip_bad_lines: bool = False, log_dir: str = "runs/logs", progress: bool = True,
                   output: str | None = None, config: str | None = None, overrides: list[str] | None = None,
                   concurrency: int | None = None) -> BatchSummary:
    """Research every question of `input_path` (a path or URI); results under <output or storage.out>/<run_id>.

    settings: the whole configuration; or config: a YAML/JSON file and overrides: ["section.key=value"]
    (defaults when none). run_id: an existing one resumes that run; None: a new id from the flow run
    (scheduled runs never collide).
    """
    settings = resolve_batch_settings(settings, config, output, concurrency, overrides)
    run_id = run_id or default_run_id()
    report = read_questions(input_path, skip_bad_lines=skip_bad_lines, limit=limit,
                            s3_endpoint_url=settings.storage.s3_endpoint_url)
    summary = run_batch(report, settings, run_id, log_dir=log_dir, progress=progress)
    publish_artifacts(ResultStore(summary.out, s3_endpoint_url=settings.storage.s3_endpoint_url), summary)
    return summary


def run_batch(report: InputReport, settings: Settings, run_id: str, *, log_dir: str, progress: bool = True,
              steps: ModuleSteps | None = None, concurrency: int | None = None) -> BatchSummary:
    """Research the questions not finished yet, `concurrency` at a time, streaming each to Parquet as it finishes.

    Inside a flow run each question is an `answer_question` task whose module calls are nested tasks
    (batch.module_tasks; `steps=DIRECT_STEPS` or PREFECT_STEPS overrides it); outside a flow run,
    plain calls unless `steps=PREFECT_STEPS` (tests and benchmarks call it that way).
    """
    store = ResultStore(f"{settings.storage.out.rstrip('/')}/{run_id}", s3_endpoint_url=settings.storage.s3_endpoint_url)
    store.write_text("config.yaml", dump_settings(settings))
    log_path = Path(log_dir) / f"{run_id}.jsonl"
    log = RunLog(log_path, run_id=run_id, console=settings.logging.console, level=settings.logging.level)
    for skipped in report.skipped:
        log.warning("input_line_skipped", detail=skipped)
    n_workers = concurrency or settings.batch.concurrency
    in_flow = FlowRunContext.get() is not None
    if steps is None:  # module calls as tasks only where a flow run holds them
        module_tasks = in_flow and settings.batch.module_tasks
    else:
        module_tasks = steps is not DIRECT_STEPS
    answer = answer_question if in_flow else answer_question.fn
    runtime = None
    if settings.ray.enabled:
        from infra.runtime.services import RayRuntime

        runtime = RayRuntime.start(settings)

    wrap = quote if in_flow else (lambda x: x)  # big arguments are not walked by Prefect

    def one(q: Question) -> ResearchOutcome:
        if runtime is None:
            return answer(q, wrap(settings), run_id, wrap(log), module_tasks)
        with runtime.question_settings(settings) as qs:  # this question's model-server replica
            return answer(q, wrap(qs), run_id, wrap(log), module_tasks)

    pending = [q for q in report.questions if not store.has_part("answers", q.id)]  # finished earlier: skipped
    existing = len(report.questions) - len(pending)
    done = failed = 0
    to_review: list[tuple[Question, ResearchOutcome]] = []
    log.event("batch_start", questions=len(report.questions), pending=len(pending), concurrency=n_workers)
    console = Console(stderr=True)
    try:
        with Progress(TextColumn("[bold]research"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                      TextColumn("{task.description}"), console=console, disable=not progress, transient=False) as bar, \
                ThreadPoolExecutor(max_workers=n_workers, thread_name_prefix="question") as pool:
            job = bar.add_task("", total=len(report.questions), completed=existing)
            # each question runs in a copy of this context, so its task joins this flow run
            futures = {pool.submit(contextvars.copy_context().run, one, q): q for q in pending}
            try:
                for fut in as_completed(futures):
                    q = futures[fut]
                    try:
                        outcome = fut.result()
                    except Exception as exc:  # a bug, not a model/tool failure (those end as answers)
                        failed += 1
                        log.warning("question_failed", task_id=q.id, error=f"{type(exc).__name__}: {exc}")
                    else:
                        # steps first: an answers part marks the question finished
                        store.write_part("steps", q.id, step_rows(outcome.records), STEPS_SCHEMA)
                        store.write_part("judged", q.id, judged_rows(run_id, q.model_dump(mode="json"), outcome.judged,
                                                                     settings.as_of), JUDGED_SCHEMA)
                        store.write_part("answers", q.id, [answer_row(outcome.answer, q)], ANSWERS_SCHEMA)
                        done += 1
                        if needs_human(outcome.answer, settings):  # reviewed after the batch, one at a time
                            to_review.append((q, outcome))
                    bar.update(job, advance=1, description=q.id)
            except BaseException:  # storage failed or interrupted: start nothing new, keep what is written
                pool.shutdown(wait=True, cancel_futures=True)
                raise
    finally:
        log.event("batch_end", done=done, failed=failed, skipped_existing=existing)
        log.close()
    for q, outcome in to_review:  # review: prefect: the flow run pauses for each decision; the answer is rewritten
        outcome = review_outcome(outcome, q, settings, run_id)
        store.write_part("answers", q.id, [answer_row(outcome.answer, q)], ANSWERS_SCHEMA)
    if not store.local:
        store.write_text(f"logs/{run_id}.jsonl", log_path.read_text())
    return BatchSummary(run_id=run_id, out=store.uri, done=done, skipped_existing=existing, log_path=str(log_path),
                        failed=failed, concurrency=n_workers)


# ------------------------------------------------------------------------------ artifacts (for people)

ARTIFACT_ROWS = 200


def _md(text: Any, limit: int = 300) -> str:
    out = " ".join(str(text if text is not None else "").split())
    out = out[: limit - 1] + "…" if len(out) > limit else out
    return out.replace("|", "\\|")


def _citations_md(raw: str) -> str:
    items = []
    for c in json.loads(raw or "[]"):
        src = c.get("source") or {}
        where = src.get("title") or src.get("uri") or "?"
        items.append(f"[step {c.get('step_id')}] {_md(where, 80)}: {_md(c.get('claim'), 120)}")
    return "<br>".join(items) or "—"


def batch_tables(answers: list[dict]) -> tuple[list[dict], list[dict]]:
    """(per-role cost rows, stop-reason rows) over all questions of a run."""
    roles: dict[str, dict] = {}
    for row in answers:
        for role, c in json.loads(row["cost_by_role"]).items():
            t = roles.setdefault(role, {"role": role, "calls": 0, "tokens_in": 0, "tokens_out": 0, "latency_s": 0.0,
                                        "tool_s": 0.0, "rejections": 0})
            for k in ("calls", "tokens_in", "tokens_out", "rejections"):
                t[k] += c.get(k, 0)
            t["latency_s"] += c.get("latency_ms", 0.0) / 1000
            t["tool_s"] += c.get("tool_ms", 0.0) / 1000
    for t in roles.values():
        t["latency_s"], t["tool_s"] = round(t["latency_s"], 3), round(t["tool_s"], 3)
    stops: dict[tuple[str, str], int] = {}
    for row in answers:
        key = (row["stop_reason"], row["status"])
        stops[key] = stops.get(key, 0) + 1
    stop_rows = [{"stop_reason": r, "status": s, "questions": n} for (r, s), n in sorted(stops.items(), key=lambda kv: -kv[1])]
    return list(roles.values()), stop_rows


def publish_artifacts(store: ResultStore, summary: BatchSummary) -> None:
    """Markdown answers with citations, the per-role cost table and stop reasons, under stable keys (in a flow run)."""
    if FlowRunContext.get() is None:
        return
    from prefect.artifacts import create_markdown_artifact, create_table_artifact

    answers = sorted(store.read_table("answers").to_pylist(), key=lambda r: r["task_id"])
    cost_rows, stop_rows = batch_tables(answers)
    lines = [f"# Batch {summary.run_id}", "",
             f"{len(answers)} questions in `{summary.out}`: {summary.done} answered in this run, "
             f"{summary.skipped_existing} earlier, {summary.failed} failed; concurrency {summary.concurrency}.", "",
             "| id | status | stop | answer | citations |", "|---|---|---|---|---|"]
    for row in answers[:ARTIFACT_ROWS]:
        lines.append(f"| {_md(row['task_id'], 60)} | {row['status']} | {row['stop_reason']} | {_md(row['answer'])} | "
                     f"{_citations_md(row['citations'])} |")
    if len(answers) > ARTIFACT_ROWS:
        lines.append(f"\n(first {ARTIFACT_ROWS} of {len(answers)}; all rows in `{store.location('answers')}`)")
    create_markdown_artifact("\n".join(lines), key="batch-answers", description=f"Answers with citations, run {summary.run_id}")
    create_table_artifact(cost_rows, key="batch-cost-by-role", description=f"Cost per role over all questions, run {summary.run_id}")
    create_table_artifact(stop_rows, key="batch-stop-reasons", description=f"Why each question stopped, run {summary.run_id}")
