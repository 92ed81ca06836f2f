"""`agentflow verifier-eval build|run`: build a labeled set of verification cases and measure a Verifier on it.

`build` turns real benchmark files (HotpotQA and MuSiQue paragraphs, GSM8K worked solutions) and a
synthetic world (infra.data.world) into correct steps, then perturbs them: one JSON case a line, in the
seven categories of CATEGORIES (tasks.eval.verifier_cases). `run` verifies every case with a deterministic,
llm or hybrid Verifier (flows.verifier_eval) and reports false accepts and false rejects overall and per
category, the confusion matrix, mean latency and model calls per case. The case format is documented in
docs/verifier-eval.md.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Optional

import typer
from rich.console import Console

from flows.cli.startup import command_group, console, err_console, fail
from flows.verifier_eval import report_tables, run_cases, summarize
from tasks.eval.verifier_cases import build_cases, read_cases, write_cases
from tasks.eval.verifier_seeds import CATEGORIES, BuildError, default_datasets_dir

verifier_eval_app = command_group("Labeled verification cases: build them from benchmark files, measure a Verifier on them.")
_wide = Console(soft_wrap=True, width=150)  # the report's tables are wider than a default terminal

@verifier_eval_app.command("build")
def build_cmd(
    out: Path = typer.Option(..., "--out", help="Where the labeled cases go (JSONL, one case a line)."),
    from_: list[Path] = typer.Option([], "--from", help="A datasets directory (hotpotqa/, musique/, gsm8k/) or one benchmark's "
                                     "folder; repeatable. Default: $AGENTFLOW_DATASETS or ../shared/datasets."),
    per_category: int = typer.Option(60, min=1, help="Cases per category (7 categories)."),
    seed: int = typer.Option(0, help="Random seed: same files and options, same cases."),
    world: bool = typer.Option(True, "--world/--no-world", help="Also draw cases from a synthetic world (infra.data.world)."),
    world_questions: int = typer.Option(300, min=20, help="Questions in that world."),
) -> None:
    """Build a labeled verification set by taking correct steps and perturbing them."""
    dirs = list(from_) or [default_datasets_dir()]
    try:
        cases = build_cases(dirs, per_category=per_category, seed=seed, world=world, world_questions=world_questions)
    except BuildError as exc:
        fail(str(exc))
    write_cases(cases, out)
    counts = Counter(c["category"] for c in cases)
    sources = Counter(c["source"] for c in cases)
    console.print(f"wrote {len(cases)} cases to {out}")
    console.print("per category: " + ", ".join(f"{c}={counts[c]}" for c in CATEGORIES))
    console.print("per source:   " + ", ".join(f"{s}={n}" for s, n in sorted(sources.items())))
    short = [c for c in CATEGORIES if counts[c] < per_category]
    if short:
        err_console.print(f"note: fewer than {per_category} cases in {', '.join(short)} (not enough usable seeds)")


@verifier_eval_app.command("harvest")
def harvest_cmd(
    runs: list[Path] = typer.Argument(..., help="Evaluation directories (`agentflow eval --out`) or batch run "
                                      "directories (<batch --out>/<run id>), with gold answers."),
    out: Path = typer.Option(..., "--out", help="Where the labeled cases go (JSONL, one case a line)."),
    with_rejected: bool = typer.Option(False, "--with-rejected", help="Label the steps the run's Verifier rejected "
                                       "too (same value rule): every error the runs made, not only those let through."),
) -> None:
    """Label every step a Verifier judged in real runs: the gold value -> accept; accepted on a wrong answer and
    not the gold (nor an intermediate of its solution) -> reject, named by its error; the rest left out, counted."""
    from tasks.eval.harvest import CATEGORIES as HARVEST_CATEGORIES
    from tasks.eval.harvest import HarvestError, harvest

    for run in runs:
        if not run.is_dir():
            fail(f"run directory {str(run)!r} does not exist")
    try:
        got = harvest(runs, with_rejected=with_rejected)
    except HarvestError as exc:
        fail(str(exc))
    if not got.cases:
        fail(f"no labeled case in {got.steps} judged steps (left out: {dict(got.left_out) or 'none'}); "
             f"nothing written to {out}", 1)
    write_cases(got.cases, out)
    counts = got.counts()
    labels = Counter(c["label"] for c in got.cases)
    console.print(f"wrote {len(got.cases)} cases ({labels['accept']} accept, {labels['reject']} reject) from "
                  f"{got.steps} judged steps to {out}", highlight=False)
    console.print("per category: " + ", ".join(f"{c}={counts[c]}" for c in HARVEST_CATEGORIES if c in counts),
                  highlight=False)
    console.print("left out:     " + (", ".join(f"{k}={v}" for k, v in got.left_out.most_common()) or "none"),
                  highlight=False)


@verifier_eval_app.command("run")
def run_cmd(
    labeled: Path = typer.Option(..., "--labeled", help="A labeled JSONL file (from `build`, or hand-written)."),
    verifier: str = typer.Option("hybrid", "--verifier", help="deterministic | llm | hybrid"),
    as_json: bool = typer.Option(False, "--json", help="Print the report as JSON."),
    out: Optional[Path] = typer.Option(None, "--out", help="Write the report (JSON) here; default: beside the labeled file."),
    config: Optional[Path] = typer.Option(None, help="Run configuration (YAML/JSON): models.verifier, verifier.*, tools.python.*"),
    set_: list[str] = typer.Option([], "--set", help="Override a config value: section.key=value (repeatable)."),
    limit_per_category: Optional[int] = typer.Option(None, min=1, help="Only the first N cases of each category."),
    category: list[str] = typer.Option([], help="Only these categories (repeatable)."),
) -> None:
    """Verify every labeled case; report false accepts and false rejects overall and per category."""
    from infra.models import build_backend
    from infra.models.base import ModelError
    from infra.runtime.settings import ConfigError, ModelConfig, load_settings

    if verifier not in ("deterministic", "llm", "hybrid"):
        fail(f"--verifier {verifier!r}: use deterministic, llm or hybrid")
    try:
        cases = read_cases(labeled)
        settings = load_settings(config, set_)
    except (BuildError, ConfigError) as exc:
        fail(str(exc))
    if category:
        cases = [c for c in cases if c["category"] in category]
    if limit_per_category:
        seen: Counter = Counter()
        kept = []
        for c in cases:
            seen[c["category"]] += 1
            if seen[c["category"]] <= limit_per_category:
                kept.append(c)
        cases = kept
    if verifier != "deterministic" and settings.models.verifier is None:
        settings.models.verifier = ModelConfig()  # the embedded default model as judge
        err_console.print("note: models.verifier is not set; the judge is the embedded default model", highlight=False)
    if verifier != "deterministic":
        try:
            build_backend(settings.models.verifier)
        except ModelError as exc:
            fail(f"judge model: {exc}")
    outcomes = run_cases(cases, settings, verifier)
    report = summarize(outcomes, verifier)
    report["labeled"] = str(labeled)
    report["judge"] = settings.models.verifier.model if settings.models.verifier and verifier != "deterministic" else None
    target = out or labeled.with_name(f"{labeled.stem}.{verifier}.report.json")
    target.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    if as_json:
        print(json.dumps(report, indent=2))
        return
    for table in report_tables(report):
        _wide.print(table)
    console.print(f"mean latency {report['mean_latency_ms']} ms per case, {report['model_calls_per_case']} model calls and "
                  f"{report['model_tokens_per_case']} model tokens per case")
    console.print(f"report: {target}")
