"""Evaluation: systems x seeds x questions of one benchmark as ONE Prefect flow run; Parquet, summary, report.

Every system runs under the same Settings (same Budget, same tools, same models); a seed changes the
sampling seed of every model config. Each finished (system, seed, question) is written at once as
part files keyed by that triple (steps and evidence first, the results row last), so a re-run with
the same --out skips what is done and an interrupted evaluation loses nothing. At the end the parts
are gathered into ``results.parquet``, ``steps.parquet`` and ``evidence.parquet``, and
``summary.json``, ``report.html`` and one ``traces/<unit>.html`` per row are (re)written.

Layout of --out::

    data/                  the prepared benchmark, when --data was a raw datasets directory
    parts/{results,steps,evidence,judged}/part-<system>.s<seed>.<question>.parquet
    settings/<system>.seed<seed>.yaml      the resolved settings each system ran under, per seed
    logs/<system>.s<seed>.jsonl            JSON events of the runs
    results.parquet steps.parquet evidence.parquet judged.parquet summary.json report.html traces/
"""

from __future__ import annotations

import os
from pathlib import Path


def _local_prefect_defaults() -> None:
    """Prefect reads its settings when first imported, and the CLI imports this module to register
    `agentflow eval`: keep the CLI's local, quiet, offline defaults (flows/cli/startup.py) ahead of that."""
    home = Path(os.environ.get("AGENTFLOW_HOME", ".")).resolve()
    os.environ.setdefault("PREFECT_HOME", str(home / ".prefect"))
    os.environ.setdefault("DO_NOT_TRACK", "1")
    os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
    os.environ.setdefault("PREFECT_LOGGING_LEVEL", "WARNING")
    os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "120")


_local_prefect_defaults()

import hashlib  # noqa: E402
import io  # noqa: E402
import json  # noqa: E402
import time  # noqa: E402
import uuid  # noqa: E402
from dataclasses import dataclass, field  # noqa: E402
from datetime import datetime, timezone  # noqa: E402
from typing import Any, Optional  # noqa: E402

import pyarrow as pa  # noqa: E402
import pyarrow.parquet as pq  # noqa: E402
from prefect import flow, task  # noqa: E402
from prefect.cache_policies import NO_CACHE  # noqa: E402
from rich.console import Console  # noqa: E402
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn  # noqa: E402

from flows.systems import SYSTEMS, SystemOptions, SystemUnavailable, parse_systems, system_settings  # noqa: E402
from infra.data.benchmarks import Benchmark, ensure_backends, load_prepared, prepare  # noqa: E402
from infra.runtime.events import RunLog  # noqa: E402
from infra.runtime.settings import Settings, dump_settings  # noqa: E402
from infra.runtime.storage import ResultStore, safe_key  # noqa: E402
from tasks.contracts import Answer, AnswerStatus, PriorRecord, Question, Role, StopReason  # noqa: E402
from tasks.eval.attribution import Attribution, Evidence, attribute, evidence_from_memory  # noqa: E402
from tasks.eval.contamination import (  # noqa: E402
    MEMORY_MODES,
    answer_value,
    attempts_table,
    contamination_fields,
    plant_for,
    wrong_citations,
)
from tasks.eval.metrics import ROLES, outcome_counts, summarize  # noqa: E402
from tasks.eval.scorers import score_question  # noqa: E402
from tasks.eval.tables import JUDGED_SCHEMA, STEPS_SCHEMA, judged_rows, step_rows  # noqa: E402

RESULT_VERSION = 2
"""Version of the results/steps/evidence layouts below; bump when a column changes meaning.
2: memory and attempt columns, wrong citations and the planted-record columns (issue 9)."""

_KEY = [("system", pa.string()), ("seed", pa.int64()), ("question_id", pa.string())]

RESULTS_SCHEMA = pa.schema([
    *_KEY,
    ("unit", pa.string()),              # <system>.s<seed>.<question_id>: the part key
    ("benchmark", pa.string()),
    ("run_id", pa.string()),
    ("question", pa.string()),
    ("gold", pa.string()),
    ("prediction", pa.string()),        # the Answer text
    ("extracted", pa.string()),         # what the scorer read out of it
    ("correct", pa.bool_()),
    ("score", pa.float64()),            # graded value: token F1 for QA, else 1.0/0.0
    ("score_detail", pa.string()),
    ("status", pa.string()),
    ("stop_reason", pa.string()),
    ("budget_limit", pa.string()),
    ("iterations", pa.int32()),
    ("n_citations", pa.int32()),
    ("tokens_in", pa.int64()),
    ("tokens_out", pa.int64()),
    *[(f"tokens_{r}", pa.int64()) for r in ROLES],
    ("tokens_total", pa.int64()),
    ("model_calls", pa.int32()),
    ("latency_s", pa.float64()),        # wall time of the whole run of this question
    ("model_latency_ms", pa.float64()),
    ("tool_ms", pa.float64()),
    ("tool_calls", pa.int32()),
    ("wrong_tool_calls", pa.int32()),
    ("missing_evidence", pa.int32()),
    ("verifier_calls", pa.int32()),
    ("verifier_rejections", pa.int32()),
    ("attribution_module", pa.string()),
    ("attribution_cause", pa.string()),
    ("attribution_step", pa.int32()),
    ("attribution_detail", pa.string()),
    ("trace", pa.string()),             # relative link to traces/<unit>.html
    ("error", pa.string()),             # a system that raised (the row is then failed)
    ("base_system", pa.string()),       # the system that ran (`system` is its label: <system>.<memory>.a<attempt>)
    ("memory", pa.string()),            # persistent | run | off
    ("attempt", pa.int32()),            # 1..K: the same questions run again, in sequence
    ("wrong_citations", pa.int32()),    # citations of no accepted evidence, or of evidence not stating the answer
    ("prior_rechecked", pa.int32()),    # prior evidence records re-verified in this run
    ("prior_rejected", pa.int32()),     # ... of which rejected (and corrected)
    ("planted_id", pa.string()),        # the planted false accept for this question, if any
    ("planted_value", pa.string()),
    ("planted_status", pa.string()),    # rejected | superseded | accepted | unread
    ("planted_in_answer", pa.bool_()),
    ("contamination_recovered", pa.bool_()),  # read, rejected or already superseded, and not in the answer
    ("finished_at", pa.timestamp("us", tz="UTC")),
    ("result_version", pa.int32()),
])

STEPS_EVAL_SCHEMA = pa.schema([*_KEY, *STEPS_SCHEMA])
JUDGED_EVAL_SCHEMA = pa.schema([*_KEY, *JUDGED_SCHEMA])

EVIDENCE_SCHEMA = pa.schema([
    *_KEY,
    ("step_id", pa.int32()),
    ("tool", pa.string()),
    ("status", pa.string()),
    ("text", pa.string()),
    ("failure_type", pa.string()),
    ("reason", pa.string()),
])


class EvalError(ValueError):
    """An evaluation that cannot start as asked; the message says why."""


@dataclass
class EvalSummary:
    out: str
    benchmark: str
    systems: list[str]
    seeds: list[int]
    questions: int
    done: int
    skipped_existing: int
    wall_s: float
    summary: dict[str, Any] = field(default_factory=dict)

    def path(self, name: str) -> str:
        return f"{self.out}/{name}"


# --------------------------------------------------------------------------- inputs


# A unit's part tables in the order they are written: a results part marks the unit finished, so it comes last.
UNIT_TABLES = ("parts/steps", "parts/evidence", "parts/judged", "parts/results")


def unit_key(system: str, seed: int, question_id: str) -> str:
    return f"{system}.s{seed}.{question_id}"


def unit_system(part_name: str) -> str:
    """The system (or variant label) of a part file named from `unit_key`: ``part-<system>.s<seed>.<question>``."""
    import re

    found = re.match(r"(.+?)\.s\d+\.", part_name.removeprefix("part-"))
    if not found:
        raise ValueError(f"{part_name}: not a unit's part name (<system>.s<seed>.<question>)")
    return found.group(1)


def variant_label(system: str, memory: str, attempt: int, plain: bool) -> str:
    """The name a (system, memory mode, attempt) is reported under; the system itself when nothing varies."""
    return system if plain else f"{system}.{memory}.a{attempt}"


def parse_memory(text: str | list[str]) -> list[str]:
    modes = [m.strip() for m in (text.split(",") if isinstance(text, str) else text) if m.strip()]
    bad = [m for m in modes if m not in MEMORY_MODES]
    if bad or not modes:
        raise EvalError(f"--memory {','.join(modes) or '(empty)'}: use one or more of {', '.join(MEMORY_MODES)}")
    return list(dict.fromkeys(modes))


def memory_store_uri(out: str, system: str, seed: int) -> str:
    return f"{out.rstrip('/')}/memory/{safe_key(system)}.s{seed}"


def with_memory(settings: Settings, mode: str, store: str) -> Settings:
    """persistent: lessons and evidence kept across attempts in `store`; run: memory of one run (the default);
    off: no memory across runs and the Planner sees only the latest evidence (the memory-off ablation)."""
    s = settings.model_copy(deep=True)
    s.memory.mode = "persistent" if mode == "persistent" else "run"
    s.memory.store = store if mode == "persistent" else None
    if mode == "off":
        s.memory.planner_view = "last"
    return s


def plants_for(questions: list[dict], n: int) -> dict[str, PriorRecord]:
    """Planted false accepts for the first `n` questions that can carry one."""
    out: dict[str, PriorRecord] = {}
    for record in questions:
        if len(out) >= n:
            break
        planted = plant_for(record)
        if planted is not None:
            out[str(record["id"])] = planted
    return out


def trace_href(unit: str) -> str:
    """Where a unit's trace page lives, relative to report.html."""
    return f"traces/{safe_key(unit)}.html"


def resolve_data(benchmark: str, data: str | Path, out: str | Path) -> Path:
    """A prepared benchmark directory: ``data`` itself when it holds a manifest.json, else the whole
    benchmark prepared from the raw datasets directory ``data`` into ``out/data`` (whole, as `agentflow
    data prepare` does: --limit then takes the first questions, and the corpus is the same either way)."""
    d = Path(data)
    if (d / "manifest.json").is_file():
        meta = json.loads((d / "manifest.json").read_text(encoding="utf-8"))
        if benchmark and meta.get("benchmark") != benchmark:
            raise EvalError(f"{d} holds the prepared benchmark {meta.get('benchmark')!r}, not {benchmark!r}")
        return d
    if not d.is_dir():
        raise EvalError(f"--data {str(d)!r} is not a directory")
    return prepare(benchmark, d, Path(out) / "data")  # same files, same bytes: a resumed run finds the same data


def load_questions(data_dir: Path, limit: int | None) -> Benchmark:
    bench = load_prepared(data_dir)
    if limit is not None:
        bench.questions = bench.questions[:limit]
    if not bench.questions:
        raise EvalError(f"{data_dir}: no questions")
    return bench


def with_data(settings: Settings, data_dir: Path) -> Settings:
    """The benchmark's corpus as the search tool's corpus; no corpus, no search tool."""
    s = settings.model_copy(deep=True)
    corpus = Path(data_dir) / "corpus.jsonl"
    if corpus.is_file():
        s.tools.search.corpus = str(corpus.resolve())
    else:
        s.tools.allow = [t for t in s.tools.allow if t != "search"]
    return s


def seeded(settings: Settings, seed: int) -> Settings:
    """The settings with ``seed`` as the run seed and the sampling seed of every model config."""
    s = settings.model_copy(deep=True)
    s.seed = seed
    for role in ("planner", "generator", "verifier", "generalist"):
        cfg = getattr(s.models, role)
        if cfg is not None:
            cfg.seed = seed
    return s


def seed_values(settings: Settings, seeds: int) -> list[int]:
    """K seeds: settings.seed, settings.seed + 1, ..."""
    if seeds < 1:
        raise EvalError(f"--seeds must be at least 1, got {seeds}")
    return [settings.seed + k for k in range(seeds)]


def fingerprint(bench: Benchmark, settings: Settings) -> dict[str, str]:
    """What must not change between runs resumed in one --out: the questions and the configuration
    (logging and storage aside). --limit may change: it takes a prefix of the same questions."""
    files = bench.meta.get("files") or {}
    config = settings.model_dump(mode="json", exclude={"logging", "storage"})
    config["tools"]["search"]["corpus"] = files.get("corpus.jsonl")  # its content, not where it lies
    return {"benchmark": bench.name,
            "questions_sha256": files.get("questions.jsonl") or _sha(json.dumps(bench.questions, sort_keys=True)),
            "settings_sha256": _sha(json.dumps(config, sort_keys=True))}


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def claim_output(store: ResultStore, bench: Benchmark, settings: Settings) -> None:
    """Record the fingerprint in eval.json, or refuse an --out that holds a different evaluation."""
    mine = fingerprint(bench, settings)
    if store.fs.exists(f"{store.root}/eval.json"):
        theirs = json.loads(store.read_text("eval.json"))
        differs = [k for k in mine if theirs.get(k) != mine[k]]
        if differs:
            raise EvalError(f"{store.uri} holds an evaluation with a different {', '.join(differs)}; "
                            "resume it with the same benchmark, data and configuration, or use a new --out")
        return
    store.write_text("eval.json", json.dumps(mine, indent=2) + "\n")


# --------------------------------------------------------------------------- one unit


@dataclass
class UnitResult:
    row: dict[str, Any]
    steps: list[dict[str, Any]]
    evidence: list[dict[str, Any]]
    judged: list[dict[str, Any]] = field(default_factory=list)


def _failed_answer(question: Question, run_id: str, exc: Exception) -> Answer:
    return Answer(question_id=question.id, question=question.question,
                  text=f"Stopped before answering (error): {type(exc).__name__}: {exc}"[:2000],
                  status=AnswerStatus.failed, stop_reason=StopReason.error, run_id=run_id)


def run_unit(system: str, seed: int, record: dict, settings: Settings, *, run_id: str, log: RunLog | None,
             options: SystemOptions, base: str | None = None, memory: str = "run", attempt: int = 1,
             planted: PriorRecord | None = None) -> UnitResult:
    """Run one question with one system and seed; score it, attribute a failure, build the rows.

    `system` is the label rows are keyed by; `base` the system that runs (default: the label)."""
    question = Question.model_validate(record)
    records, evidence, error, prior, judged = [], [], None, None, []
    t0 = time.perf_counter()
    try:
        outcome = SYSTEMS[base or system](question, settings, run_id=run_id, log=log, options=options)
        answer, records, prior = outcome.answer, outcome.records, getattr(outcome, "prior", None)
        judged = getattr(outcome, "judged", [])
        evidence = evidence_from_memory(outcome.memory)
    except SystemUnavailable:
        raise
    except Exception as exc:  # a system that raises fails this question, not the evaluation
        answer, error = _failed_answer(question, run_id, exc), f"{type(exc).__name__}: {exc}"
    latency_s = time.perf_counter() - t0
    score = score_question(record, answer.text, status=answer.status.value)
    attribution = attribute(question=record, answer=answer, records=records, evidence=evidence,
                            correct=score.correct, tools=settings.tools.allow, extracted=score.extracted)
    row = result_row(system, seed, record, answer, records, evidence, score, attribution, latency_s, error)
    rechecked = (prior or {}).get("rechecked") or []
    row.update(base_system=base or system, memory=memory, attempt=attempt, prior_rechecked=len(rechecked),
               prior_rejected=sum(not rc["accepted"] for rc in rechecked),
               wrong_citations=wrong_citations(answer, {e.step_id: e.text for e in evidence if e.accepted},
                                               answer_value(record, answer.text, score.extracted)),
               **contamination_fields(record, planted, prior, answer.text))
    key = dict(system=system, seed=seed, question_id=question.id)
    steps = [{**key, **r} for r in step_rows(records)]
    ev = [{**key, "step_id": e.step_id, "tool": e.tool, "status": e.status, "text": e.text[:20000],
           "failure_type": e.failure_type, "reason": e.reason} for e in evidence]
    return UnitResult(row=row, steps=steps, evidence=ev,
                      judged=[{**key, **r} for r in judged_rows(run_id, record, judged, settings.as_of)])


def result_row(system: str, seed: int, record: dict, answer: Answer, records: list, evidence: list[Evidence], score,
               attribution: Attribution | None, latency_s: float, error: str | None) -> dict[str, Any]:
    """One results.parquet row."""
    cost = answer.cost
    by_role = {r.value: (cost[r].tokens_in + cost[r].tokens_out) if r in cost else 0 for r in Role}
    counts = outcome_counts(records, answer.text, [c.step_id for c in answer.citations],
                            [e.step_id for e in evidence if e.accepted])
    unit = unit_key(system, seed, str(record["id"]))
    gold = record.get("answer")
    return {
        "system": system, "seed": seed, "question_id": str(record["id"]), "unit": unit,
        "benchmark": record.get("benchmark"), "run_id": answer.run_id,
        "question": record["question"], "gold": None if gold is None else str(gold),
        "prediction": answer.text, "extracted": score.extracted, "correct": score.correct, "score": score.value,
        "score_detail": score.detail, "status": answer.status.value, "stop_reason": answer.stop_reason.value,
        "budget_limit": answer.budget_limit.value if answer.budget_limit else None,
        "iterations": answer.iterations, "n_citations": len(answer.citations),
        "tokens_in": sum(c.tokens_in for c in cost.values()), "tokens_out": sum(c.tokens_out for c in cost.values()),
        **{f"tokens_{r}": by_role[r] for r in ROLES}, "tokens_total": sum(by_role.values()),
        "model_calls": sum(r.calls_made() for r in records), "latency_s": latency_s,
        "model_latency_ms": sum(r.latency_ms for r in records if r.model),
        "tool_ms": sum(c.tool_ms for c in cost.values()),
        **counts,
        "attribution_module": attribution.module if attribution else None,
        "attribution_cause": attribution.cause if attribution else None,
        "attribution_step": attribution.step_id if attribution else None,
        "attribution_detail": attribution.detail if attribution else None,
        "trace": trace_href(unit), "error": error,
        "finished_at": datetime.now(timezone.utc), "result_version": RESULT_VERSION,
    }


@task(name="evaluate_question", retries=0, cache_policy=NO_CACHE,
      task_run_name="eval-{system}-s{seed}-{question_id}")
def evaluate_question(system: str, seed: int, question_id: str, record: dict, settings: Settings, run_id: str,
                      log_path: str | None, options: SystemOptions, base: str | None = None, memory: str = "run",
                      attempt: int = 1, planted: PriorRecord | None = None) -> UnitResult:
    """One question with one system and seed, scored and attributed."""
    log = RunLog(log_path, run_id=run_id, console=False, level=settings.logging.level) if log_path else None
    try:
        return run_unit(system, seed, record, settings, run_id=run_id, log=log, options=options, base=base,
                        memory=memory, attempt=attempt, planted=planted)
    finally:
        if log:
            log.close()


# --------------------------------------------------------------------------- the flow


@flow(name="evaluate", flow_run_name="evaluate-{benchmark}", retries=0, log_prints=False)
def evaluate(benchmark: str, data: str, systems: list[str], seeds: int, out: str, settings: Settings,
             limit: Optional[int] = None, adapter: Optional[str] = None, progress: bool = True,
             prefect_tasks: bool = True, attempts: int = 1, memory: Optional[list[str]] = None,
             plant: int = 0) -> EvalSummary:
    """Evaluate ``systems`` on ``benchmark`` over ``seeds`` seeds; write results, summary and report under ``out``.

    attempts: the same questions run K times in sequence; memory: modes compared (persistent, run, off),
    persistent memory kept per system and seed under ``out/memory``; plant: planted false accepts in that
    memory for the first N questions that can carry one (contamination recovery)."""
    options = SystemOptions(prefect_tasks=prefect_tasks, adapter=adapter)
    names = parse_systems(systems, options)  # refuses unknown or unavailable systems before anything runs
    modes = parse_memory(memory or ["run"])
    if attempts < 1:
        raise EvalError(f"--attempts must be at least 1, got {attempts}")
    plain = attempts == 1 and modes == ["run"] and not plant
    data_dir = resolve_data(benchmark, data, out)
    bench = load_questions(data_dir, limit)
    ensure_backends(bench, available=[])  # no web-search backend exists yet: Bamboogle is refused here
    base = with_data(settings, data_dir)
    seed_list = seed_values(base, seeds)
    store = ResultStore(out, s3_endpoint_url=settings.storage.s3_endpoint_url)
    claim_output(store, bench, base)
    log_dir = Path(out) / "logs" if store.local else Path("runs") / "logs" / safe_key(out)
    plants = plants_for(bench.questions, plant)
    variants = [(a, m, n) for a in range(1, attempts + 1) for m in modes for n in names]
    labels = list(dict.fromkeys(variant_label(n, m, a, plain) for a, m, n in variants))
    per_run: dict[tuple, Settings] = {}
    for s in seed_list:
        for a, m, n in variants:
            label = variant_label(n, m, a, plain)
            cfg = with_memory(system_settings(n, seeded(base, s)), m, memory_store_uri(out, n, s))
            per_run[(label, s)] = cfg
            store.write_text(f"settings/{label}.seed{s}.yaml", dump_settings(cfg))
            if plants and m == "persistent" and a == 1:  # the past false accepts, before the first attempt
                from infra.runtime.memory_store import MemoryStore

                MemoryStore(cfg.memory.store, s3_endpoint_url=cfg.storage.s3_endpoint_url).write(
                    "planted", [r.model_dump(mode="json") for r in plants.values()])
    total = len(variants) * len(seed_list) * len(bench.questions)
    done = existing = 0
    started = time.perf_counter()
    console = Console(stderr=True)
    with Progress(TextColumn("[bold]evaluate"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  TextColumn("{task.fields[correct]}"), TextColumn("{task.description}"), console=console,
                  disable=not progress, transient=False) as bar:
        job = bar.add_task("", total=total, correct="")
        right = 0
        for a in range(1, attempts + 1):  # attempts in sequence: attempt 2 finds what attempt 1 remembered
            for s in seed_list:
                for _, m, n in [v for v in variants if v[0] == a]:
                    label = variant_label(n, m, a, plain)
                    run_id = f"{safe_key(Path(out).name or 'eval')}-{label}-s{s}"
                    for record in bench.questions:
                        qid = str(record["id"])
                        unit = unit_key(label, s, qid)
                        if store.has_part("parts/results", unit):
                            existing += 1
                            bar.advance(job)
                            continue
                        bar.update(job, description=unit)
                        result = evaluate_question(label, s, qid, record, per_run[(label, s)], run_id,
                                                   str(log_dir / f"{label}.s{s}.jsonl"), options, base=n, memory=m,
                                                   attempt=a, planted=plants.get(qid))
                        parts = {"parts/steps": (result.steps, STEPS_EVAL_SCHEMA),
                                 "parts/evidence": (result.evidence, EVIDENCE_SCHEMA),
                                 "parts/judged": (result.judged, JUDGED_EVAL_SCHEMA),
                                 "parts/results": ([result.row], RESULTS_SCHEMA)}
                        for table in UNIT_TABLES:
                            store.write_part(table, unit, *parts[table])
                        done += 1
                        right += int(result.row["correct"])
                        bar.update(job, advance=1, correct=f"{right}/{done} right")
    wall_s = time.perf_counter() - started
    summary = finish(store, bench, labels, seed_list, data_dir, limit, wall_s, done, existing,
                     attempts=None if plain else {"attempts": attempts, "memory": modes, "planted": len(plants)})
    publish_artifact(bench.name, summary, store.location("report.html"))
    return EvalSummary(out=store.uri, benchmark=bench.name, systems=labels, seeds=seed_list,
                       questions=len(bench.questions), done=done, skipped_existing=existing, wall_s=wall_s,
                       summary=summary)


def _rows(store: ResultStore, table: str, schema: pa.Schema, keep: set[str]) -> pa.Table:
    got = store.read_table(f"parts/{table}")
    if got.num_rows == 0:
        return schema.empty_table()
    units = pa.array([unit_key(s, int(d), q) for s, d, q in zip(got["system"].to_pylist(), got["seed"].to_pylist(),
                                                                 got["question_id"].to_pylist())])
    mask = pa.array([u in keep for u in units.to_pylist()])
    return got.filter(mask).select(schema.names).cast(schema)


def _put(store: ResultStore, name: str, payload: bytes) -> None:
    """Write a file at the top of the result location (temporary name, then rename)."""
    final = f"{store.root}/{name}"
    tmp = f"{store.root}/.tmp-{uuid.uuid4().hex}"
    store.fs.pipe_file(tmp, payload)
    store.fs.mv(tmp, final)


def finish(store: ResultStore, bench: Benchmark, systems: list[str], seeds: list[int], data_dir: Path,
           limit: int | None, wall_s: float, done: int, existing: int, attempts: dict | None = None) -> dict[str, Any]:
    """Gather this evaluation's units into the top-level tables; write summary.json, report and traces."""
    from flows.report import write_report

    keep = {unit_key(n, s, str(q["id"])) for n in systems for s in seeds for q in bench.questions}
    tables = {"results": _rows(store, "results", RESULTS_SCHEMA, keep),
              "steps": _rows(store, "steps", STEPS_EVAL_SCHEMA, keep),
              "evidence": _rows(store, "evidence", EVIDENCE_SCHEMA, keep),
              "judged": _rows(store, "judged", JUDGED_EVAL_SCHEMA, keep)}
    for name, t in tables.items():
        buf = io.BytesIO()
        pq.write_table(t.sort_by([("system", "ascending"), ("seed", "ascending"), ("question_id", "ascending")]), buf)
        _put(store, f"{name}.parquet", buf.getvalue())
    rows = tables["results"].to_pylist()
    summary = summarize(rows, systems)
    summary["run"] = {
        "benchmark": bench.name, "data": str(data_dir), "systems": systems, "seeds": seeds, "limit": limit,
        "questions": len(bench.questions), "units": len(rows), "run_now": done, "done_earlier": existing,
        "wall_s_this_invocation": round(wall_s, 3),
        "wall_s_of_runs": round(sum(float(r["latency_s"]) for r in rows), 3),
        "written_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "settings": [f"settings/{n}.seed{s}.yaml" for n in systems for s in seeds],
        "files": {"results": "results.parquet", "steps": "steps.parquet", "evidence": "evidence.parquet",
                  "judged": "judged.parquet", "report": "report.html"},
    }
    if attempts is not None:
        summary["run"].update(attempts)
        summary["attempts"] = attempts_table(rows)
    store.write_text("summary.json", json.dumps(summary, indent=2, default=str) + "\n")
    write_report(store, rows, tables["steps"].to_pylist(), tables["evidence"].to_pylist(), summary)
    if attempts is not None:
        store.write_text("report.html", with_attempts_section(store.read_text("report.html"), summary["attempts"]))
    return summary


ATTEMPT_COLUMNS = [("system", "system"), ("memory", "memory"), ("attempt", "att."), ("questions", "n"),
                   ("success", "success"), ("tokens_per_question", "tok/q"), ("wrong_citations", "wrong cit."),
                   ("planted", "planted"), ("planted_read", "read"), ("planted_rejected", "rejected"),
                   ("planted_superseded", "supers."), ("planted_accepted", "accepted!"),
                   ("contamination_recovery_rate", "recovery"), ("planted_in_answer_rate", "in answer")]


def _cell(v: Any) -> str:
    if v is None:
        return "n/a"
    return f"{v:.2f}" if isinstance(v, float) else str(v)


def with_attempts_section(html: str, table: list[dict]) -> str:
    """report.html with the per-attempt table (memory modes, attempts, contamination recovery) on top."""
    import html as h

    head = "".join(f"<th>{h.escape(t)}</th>" for _, t in ATTEMPT_COLUMNS)
    body = "".join("<tr>" + "".join(f"<td>{h.escape(_cell(r[k]))}</td>" for k, _ in ATTEMPT_COLUMNS) + "</tr>" for r in table)
    section = ("<section id='attempts'><h2>Attempts and memory</h2><p>The same questions run in sequence; persistent "
               "memory keeps lessons and evidence across attempts (re-verified before use), off keeps none. Recovery "
               "rate: planted false accepts that a run read and rejected (or found already superseded) and kept out "
               "of its answer; n/a where no planted record was read.</p>"
               f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table></section>")
    at = html.find("<h2")
    return html[:at] + section + html[at:] if at >= 0 else html.replace("</body>", section + "</body>")


def publish_artifact(benchmark: str, summary: dict[str, Any], report: str) -> None:
    """The per-system table as a Prefect table artifact under a stable key (for people, in the UI)."""
    from prefect.artifacts import create_table_artifact
    from prefect.context import FlowRunContext

    if FlowRunContext.get() is None:
        return
    rows = []
    for name, m in summary["systems"].items():
        a, ci = m["accuracy"], m["accuracy"]["ci95"] or [None, None]
        rows.append({"system": name, "accuracy": a["mean"], "std": a["std"], "ci95_low": ci[0], "ci95_high": ci[1],
                     "tokens_per_question": m["tokens"]["per_question"], "latency_p50_s": m["latency_s"]["p50"],
                     "latency_p95_s": m["latency_s"]["p95"], "mean_iterations": m["mean_iterations"],
                     "wrong_tool_calls": m["wrong_tool_calls"], "missing_evidence": m["missing_evidence"],
                     "verifier_rejection_rate": m["verifier_rejection_rate"]})
    key = "evaluate-" + "".join(c if c.isalnum() else "-" for c in benchmark.lower())
    create_table_artifact(rows, key=key, description=f"Evaluation of {benchmark}; report: {report}")
    if summary.get("attempts"):
        create_table_artifact(summary["attempts"], key=f"{key}-attempts",
                              description=f"Per attempt and memory mode, with contamination recovery; report: {report}")
