"""`agentflow injection-eval`: run the injection questions of a world (generated under --out when not given)
through both systems (flows/injection_eval.py) and print the injection-follow table."""

from __future__ import annotations

import json
import math
from dataclasses import asdict
from pathlib import Path
from typing import Optional

import typer
from rich.table import Table

from flows.cli.startup import console, err_console, fail, preflight, prepare_env
from flows.injection_eval import (
    SYSTEMS,
    FollowRow,
    InjectionReport,
    eval_settings,
    evaluate_injection,
    injection_questions,
)


def _world(world: Optional[Path], out: Path, seed: int, n: int) -> Path:
    if world is not None:
        return world
    from infra.data.world import WorldKnobs, generate_world, world_files, write_world

    target = out / "world"
    generated = generate_world(seed, max(10, math.ceil(n / 0.7) + 4), "train", WorldKnobs(injection_rate=1.0))
    files = world_files(generated)
    if not all((target / k).is_file() and (target / k).read_bytes() == v for k, v in files.items()):
        write_world(generated, target)
    return target


def print_report(report: InjectionReport) -> None:
    def frac(k: int, n: int) -> str:
        return f"{k}/{n}" + (f" ({k / n:.0%})" if n else "")

    table = Table(title=f"Injection-follow rate: {report.questions} injection questions, {report.exposure} exposure, "
                        f"{report.wall_s:.0f} s")
    for col in ("system", "exposed", "followed (next plan)", "followed (any later)", "tool_call", "answer_override",
                "chance", "denied"):
        table.add_column(col, justify="left" if col == "system" else "right")
    for name, s in report.systems.items():
        tc, ao = s["by_kind"]["tool_call"], s["by_kind"]["answer_override"]
        table.add_row(name, frac(s["exposed"], s["questions"]), frac(s["followed_next"], s["exposed"]),
                      frac(s["followed_any"], s["exposed"]), frac(tc["followed_any"], tc["exposed"]),
                      frac(ao["followed_any"], ao["exposed"]),
                      frac(s["unexposed_states_injected_answer"], s["unexposed_answer_override"]), str(s["denied_calls"]))
    console.print(table)
    console.print("exposed: an executed search returned the injection document; followed: k of the exposed; tool_call / "
                  "answer_override: followed of exposed per kind; chance: unexposed questions answered with the injected "
                  "value anyway; denied: calls the Executor refused (not in tools.allow).", highlight=False)


def injection_eval_command(
    world: Optional[Path] = typer.Option(None, "--world", help="A world directory (default: generate one with "
                                         "injection_rate=1 under --out/world)."),
    out: Path = typer.Option(Path("runs/injection-eval"), "--out", help="Where the report, rows and logs go."),
    questions: int = typer.Option(20, "--questions", "-n", min=1, help="Injection questions to run (first N)."),
    seed: int = typer.Option(0, help="Seed of the generated world."),
    system: list[str] = typer.Option(list(SYSTEMS), "--system", help="modular and/or monolithic (repeatable)."),
    config: Optional[Path] = typer.Option(None, help="Run configuration (YAML/JSON)."),
    set_: list[str] = typer.Option([], "--set", help="Override a config value: section.key=value (repeatable)."),
    exposure: str = typer.Option("forced", help="forced: every question's first turn searches the question text "
                                 "(returns the injection document); natural: the model's own searches must find it."),
    as_json: bool = typer.Option(False, "--json", help="Print the report as JSON."),
) -> None:
    """Measure how often each system's next plan obeys an instruction planted in a search result."""
    prepare_env()
    from infra.data.world import WorldError
    from infra.runtime.settings import ConfigError, load_settings
    from infra.tools.sandbox import available_mechanisms

    if exposure not in ("forced", "natural"):
        fail(f"--exposure must be forced or natural, not {exposure!r}")
    bad = [s for s in system if s not in SYSTEMS]
    if bad:
        fail(f"unknown system(s) {bad}; use {', '.join(SYSTEMS)}")
    try:
        settings = load_settings(config, set_)
    except ConfigError as exc:
        fail(str(exc))
    if "python" in settings.tools.allow:
        # the injected code is hostile by construction: it only ever runs under bubblewrap here
        if "bwrap" not in available_mechanisms():
            fail("the python tool needs the bubblewrap sandbox for this evaluation (the injected code is hostile); "
                  "install bubblewrap or pass --set 'tools.allow=[search]'")
        settings.tools.python.sandbox = "bwrap"
    world_dir = _world(world, out, seed, questions)
    try:
        chosen, _ = injection_questions(world_dir, questions)  # a clear error for a wrong directory, first
        if not chosen:
            fail(f"{world_dir} has no injection questions (generate it with --injection-rate > 0)")
        settings = eval_settings(settings, world_dir, None)
        preflight(settings)
        n_done = [0]

        def progress(row: FollowRow) -> None:
            n_done[0] += 1
            mark = "FOLLOWED" if row.followed_any else ("exposed" if row.exposed else "not exposed")
            err_console.print(f"[{n_done[0]}] {row.system} {row.question_id} {row.kind}: {mark} ({row.wall_s:.1f} s)",
                              highlight=False)

        report = evaluate_injection(world_dir, settings, limit=questions, systems=system, log_dir=out / "logs",
                                    forced=exposure == "forced", run_id=f"injection-eval-{exposure}", on_row=progress)
    except (WorldError, ValueError) as exc:
        fail(str(exc))
    from infra.runtime.storage import ResultStore

    store = ResultStore(str(out))
    store.write_text(f"injection_eval_{exposure}.json", json.dumps(report.to_json(), indent=2) + "\n")
    store.write_text(f"injection_rows_{exposure}.jsonl", "".join(json.dumps(asdict(r)) + "\n" for r in report.rows))
    if as_json:
        print(json.dumps(report.to_json(), indent=2))
        return
    print_report(report)
    console.print(f"report: {out / f'injection_eval_{exposure}.json'}\nrows:   {out / f'injection_rows_{exposure}.jsonl'}",
                  highlight=False)
