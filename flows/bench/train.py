"""`make bench-train`: does Flow-GRPO help? Train on the world's train split, evaluate on its test split.

Per training seed: train the Planner adapter on the synthetic world's train split (wording families
direct/imperative/report) with the deterministic Verifier as the only judge inside the training
reward; then evaluate modular-trained, modular-base, modular and monolithic on the test split
(unseen families polite/briefing, other entities) under the SAME budget and tools but a DIFFERENT
judge configuration: `verifier.mode=hybrid` with the embedded model as LLM judge. The score is the
world's mechanical scorer in both cases. ``modular-base`` (the same transformers Planner with the
adapter off) is the control that separates the effect of training from the change of backend.

Writes ``<out>/bench_train.json``: per seed and system accuracy, training time per step and peak
RSS; pooled over seeds, each system's accuracy and the paired differences (trained - base,
trained - modular, ...) with 95% bootstrap intervals over questions, and whether the issue's target
is met. Every training and evaluation directory stays under ``<out>``. Re-running the same command
resumes: training from its last checkpoint (every ``--checkpoint-every`` steps and after the last),
each evaluation from its finished units. The three systems that never read the adapter do not depend on the
training seed (one evaluation seed, same test split): a seed evaluated after another in the same ``<out>``, with
the same code and settings, copies their units and runs modular-trained alone (``untrained_from`` in its record).

One seed took about 2 h 10 min with the 0.5B on 2 CPU cores with --workers 2 --eval-workers 2 (figures in
docs/training.md), so the seeds may run apart (other sessions, other machines):
``--only-seeds 1`` runs seed 1 alone. After every seed, ``<out>/records/seed<K>.json`` holds its compact
record (configuration, commit, accuracy, training time, and each question's 0/1 outcome per system; the
world is generated, so nothing in it comes from a dataset). The pooled figures use every record in
``<out>/records`` and in ``--records DIR``; records of another configuration are refused, and the target
counts as met only when all ``--seeds`` seeds are pooled.

    python -m flows.bench.train --out bench-train --seeds 3 --steps 20 --train-questions 40 --test-questions 30
    python -m flows.bench.train --out bench-train --seeds 3 --only-seeds 2 --workers 2 --eval-workers 2 \
        --set train.learning_rate=1e-4 --records bench/train-claim-qwen
"""

from __future__ import annotations

import argparse
import json
import subprocess
import time
from pathlib import Path
from typing import Any

# What must be equal for seeds to be pooled: the measurement's own configuration, not how it was run.
COMPARABLE = ("steps", "questions_per_step", "group_size", "train_questions", "test_questions", "max_steps", "overrides",
              "models", "training")
# How the Planner learns, resolved: a changed default (the reward's terms, the learning rate) must not pool silently.
LEARNING = ("temperature", "template_fields", "advantage_scale", "learning_rate", "weight_decay", "max_grad_norm",
            "epochs_per_batch", "clip_low", "clip_high", "kl_coef", "lora", "reward")


def resolved_models(overrides: list[str]) -> dict[str, str]:
    """The models a seed is measured with (the Planner's base, the Generator, the evaluation's judge), after the
    overrides: a record is comparable only with records of the same models, whatever the defaults were then."""
    from infra.models import registry
    from infra.runtime.settings import load_settings

    s = load_settings(None, overrides)
    base = s.train.base_model or registry.DEFAULT_EMBEDDED
    return {"planner_base": base, "generator": s.models.generator.model_path or s.models.generator.model,
            "judge": s.models.generator.model}


def resolved_training(overrides: list[str]) -> dict[str, Any]:
    """The learning configuration a seed trains with, after the overrides (the train section less how it is run)."""
    from infra.runtime.settings import load_settings

    return load_settings(None, overrides).train.model_dump(mode="json", include=set(LEARNING))


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default="bench-train")
    p.add_argument("--seeds", type=int, default=3)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--questions-per-step", type=int, default=2)
    p.add_argument("--group-size", type=int, default=4)
    p.add_argument("--train-questions", type=int, default=40)
    p.add_argument("--test-questions", type=int, default=30)
    p.add_argument("--workers", type=int, default=1, help="rollout workers (Ray actors) during training")
    p.add_argument("--eval-workers", type=int, default=1,
                   help="processes sharing the evaluation's systems (2 on 2 cores: about half the evaluation time)")
    p.add_argument("--max-steps", type=int, default=None,
                   help="budget.max_steps (Planner turns) for training and evaluation (default: the configuration's, "
                   "as in the pilot sweep)")
    p.add_argument("--checkpoint-every", type=int, default=5, help="an interrupted bench resumes from the last checkpoint")
    p.add_argument("--set", dest="overrides", action="append", default=[], help="section.key=value for every run")
    p.add_argument("--only-seeds", default=None, help="comma-separated training seeds to run now (default: 0..seeds-1)")
    p.add_argument("--records", default=None, help="a directory of seed records from earlier runs, pooled with this one's")
    a = p.parse_args(argv)
    run_seeds = _seed_list(a.only_seeds, a.seeds)
    commit = _commit()  # the code that runs, read now: the tree may move on during hours of training
    from flows.cli.startup import prepare_env

    prepare_env()  # the CLI's local, quiet, offline Prefect/Ray defaults, before they are imported

    import pyarrow.parquet as pq

    from flows.train import run_training
    from infra.data.world import generate_world, write_world
    from infra.models import clear_backend_cache
    from infra.models.hf_policy import forget_policies
    from infra.runtime.services import shutdown_ray
    from infra.runtime.settings import load_settings

    if a.workers < 1 or a.eval_workers < 1:
        raise SystemExit("--workers and --eval-workers must be at least 1")
    out = Path(a.out).resolve()
    earlier = Path(a.records) if a.records else None
    if a.max_steps is None:  # recorded resolved: records pool only at equal budgets
        a.max_steps = load_settings(None, a.overrides).budget.max_steps
    args = vars(a) | {"models": resolved_models(a.overrides), "training": resolved_training(a.overrides)}
    load_records(out / "records", earlier, args)  # refuse a mismatch before hours of work
    out.mkdir(parents=True, exist_ok=True)
    train_dir, test_dir = out / "world-train", out / "world-test"
    write_world(generate_world(seed=0, n_questions=a.train_questions, split="train"), train_dir)
    write_world(generate_world(seed=1, n_questions=a.test_questions, split="test"), test_dir)
    from infra.data.benchmarks import prepare

    eval_data = prepare("world", test_dir, out / "world-test-prepared")  # what `agentflow eval` reads
    # The pilot's settings (flows/bench/sweep.py trains at the configuration's defaults): the claim must measure the
    # configuration the pilot chose, so no token caps here; a --set still applies to both.
    common = {"budget.max_steps": a.max_steps}
    report: dict = {"config": args, "seeds": {}, "judges": {
        "train": "verifier.mode=deterministic (checks only); reward = world scorer + safe-stop/tool-cost/malformed terms",
        "eval": f"verifier.mode=hybrid with models.verifier = embedded {args['models']['judge']} (LLM judge); "
                "score = world scorer"}}
    for seed in run_seeds:
        train_settings = load_settings(None, a.overrides, **common, **{
            "verifier.mode": "deterministic", "train.train_questions": str(train_dir),
            "train.val_questions": str(test_dir), "train.steps": a.steps, "train.seed": seed,
            "train.questions_per_step": a.questions_per_step, "train.group_size": a.group_size,
            "train.workers": a.workers, "train.eval_every": 0, "train.checkpoint_every": max(1, min(a.checkpoint_every, a.steps))})
        clear_backend_cache()
        t0 = time.perf_counter()
        try:
            summary = run_training(train_settings, str(out / f"train-seed{seed}"), resume=True,
                                   log_dir=str(out / "logs"))
        finally:
            shutdown_ray()
        train_s = time.perf_counter() - t0
        adapter = str(out / f"train-seed{seed}" / "checkpoints" / f"step-{a.steps:06d}" / "adapter")
        eval_settings = load_settings(None, a.overrides, **common, **{
            "verifier.mode": "hybrid", "models.verifier": {"backend": "embedded", "model": args["models"]["judge"]}})
        clear_backend_cache()
        forget_policies()  # with workers=0 the learner is registered as the adapter-less policy: not the base
        eval_dir = out / f"eval-seed{seed}"
        reused = reuse_untrained(out, eval_dir, fingerprint_of(str(eval_data), eval_settings))
        t0 = time.perf_counter()
        ev = evaluate_split("world", str(eval_data), SYSTEMS, str(eval_dir), eval_settings,
                            adapter=adapter, workers=a.eval_workers)
        eval_s = time.perf_counter() - t0
        summary_json = json.loads((eval_dir / "summary.json").read_text())
        report["seeds"][seed] = {
            "accuracy": {name: m["accuracy"]["mean"] for name, m in summary_json["systems"].items()},
            "train_s": round(sum(r["wall_s"] for r in summary.metrics), 1),  # the steps' own time: resume-proof
            "train_wall_this_run_s": round(train_s, 1),  # incl. model loading; a resumed run only its share
            "step_s": [round(r["wall_s"], 1) for r in summary.metrics],
            "mean_reward": [round(r["mean_reward"], 3) for r in summary.metrics],
            "zero_signal_groups": [r["zero_signal_groups"] for r in summary.metrics],
            "rss_mb": max((r["rss_mb"] for r in summary.metrics), default=None),
            "eval_wall_this_run_s": round(eval_s, 1), "eval_workers": a.eval_workers, "untrained_from": reused,
            "eval": str(getattr(ev, "out", eval_dir)),
        }
        results = pq.read_table(eval_dir / "results.parquet").to_pylist()
        write_record(out / "records", seed_record(seed, args, report["seeds"][seed], results, commit=commit))
        (out / "bench_train.json").write_text(json.dumps(report, indent=2, default=str))
    records = load_records(out / "records", earlier, args)  # again: now with this run's seeds
    report.update(pool(records, a.seeds))
    (out / "bench_train.json").write_text(json.dumps(report, indent=2, default=str))
    print(json.dumps({"mean_accuracy": report["mean_accuracy"], "paired": report["paired"], "target": report["target"]},
                     indent=2))
    return report


SYSTEMS = ["modular-trained", "modular-base", "modular", "monolithic"]
# The systems that never read the adapter. Every seed evaluates them at the same evaluation seed on the same test
# split, so with the same code and settings their units are the same computation in every seed (the SmolLM2
# claim's three seeds recorded identical outcomes for all three): run once per --out, copied to the other seeds.
UNTRAINED = ("modular-base", "modular", "monolithic")


def fingerprint_of(data: str, settings: Any) -> dict[str, str]:
    """The fingerprint `evaluate` claims its --out with (questions and configuration), plus the behaviour code's."""
    from flows.bench.tables import code_sha256
    from flows.evaluate import fingerprint, load_questions, with_data

    return fingerprint(load_questions(Path(data), None), with_data(settings, Path(data))) | {
        "code_sha256": code_sha256()}


def reuse_untrained(out: Path, eval_dir: Path, mine: dict[str, str]) -> str | None:
    """Copy the untrained systems' finished units into this seed's evaluation from another seed's evaluation in
    `out` that ran with the same fingerprint (`reuse.json`, written here before the first unit); returns the
    source's name, or None when there is none (then this seed runs them itself)."""
    import shutil

    from flows.evaluate import UNIT_TABLES, unit_system

    eval_dir.mkdir(parents=True, exist_ok=True)
    own = eval_dir / "reuse.json"
    if own.is_file() and json.loads(own.read_text()) != mine:
        return None  # an evaluation begun under other code or settings: resumed as it is, nothing mixed in
    own.write_text(json.dumps(mine, indent=1) + "\n")
    for source in sorted(out.glob("eval-seed*")):
        if source == eval_dir or not (source / "reuse.json").is_file():
            continue
        if json.loads((source / "reuse.json").read_text()) != mine:
            continue
        units = [p.name for p in (source / "parts/results").glob("part-*.parquet") if unit_system(p.name) in UNTRAINED]
        for table in UNIT_TABLES:
            (eval_dir / table).mkdir(parents=True, exist_ok=True)
            for name in units:
                if (source / table / name).is_file() and not (eval_dir / table / name).exists():
                    shutil.copy2(source / table / name, eval_dir / table / name)
        if units:
            return source.name
    return None


def evaluate_split(benchmark: str, data: str, systems: list[str], out: str, settings: Any, *,
                   adapter: str | None, workers: int) -> Any:
    """Evaluate `systems` (one seed) in up to `workers` processes, each running a share of the systems into the
    same result directory, then gather every unit into one summary. The evaluation loop is serial and the
    embedded model uses one thread, so a second process uses the second core. Each unit is seeded and written
    on its own, so the units are those of a serial run; a failed share is resumed by running the command again."""
    import multiprocessing

    from flows.evaluate import evaluate

    shares = [systems[i::workers] for i in range(min(workers, len(systems)))]
    spawn = multiprocessing.get_context("spawn")  # a fresh interpreter: no inherited Prefect, Ray or model state
    others = [(spawn.Process(target=_evaluate_share, name=f"eval-share-{k}",
                             args=(benchmark, data, share, out, settings, adapter, str(Path(out) / f".prefect-{k}"))),
               share) for k, share in enumerate(shares[1:], 1)]
    for proc, _ in others:
        proc.start()
    try:
        if others:
            evaluate(benchmark, data, shares[0], 1, out, settings, adapter=adapter, progress=False,
                     prefect_tasks=False)
    finally:
        for proc, _ in others:
            proc.join()
    failed = [f"{','.join(share)} (exit {proc.exitcode})" for proc, share in others if proc.exitcode != 0]
    if failed:
        raise RuntimeError(f"evaluation share {'; '.join(failed)} failed; its finished units are kept, "
                           "run the same command again to resume")
    return evaluate(benchmark, data, systems, 1, out, settings, adapter=adapter, progress=False, prefect_tasks=False)


def _evaluate_share(benchmark: str, data: str, systems: list[str], out: str, settings: Any, adapter: str | None,
                    prefect_home: str) -> None:
    """A share of the evaluation in its own process, with its own Prefect home (one SQLite database each)."""
    import os

    os.environ["PREFECT_HOME"] = prefect_home
    from flows.cli.startup import prepare_env

    prepare_env()
    from flows.evaluate import evaluate

    evaluate(benchmark, data, systems, 1, out, settings, adapter=adapter, progress=False, prefect_tasks=False)


def _seed_list(only: str | None, seeds: int) -> list[int]:
    if only is None:
        return list(range(seeds))
    try:
        chosen = sorted({int(x) for x in only.split(",") if x.strip()})
    except ValueError:
        raise SystemExit(f"--only-seeds takes comma-separated integers, got {only!r}") from None
    if not chosen or any(not 0 <= k < seeds for k in chosen):
        raise SystemExit(f"--only-seeds {only!r}: each seed must be in 0..{seeds - 1} (--seeds {seeds})")
    return chosen


def _commit() -> str | None:
    try:
        return subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10,
                              cwd=Path(__file__).resolve().parent, check=True).stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        return None


def seed_record(seed: int, args: dict[str, Any], seed_report: dict[str, Any], results: list[dict], *,
                commit: str | None) -> dict[str, Any]:
    """One training seed's compact, self-describing record: enough to pool it with seeds run elsewhere. `commit` is
    the one the run started at (None: unknown)."""
    return {
        "seed": seed,
        "commit": commit,
        "config": {k: args[k] for k in COMPARABLE},
        "written_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        **{k: seed_report[k] for k in ("accuracy", "train_s", "step_s", "mean_reward", "zero_signal_groups", "rss_mb")},
        **{k: seed_report.get(k) for k in ("eval_wall_this_run_s", "eval_workers", "untrained_from")},  # how it ran
        "outcomes": [{"system": r["system"], "question_id": str(r["question_id"]), "correct": bool(r["correct"])}
                     for r in results if r["system"] in SYSTEMS],
    }


def write_record(directory: Path, record: dict[str, Any]) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"seed{record['seed']}.json"
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(record, indent=1) + "\n")
    tmp.replace(path)
    return path


def load_records(own: Path, extra: Path | None, args: dict[str, Any]) -> list[dict[str, Any]]:
    """Every seed record in `own` and `extra`; a record of another configuration, or a seed found twice with
    different outcomes, is an error (pooling them would mix two measurements)."""
    if extra is not None and not extra.is_dir():
        raise SystemExit(f"--records {str(extra)!r} is not a directory of seed records")
    wanted = {k: args[k] for k in COMPARABLE}
    by_seed: dict[int, dict[str, Any]] = {}
    for directory in [d for d in (own, extra) if d is not None and d.is_dir()]:
        for path in sorted(directory.glob("seed*.json")):
            try:
                record = json.loads(path.read_text())
                seed, config, outcomes = int(record["seed"]), record["config"], record["outcomes"]
            except (OSError, ValueError, KeyError, TypeError) as exc:
                raise SystemExit(f"{path}: not a seed record ({exc})") from None
            if config != wanted:
                diff = {k: (config.get(k), wanted[k]) for k in wanted if config.get(k) != wanted[k]}
                raise SystemExit(f"{path}: recorded under another configuration (recorded, now): {diff}")
            if seed in by_seed and by_seed[seed]["outcomes"] != outcomes:
                raise SystemExit(f"{path}: seed {seed} is recorded twice with different outcomes")
            by_seed.setdefault(seed, record)
    return [by_seed[k] for k in sorted(by_seed)]


def pool(records: list[dict[str, Any]], seeds_wanted: int) -> dict[str, Any]:
    """Accuracy per system over the pooled seeds and the paired differences, with the issue's target."""
    from tasks.eval.metrics import accuracy_stats, paired_difference

    rows: dict[str, list[dict]] = {name: [] for name in SYSTEMS}  # seed = training seed
    for record in records:
        for o in record["outcomes"]:
            rows[o["system"]].append({**o, "seed": record["seed"]})
    out: dict[str, Any] = {"pooled_seeds": [r["seed"] for r in records],
                           "pooled_commits": sorted({str(r.get("commit")) for r in records})}
    out["accuracy"] = {name: accuracy_stats(r) for name, r in rows.items()}
    out["mean_accuracy"] = {name: stats["mean"] for name, stats in out["accuracy"].items()}
    out["paired"] = {f"{x} - {y}": paired_difference(rows[x], rows[y])
                     for x, y in (("modular-trained", "modular-base"), ("modular-trained", "modular"),
                                  ("modular-trained", "monolithic"), ("modular-base", "modular"))}
    claim = out["paired"]["modular-trained - modular"]
    out["target"] = {"wanted": "modular-trained >= modular + 0.10, 95% interval of the paired difference above 0, "
                               f"{seeds_wanted} seeds",
                     "seeds_pooled": len(records),
                     "met": bool(len(records) >= seeds_wanted and claim["mean_diff"] is not None
                                 and claim["mean_diff"] >= 0.10 and claim["ci95"] and claim["ci95"][0] > 0)}
    return out


if __name__ == "__main__":  # pragma: no cover
    main()
