"""The headline tables: direct / monolithic / modular / modular-nomem per benchmark, seeds that pool across sessions.

One benchmark's 50 questions x 3 seeds x 4 systems take hours on a CPU, longer than a session, so the work is
split into small, committed records that pool:

``run``
    evaluates one benchmark's first ``--questions`` questions with the table's systems for the given seeds,
    one result directory per seed (``<out>/<benchmark>/seed<K>``, resumable: a re-run skips finished units),
    the (system, seed) pairs shared among ``--workers`` processes; then ``record`` and ``pool``.
``record RUN_DIR...``
    turns an evaluation directory (finished or not) into compact records, one per (benchmark, system, seed):
    ``<records>/<benchmark>/<system>.seed<K>.json``, each question's outcome, cost, stop reason and failure
    attribution, and no dataset text (no question, gold or answer text; only the scorer's extracted value).
    Records merge: a question already recorded is kept as it was.
``pool``
    reads every record, refuses to mix measurements (other questions, other settings for a system), and writes
    ``<records>/summary.json`` and the tables between the markers of ``docs/results.md``. A (seed, question) counts
    only when every system of the table has it, so every comparison is paired. ``--beside NAME=DIR`` adds a variant
    (one system measured under other settings into its own records) beside each table, paired with every system.

    python -m flows.bench.tables run --benchmark gsm8k --seeds 0,1,2 --workers 2
    python -m flows.bench.tables record runs/tables/gsm8k/seed0
    python -m flows.bench.tables pool
"""

from __future__ import annotations

import argparse
import hashlib
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

SYSTEMS = ["direct", "monolithic", "modular", "modular-nomem"]
BENCHMARKS = {  # name -> what the table calls it and where its questions come from
    "gsm8k": "GSM8K (test split), python tool",
    "hotpotqa": "HotpotQA (dev, distractor setting: search over its own paragraphs)",
    "game24": "Game of 24, python tool",
    "world": "Synthetic world, test split (wording families never used in training), seed 1",
}
SHORT = {"gsm8k": "GSM8K", "hotpotqa": "HotpotQA", "game24": "Game of 24", "world": "world test"}
WORLD_SEED = 1  # the test world bench-train evaluates on (generate_world(seed=1, split="test"))
RECORD_FIELDS = ["question_id", "correct", "score", "extracted", "status", "stop_reason", "budget_limit", "iterations",
                 "n_citations", "tokens_total", "tokens_planner", "tokens_executor", "tokens_verifier",
                 "tokens_generator", "model_calls", "latency_s", "tool_ms", "tool_calls", "wrong_tool_calls",
                 "missing_evidence", "verifier_calls", "verifier_rejections", "attribution_module",
                 "attribution_cause", "wrong_citations", "error"]
BEGIN, END = "<!-- tables:begin (written by python -m flows.bench.tables pool) -->", "<!-- tables:end -->"
# The README's one-table summary (accuracy per system and benchmark), written by the same pool.
HEADLINE_BEGIN = "<!-- headline:begin (written by python -m flows.bench.tables pool --readme README.md) -->"
HEADLINE_END = "<!-- headline:end -->"


class TablesError(ValueError):
    """Input the tables cannot use; the message says which file and why."""


# --------------------------------------------------------------------------- record


def _sha(obj: Any) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True).encode()).hexdigest()


def comparable_settings(settings: dict[str, Any], corpus_sha: str | None) -> dict[str, Any]:
    """The settings a measurement depends on: without the seeds (a record is one seed), logging, storage, and
    where the corpus lies (its content's hash instead)."""
    s = json.loads(json.dumps(settings))
    for key in ("seed", "logging", "storage"):
        s.pop(key, None)
    for cfg in (s.get("models") or {}).values():
        if isinstance(cfg, dict):
            cfg.pop("seed", None)
    search = ((s.get("tools") or {}).get("search") or {})
    if "corpus" in search:
        search["corpus"] = corpus_sha
    return s


def _models(settings: dict[str, Any]) -> dict[str, str]:
    out = {}
    for role, cfg in (settings.get("models") or {}).items():
        if isinstance(cfg, dict):
            out[role] = str(cfg.get("model_path") or cfg.get("model") or cfg.get("backend"))
    return out


def record_run(run_dir: str | Path, records: str | Path) -> list[Path]:
    """Write (or extend) the records of every (system, seed) found in one evaluation directory."""
    import pyarrow.parquet as pq
    import yaml

    run = Path(run_dir)
    manifest_path = run / "data" / "manifest.json"
    if not (run / "eval.json").is_file():
        raise TablesError(f"{run}: not an evaluation directory (no eval.json)")
    if not manifest_path.is_file():
        raise TablesError(f"{run}: no prepared data (data/manifest.json); table runs prepare their data there")
    manifest = json.loads(manifest_path.read_text())
    benchmark = str(manifest.get("benchmark"))
    files = manifest.get("files") or {}
    parts = sorted((run / "parts" / "results").glob("*.parquet"))
    if not parts:
        raise TablesError(f"{run}: no finished question yet (parts/results is empty)")
    if not (run / "tables.json").is_file():
        raise TablesError(f"{run}: no tables.json (the code it ran); record runs made by `python -m flows.bench.tables run`")
    meta = json.loads((run / "tables.json").read_text())
    grouped: dict[tuple[str, int], list[dict]] = {}
    for part in parts:
        for row in pq.read_table(part).to_pylist():
            grouped.setdefault((str(row["system"]), int(row["seed"])), []).append(row)
    written = []
    for (system, seed), rows in sorted(grouped.items()):
        settings_file = run / "settings" / f"{system}.seed{seed}.yaml"
        if not settings_file.is_file():
            raise TablesError(f"{run}: {settings_file.name} is missing; its settings cannot be fingerprinted")
        settings = yaml.safe_load(settings_file.read_text())
        fingerprint = {"benchmark": benchmark, "questions_sha256": files.get("questions.jsonl"),
                       "settings_sha256": _sha(comparable_settings(settings, files.get("corpus.jsonl"))),
                       "code_sha256": meta.get("code_sha256"),
                       "models": _models(settings)}
        new = [{k: _plain(row.get(k)) for k in RECORD_FIELDS} | {"commit": meta.get("commit")} for row in rows]
        written.append(_merge(Path(records) / benchmark / f"{system}.seed{seed}.json",
                              {"benchmark": benchmark, "system": system, "seed": seed, "fingerprint": fingerprint},
                              new))
    return written


def _plain(value: Any) -> Any:
    if isinstance(value, float):
        return round(value, 4)
    if isinstance(value, str) and len(value) > 300:
        return value[:300]
    return value


def _merge(path: Path, head: dict[str, Any], rows: list[dict]) -> Path:
    """The record at `path` with `rows` added; a question already there keeps its first outcome."""
    if path.is_file():
        old = _read_record(path)
        if old["fingerprint"] != head["fingerprint"]:
            diff = [k for k in head["fingerprint"] if old["fingerprint"].get(k) != head["fingerprint"][k]]
            raise TablesError(f"{path}: recorded under a different {', '.join(diff)}; this run measures something "
                              "else (use another --records directory, or remove the old record on purpose)")
        have = {r["question_id"] for r in old["rows"]}
        rows = old["rows"] + [r for r in rows if r["question_id"] not in have]
    rows = sorted(rows, key=lambda r: r["question_id"])
    record = {**head, "written_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
              "commits": sorted({str(r.get("commit")) for r in rows}), "rows": rows}
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(record, indent=1) + "\n")
    tmp.replace(path)
    return path


def _read_record(path: Path) -> dict[str, Any]:
    try:
        record = json.loads(path.read_text())
        for key in ("benchmark", "system", "seed", "fingerprint", "rows"):
            record[key]  # noqa: B018 - presence check
        return record
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise TablesError(f"{path}: not a table record ({exc})") from None


# --------------------------------------------------------------------------- pool


def load_records(records: str | Path) -> dict[str, list[dict[str, Any]]]:
    """Every record under `records`, by benchmark; a benchmark whose records measure different things is refused."""
    root = Path(records)
    if not root.is_dir():
        raise TablesError(f"{root}: no records directory")
    by_bench: dict[str, list[dict[str, Any]]] = {}
    for path in sorted(root.glob("*/*.seed*.json")):
        record = _read_record(path)
        record["_path"] = str(path)
        by_bench.setdefault(record["benchmark"], []).append(record)
    for bench, recs in by_bench.items():
        for key, what in (("questions_sha256", "question files"),
                          ("code_sha256", "code (a file of flows.bench.tables.BEHAVIOUR_CODE changed between them)")):
            if len({r["fingerprint"].get(key) for r in recs}) > 1:
                raise TablesError(f"{bench}: records of different {what}; they do not pool: "
                                  f"{', '.join(r['_path'] for r in recs)}")
        for system in {r["system"] for r in recs}:
            own = [r for r in recs if r["system"] == system]
            if len({r["fingerprint"]["settings_sha256"] for r in own}) > 1:
                raise TablesError(f"{bench}/{system}: seeds recorded under different settings: "
                                  f"{', '.join(r['_path'] for r in own)}")
    return by_bench


def pool_benchmark(recs: list[dict[str, Any]], systems: list[str] | None = None) -> dict[str, Any]:
    """Every system's metrics over the (seed, question) units that all `systems` (default: those recorded, in the
    tables' order) finished, and the pairs."""
    from tasks.eval.metrics import summarize

    systems = systems or [n for n in SYSTEMS if any(r["system"] == n for r in recs)]
    have = {(r["system"], r["seed"]): {row["question_id"]: row for row in r["rows"]} for r in recs}
    seeds = sorted({r["seed"] for r in recs})
    complete = {s: sorted(set.intersection(*[set(have.get((n, s), {})) for n in systems])) for s in seeds}
    rows = [{**have[(n, s)][q], "system": n, "seed": s} for s in seeds for q in complete[s] for n in systems]
    summary = summarize(rows, systems)
    units = {s: len(q) for s, q in complete.items() if q}
    recorded = {f"{n}.seed{s}": len(have.get((n, s), {})) for s in seeds for n in systems}
    summary["pooled"] = {"seeds": sorted(units), "questions_per_seed": units, "recorded_per_system_seed": recorded,
                         "commits": sorted({c for r in recs for c in r.get("commits", [])}),
                         "models": recs[0]["fingerprint"]["models"] if recs else {}}
    return summary


def parse_beside(specs: list[str]) -> list[tuple[str, Path]]:
    """``NAME=DIR`` pairs: a variant of one table system, measured with other settings into its own records."""
    out = []
    for spec in specs:
        name, sep, where = spec.partition("=")
        name, where = name.strip(), where.strip()
        if not sep or not name or not where:
            raise TablesError(f"--beside takes NAME=DIR (e.g. direct-no-example=bench/tables-v2-variants/"
                              f"direct-no-example), got {spec!r}")
        if name in SYSTEMS or name in [n for n, _ in out]:
            raise TablesError(f"--beside {name}: the name is already a system of the table; give the variant its own")
        out.append((name, Path(where)))
    return out


def load_beside(name: str, where: Path, by_bench: dict[str, list[dict[str, Any]]]) -> dict[str, list[dict[str, Any]]]:
    """The variant's records per benchmark, renamed `name`: one system each, of the same code and questions as the
    table's records of that benchmark (a variant differs in its settings only)."""
    out = {}
    for bench, recs in load_records(where).items():
        systems = {r["system"] for r in recs}
        if len(systems) > 1:
            raise TablesError(f"--beside {name}: {where}/{bench} holds {', '.join(sorted(systems))}; a variant is one "
                              "system measured under other settings")
        table = by_bench.get(bench)
        if not table:
            continue  # nothing to pair with
        for key in ("code_sha256", "questions_sha256"):
            if recs[0]["fingerprint"].get(key) != table[0]["fingerprint"].get(key):
                raise TablesError(f"--beside {name}: {where}/{bench} was measured on other {key.split('_')[0]} than "
                                  "the table's records; only settings may differ")
        out[bench] = [{**r, "system": name} for r in recs]
    return out


def pool_beside(table: list[dict[str, Any]], variant: list[dict[str, Any]]) -> dict[str, Any]:
    """The variant's metrics and its paired differences with every table system, over the units they all share."""
    name = variant[0]["system"]
    systems = [name] + [n for n in SYSTEMS if any(r["system"] == n for r in table)]
    s = pool_benchmark(table + variant, systems)
    return {"system": s["systems"].get(name), "questions_per_seed": s["pooled"]["questions_per_seed"],
            "paired_differences": [d for d in s["paired_differences"] if d["a"] == name]}


def pool(records: str | Path, doc: str | Path | None, readme: str | Path | None = None,
         beside: list[str] = ()) -> dict[str, Any]:
    """Pool every benchmark's records; write ``<records>/summary.json``, the tables in `doc` and the headline table
    in `readme`. `beside` (NAME=DIR) adds variants, each paired with the table over the units they share."""
    by_bench = load_records(records)
    summary = {b: pool_benchmark(recs) for b, recs in sorted(by_bench.items())}
    for name, where in parse_beside(list(beside)):
        for bench, recs in load_beside(name, where, by_bench).items():
            summary[bench].setdefault("beside", {})[name] = pool_beside(by_bench[bench], recs)
    out = Path(records) / "summary.json"
    out.write_text(json.dumps(summary, indent=1, default=str) + "\n")
    if doc is not None:
        write_doc(Path(doc), render(summary))
    if readme is not None:
        write_doc(Path(readme), render_headline(summary), HEADLINE_BEGIN, HEADLINE_END)
    return summary


def _pct(v: float | None) -> str:
    return "-" if v is None else f"{100 * v:.1f}"


def _ci(ci: list[float] | None) -> str:
    return "-" if not ci else f"[{100 * ci[0]:.1f}, {100 * ci[1]:.1f}]"


def _excludes_zero(diff: dict[str, Any]) -> bool:
    """A paired difference whose 95 % interval lies wholly above or below zero."""
    ci = diff["ci95"]
    return bool(ci) and (ci[0] > 0 or ci[1] < 0)


def render(summary: dict[str, Any]) -> str:
    """One markdown section per benchmark: accuracy with intervals, cost, stops and failures, paired differences."""
    out = []
    for bench, s in summary.items():
        p = s["pooled"]
        n_units = sum(p["questions_per_seed"].values())
        out.append(f"### {BENCHMARKS.get(bench, bench)}\n")
        if not n_units:
            out.append("No (seed, question) finished by every system yet.\n")
            continue
        per_seed = ", ".join(f"seed {k}: {v}" for k, v in p["questions_per_seed"].items())
        out.append(f"{n_units} units ({per_seed} questions), every system on every unit; models: "
                   f"{', '.join(f'{r} {m}' for r, m in p['models'].items())}; commits "
                   f"{', '.join(c[:7] for c in p['commits'])}.\n")
        # a benchmark that scores partial credit (token F1 of a text answer) shows it beside the exact-match accuracy
        partial = any(abs((m.get("mean_score") or 0.0) - (m["accuracy"]["mean"] or 0.0)) > 1e-9
                      for m in s["systems"].values())
        out.append("| system | accuracy % | 95% CI | std over seeds |" + (" mean F1 % |" if partial else "")
                   + " tokens/q | s/q (mean) | iterations | verifier rejections |\n|---|---|---|---|"
                   + ("---|" if partial else "") + "---|---|---|---|")
        for name, m in s["systems"].items():
            a, rej = m["accuracy"], m["verifier_rejection_rate"]
            out.append(f"| {name} | {_pct(a['mean'])} | {_ci(a['ci95'])} | {_pct(a['std'])} | "
                       + (f"{_pct(m.get('mean_score'))} | " if partial else "")
                       + f"{m['tokens']['per_question']:.0f} | {m['latency_s']['mean']:.1f} | {m['mean_iterations']:.1f} | "
                       f"{'-' if rej is None else f'{100 * rej:.0f} %'} |")
        out.append("\n| paired difference (a - b) | points | 95% CI | a better / b better / ties |\n|---|---|---|---|")
        for d in s["paired_differences"]:
            mark = " **(excludes 0)**" if _excludes_zero(d) else ""
            out.append(f"| {d['a']} - {d['b']} | {_pct(d['mean_diff'])} | {_ci(d['ci95'])}{mark} | "
                       f"{d['a_better']} / {d['b_better']} / {d['ties']} |")
        out.append("\n| system | stop reasons | failures attributed to |\n|---|---|---|")
        for name, m in s["systems"].items():
            stops = ", ".join(f"{k} {v}" for k, v in m["stop_reasons"].items())
            failed = ", ".join(f"{k} {v}" for k, v in m["failure_attribution"].items() if v) or "-"
            out.append(f"| {name} | {stops} | {failed} |")
        out.append("")
        if s.get("beside"):
            out.append(render_beside(s["beside"], list(s["systems"])))
    return "\n".join(out)


def _signed(diff: dict[str, Any]) -> str:
    lo, hi = diff["ci95"] or (None, None)
    cell = (f"{100 * diff['mean_diff']:+.1f} [{100 * lo:+.1f}, {100 * hi:+.1f}] "
            f"({diff['a_better']} / {diff['b_better']})") if lo is not None else "-"
    return f"**{cell}**" if _excludes_zero(diff) else cell


def render_beside(beside: dict[str, Any], systems: list[str]) -> str:
    """Variants measured beside the table: accuracy, cost and the paired difference (variant - system, with
    variant better / system better) against each system, over the units the variant shares with all of them."""
    legend = ("Beside the table: variants with other settings, same code and questions. Each \"vs\" cell is variant - "
              "system in points, 95% CI, (variant better / system better), paired over the units the variant shares "
              "with every system; in bold where the interval excludes zero.\n")
    out = [legend,
           "| variant | units | accuracy % | 95% CI | tokens/q | s/q (mean) | "
           + " | ".join(f"vs {n}" for n in systems) + " |",
           "|---|---|---|---|---|---|" + "---|" * len(systems)]
    for name, v in beside.items():
        m, pairs = v["system"], {d["b"]: d for d in v["paired_differences"]}
        units = sum(v["questions_per_seed"].values())
        if not m or not units:
            out.append(f"| {name} | 0 | - | - | - | - |" + " - |" * len(systems))
            continue
        out.append(f"| {name} | {units} | {_pct(m['accuracy']['mean'])} | {_ci(m['accuracy']['ci95'])} | "
                   f"{m['tokens']['per_question']:.0f} | {m['latency_s']['mean']:.1f} | "
                   + " | ".join(_signed(pairs[n]) if n in pairs else "-" for n in systems) + " |")
    out.append("")
    return "\n".join(out)


def _accuracy_cell(metrics: dict[str, Any] | None) -> str:
    a = (metrics or {}).get("accuracy")
    return "-" if not a else f"{_pct(a['mean'])} % {_ci(a['ci95'])}"


def render_headline(summary: dict[str, Any]) -> str:
    """Accuracy per system (rows) and benchmark (columns), with the seeds each pooled and whether any paired
    difference excludes zero."""
    benches = [b for b, s in summary.items() if sum(s["pooled"]["questions_per_seed"].values())]
    if not benches:
        return "No benchmark has a (seed, question) finished by every system yet."
    out = ["| system | " + " | ".join(SHORT.get(b, b) for b in benches) + " |",
           "|---|" + "---|" * len(benches)]
    for name in SYSTEMS:
        cells = [_accuracy_cell(summary[b]["systems"].get(name)) for b in benches]
        out.append(f"| {name} | " + " | ".join(cells) + " |")
    for name in dict.fromkeys(v for b in benches for v in summary[b].get("beside", {})):
        cells = [_accuracy_cell((summary[b].get("beside", {}).get(name) or {}).get("system")) for b in benches]
        out.append(f"| {name} (beside) | " + " | ".join(cells) + " |")
    seeds = "; ".join(f"{SHORT.get(b, b)}: seeds "
                      f"{', '.join(str(k) for k in summary[b]['pooled']['questions_per_seed'])}" for b in benches)
    sure = [f"{b} {d['a']} - {d['b']}" for b in benches for d in summary[b]["paired_differences"] if _excludes_zero(d)]
    out.append(f"\nAccuracy with its 95 % interval; {seeds}. Paired differences whose interval excludes zero: "
               + (", ".join(sure) if sure else "none") + ".")
    return "\n".join(out)


def write_doc(doc: Path, tables: str, begin: str = BEGIN, end: str = END) -> None:
    """Replace what lies between the markers of `doc` (the rest is prose, kept)."""
    from flows.bench.marked import MarkersMissing, write_marked

    try:
        write_marked(doc, begin, end, tables, new_doc=f"# Results\n\n{begin}\n{end}\n")
    except MarkersMissing as exc:
        raise TablesError(str(exc)) from None


# --------------------------------------------------------------------------- run


# The source a table's numbers depend on: the loop, the modules, checks and scorers, the models, tools and data
# adapters, the settings' defaults and the evaluation of one unit. Records of different code do not pool. Left out:
# what no evaluated system runs (training, the Verifier's labeled-case builders and harvest).
BEHAVIOUR_CODE = ["tasks", "infra/models", "infra/tools", "infra/data", "infra/runtime/settings.py", "flows/research.py",
                  "flows/systems.py", "flows/evaluate.py"]
NOT_BEHAVIOUR = ["tasks/learn", "tasks/eval/harvest.py", "tasks/eval/verifier_cases.py", "tasks/eval/verifier_seeds.py"]


def code_sha256(root: str | Path | None = None) -> str:
    """sha256 over the behaviour code's .py files (relative path and bytes, in path order)."""
    top = Path(root) if root else Path(__file__).resolve().parents[2]
    digest = hashlib.sha256()
    for entry in BEHAVIOUR_CODE:
        path = top / entry
        files = sorted(path.rglob("*.py")) if path.is_dir() else [path]
        for f in files:
            rel = f.relative_to(top).as_posix()
            if any(rel == x or rel.startswith(x + "/") for x in NOT_BEHAVIOUR):
                continue
            digest.update(str(f.relative_to(top)).encode() + b"\0" + f.read_bytes() + b"\0")
    return digest.hexdigest()


def _commit() -> dict[str, Any]:
    here = Path(__file__).resolve().parent
    try:
        sha = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10, cwd=here,
                             check=True).stdout.strip()
        dirty = bool(subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], capture_output=True,
                                    text=True, timeout=10, cwd=here).stdout.strip())
        return {"commit": sha + ("-dirty" if dirty else ""), "dirty": dirty, "code_sha256": code_sha256()}
    except (OSError, subprocess.SubprocessError):
        return {"commit": None, "dirty": None, "code_sha256": code_sha256()}


def prepare_data(benchmark: str, datasets: str | None, out: Path) -> Path:
    """The prepared benchmark a table runs on, under `out/data` (the whole benchmark; --questions takes a prefix)."""
    from infra.data.benchmarks import prepare

    target = out / "data"
    if (target / "manifest.json").is_file():
        return target
    if benchmark == "world":
        from infra.data.world import generate_world, write_world

        raw = out / "world-test"
        if not (raw / "questions.jsonl").is_file():
            write_world(generate_world(seed=WORLD_SEED, n_questions=50, split="test"), raw)
        return prepare("world", raw, target)
    if not datasets or not Path(datasets).is_dir():
        raise TablesError(f"{benchmark} needs the datasets directory: set AGENTFLOW_DATASETS or pass --data")
    return prepare(benchmark, Path(datasets), target)


def _share(benchmark: str, jobs: list[tuple[int, str]], out: str, questions: int, config: str | None,
           overrides: list[str], prefect_home: str | None) -> None:
    """A worker's share of (seed, system) pairs, run one after another."""
    import os

    if prefect_home:
        os.environ["PREFECT_HOME"] = prefect_home
    from flows.cli.startup import prepare_env

    prepare_env()
    from flows.evaluate import evaluate
    from infra.runtime.settings import load_settings

    for seed, system in jobs:
        settings = load_settings(config, [*overrides, f"seed={seed}"])
        evaluate(benchmark, f"{out}/seed{seed}/data", [system], 1, f"{out}/seed{seed}", settings, limit=questions, progress=False,
                 prefect_tasks=False)


# Seconds per GSM8K question on this 2-core CPU with the default model (docs/inference.md, docs/verifier-eval.md):
# what deal() balances.
COST = {"modular": 55.0, "modular-nomem": 55.0, "monolithic": 21.0, "direct": 4.0}


def merge_seed(seed_dir: Path, seed: int, questions: int, systems: list[str] = SYSTEMS) -> None:
    """Gather every system's finished units of one seed into the run's top-level tables (results, steps, evidence,
    judged, summary, report). Each worker's evaluate call merges only its own system, so the last to finish would
    leave the others out of judged.parquet, which harvest reads."""
    from flows.evaluate import finish, load_questions
    from infra.runtime.storage import ResultStore

    store = ResultStore(str(seed_dir))
    bench = load_questions(seed_dir / "data", questions)
    started = [n for n in systems if any((seed_dir / "parts" / "results").glob(f"part-{n}.s{seed}.*.parquet"))]
    finish(store, bench, started, [seed], seed_dir / "data", questions, 0.0, 0, 0)


def deal(jobs: list[tuple[int, str]], workers: int) -> list[list[tuple[int, str]]]:
    """(seed, system) jobs in `workers` shares of about equal expected time: longest first, to the lightest share."""
    shares: list[list[tuple[int, str]]] = [[] for _ in range(min(workers, len(jobs)))]
    load = [0.0] * len(shares)
    for job in sorted(jobs, key=lambda j: (-COST.get(j[1], 30.0), j[0], j[1])):
        k = load.index(min(load))
        shares[k].append(job)
        load[k] += COST.get(job[1], 30.0)
    return shares


def run(benchmark: str, seeds: list[int], *, out: str, records: str, doc: str | None, questions: int, workers: int,
        datasets: str | None, config: str | None = None, overrides: list[str] = (),
        systems: list[str] = SYSTEMS, readme: str | None = None, beside: list[str] = ()) -> dict[str, Any]:
    """Evaluate `systems` on `benchmark`'s first `questions` questions for each seed, in `workers` processes; then
    record every seed's finished questions and pool all records."""
    import multiprocessing

    from infra.runtime.settings import ConfigError, load_settings

    try:
        load_settings(config, list(overrides))  # a bad configuration fails here, before any process starts
    except ConfigError as exc:
        raise TablesError(str(exc)) from None

    if benchmark not in BENCHMARKS:
        raise TablesError(f"unknown benchmark {benchmark!r}; the tables cover {', '.join(BENCHMARKS)}")
    base = Path(out) / benchmark
    meta = _commit()
    for seed in seeds:
        d = base / f"seed{seed}"
        d.mkdir(parents=True, exist_ok=True)
        prepare_data(benchmark, datasets, d)
        if not (d / "tables.json").is_file():  # the code a run started with; a resumed run keeps it
            (d / "tables.json").write_text(json.dumps({**meta, "started_at": time.strftime("%Y-%m-%dT%H:%M:%SZ")}) + "\n")
    shares = deal([(seed, n) for seed in seeds for n in systems], workers)
    spawn = multiprocessing.get_context("spawn")  # a fresh interpreter: no inherited Prefect, Ray or model state
    procs = [spawn.Process(target=_share, name=f"tables-share-{k}",
                           args=(benchmark, share, str(base), questions, config, list(overrides), str(base / f".prefect-{k}") if k else None))
             for k, share in enumerate(shares)]
    for proc in procs:
        proc.start()
    for proc in procs:
        proc.join()
    for seed in seeds:
        if any((base / f"seed{seed}" / "parts" / "results").glob("*.parquet")):
            merge_seed(base / f"seed{seed}", seed, questions, systems)
            record_run(base / f"seed{seed}", records)
    failed = [p.name for p in procs if p.exitcode != 0]
    if failed:
        raise TablesError(f"{', '.join(failed)} failed; finished questions are recorded; run the same command to resume")
    return pool(records, doc, readme, beside)


def main(argv: list[str] | None = None) -> int:
    import os

    p = argparse.ArgumentParser(prog="python -m flows.bench.tables", description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="command", required=True)
    r = sub.add_parser("run", help="evaluate a benchmark for the tables, then record and pool")
    r.add_argument("--benchmark", required=True, choices=list(BENCHMARKS))
    r.add_argument("--seeds", default="0", help="comma-separated seeds, e.g. 0,1,2")
    r.add_argument("--questions", type=int, default=50, help="the benchmark's first N questions")
    r.add_argument("--workers", type=int, default=2, help="processes sharing the (seed, system) pairs")
    r.add_argument("--out", default="runs/tables", help="evaluation directories: OUT/<benchmark>/seed<K>")
    r.add_argument("--data", default=os.environ.get("AGENTFLOW_DATASETS"), help="datasets root (AGENTFLOW_DATASETS)")
    r.add_argument("--config", default=None, help="run configuration (YAML/JSON), the same for every system")
    r.add_argument("--set", dest="overrides", action="append", default=[], help="section.key=value (repeatable)")
    r.add_argument("--systems", default=",".join(SYSTEMS),
                   help="comma-separated systems (a variant measured beside the tables: give it its own --records)")
    rec = sub.add_parser("record", help="compact records from evaluation directories")
    rec.add_argument("runs", nargs="+")
    po = sub.add_parser("pool", help="pool the records into summary.json and the docs tables")
    for q in (r, rec, po):
        q.add_argument("--records", default="bench/tables", help="the committed records")
    for q in (r, po):
        q.add_argument("--doc", default="docs/results.md", help="the document whose marked section holds the tables")
        q.add_argument("--readme", default=None, help="also write the headline table in this file's marked section "
                                                      "(README.md)")
        q.add_argument("--beside", action="append", default=[], metavar="NAME=DIR",
                       help="a variant's records (one system, other settings) pooled beside the tables (repeatable)")
    a = p.parse_args(argv)
    try:
        if a.command != "record":
            parse_beside(a.beside)  # a bad --beside fails now, not after the run
        if a.command == "record":
            for run_dir in a.runs:
                for path in record_run(run_dir, a.records):
                    print(f"recorded {path}")
            return 0
        if a.command == "run":
            try:
                seeds = sorted({int(x) for x in a.seeds.split(",") if x.strip()})
            except ValueError:
                raise TablesError(f"--seeds takes comma-separated integers, got {a.seeds!r}") from None
            if not seeds or a.questions < 1 or a.workers < 1:
                raise TablesError("--seeds needs at least one seed; --questions and --workers at least 1")
            systems = [x.strip() for x in a.systems.split(",") if x.strip()]
            unknown = sorted(set(systems) - set(SYSTEMS))
            if unknown or not systems:
                raise TablesError(f"--systems: unknown {unknown or 'none given'}; the tables' systems are {', '.join(SYSTEMS)}")
            summary = run(a.benchmark, seeds, out=a.out, records=a.records, doc=a.doc, questions=a.questions,
                          workers=a.workers, datasets=a.data, config=a.config, overrides=a.overrides,
                          systems=systems, readme=a.readme, beside=a.beside)
        else:
            summary = pool(a.records, a.doc, a.readme, a.beside)
    except TablesError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(render(summary))
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
