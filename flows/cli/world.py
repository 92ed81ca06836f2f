"""`agentflow world ...`: generate a synthetic research world and check it with the scripted oracle."""

from __future__ import annotations

import hashlib
import json
from enum import Enum
from pathlib import Path
from typing import Optional

import typer

from flows.cli.startup import command_group, console, fail
from infra.data.world import FILES, FORMAT, KINDS, WorldError, WorldKnobs, generate_world, world_files, write_world

world_app = command_group(
    "Synthetic research worlds: a generated corpus with checkable questions (stale, conflicting, "
    "near-duplicate and injected documents on purpose)."
)


class Split(str, Enum):
    train = "train"
    test = "test"


def _existing_world(out: Path) -> dict | None:
    """The manifest of a complete, intact world in ``out`` (hashes verified), else None."""
    try:
        manifest = json.loads((out / "manifest.json").read_text(encoding="utf-8"))
        for name in ("corpus.jsonl", "questions.jsonl"):
            if hashlib.sha256((out / name).read_bytes()).hexdigest() != manifest["files"][name]:
                return None
        return manifest
    except (OSError, ValueError, KeyError, TypeError):
        return None


def parse_kind_weights(text: str) -> dict[str, float]:
    """'lookup=1,calc=0.5' -> {'lookup': 1.0, 'calc': 0.5}; a bare name weighs 1. WorldError when malformed."""
    weights: dict[str, float] = {}
    for part in (p.strip() for p in text.split(",")):
        if not part:
            continue
        name, _, value = part.partition("=")
        try:
            weights[name.strip()] = float(value) if value.strip() else 1.0
        except ValueError:
            raise WorldError(f"--kinds: {part!r} is not kind=weight (a number)") from None
    if not weights:
        raise WorldError(f"--kinds: no kind given; kinds are {list(KINDS)}")
    return weights


@world_app.command("generate")
def generate(
    out: Path = typer.Option(..., "--out", help="Directory for corpus.jsonl, questions.jsonl and manifest.json."),
    seed: int = typer.Option(0, help="Random seed: same seed and options, same bytes."),
    questions: int = typer.Option(200, "--questions", "-n", min=1, max=100_000, help="Number of questions."),
    split: Split = typer.Option(Split.train, help="train or test: test uses wording families never used by train."),
    max_hops: int = typer.Option(3, min=1, max=3, help="Most documents a question needs to read in sequence."),
    distractor_rate: float = typer.Option(0.3, min=0.0, max=1.0, help="Near-duplicate-name documents per question."),
    stale_rate: float = typer.Option(0.3, min=0.0, max=1.0, help="Older documents with superseded values."),
    conflict_rate: float = typer.Option(0.1, min=0.0, max=1.0, help="Equal-date conflicting sources (answer: uncertain)."),
    injection_rate: float = typer.Option(0.1, min=0.0, max=1.0, help="Documents with instruction-like text."),
    kinds: Optional[str] = typer.Option(None, "--kinds", help="Question kinds and their weights, e.g. 'lookup=1,calc=1' "
                                        "(kinds: " + ", ".join(KINDS) + "); default: the mix of all kinds."),
    force: bool = typer.Option(False, "--force", help="Replace a different world already in --out."),
    reuse: bool = typer.Option(False, "--reuse", help="Keep a world already in --out if it was made with these options."),
) -> None:
    """Generate a world: fictional entities, a corpus about them, and questions with gold paths."""
    try:
        extra = {"kind_weights": parse_kind_weights(kinds)} if kinds is not None else {}
        knobs = WorldKnobs(max_hops=max_hops, distractor_rate=distractor_rate, stale_rate=stale_rate,
                           conflict_rate=conflict_rate, injection_rate=injection_rate, **extra)
    except WorldError as exc:
        fail(str(exc))
    if out.exists() and not out.is_dir():
        fail(f"--out {str(out)!r} exists and is not a directory")
    params = {"format": FORMAT, "seed": seed, "split": split.value, "n_questions": questions, "knobs": knobs.to_dict()}
    if reuse:
        manifest = _existing_world(out)
        if manifest is not None and {k: manifest.get(k) for k in params} == params:
            console.print(f"reusing the world in {out} (seed {seed}, {split.value}, {questions} questions)", highlight=False)
            return
    try:
        world = generate_world(seed, questions, split.value, knobs)
    except WorldError as exc:
        fail(str(exc))
    files = world_files(world)
    present = [n for n in FILES if (out / n).exists()]
    if present:
        same = all((out / n).is_file() and (out / n).read_bytes() == files[n] for n in FILES)
        if same:
            console.print(f"the world in {out} is already identical; nothing written", highlight=False)
            return
        if not force:
            fail(f"{out} already holds a different world ({', '.join(present)}); "
                 "use --force to replace it or choose another --out", 1)
    try:
        write_world(world, out)
    except OSError as exc:
        fail(f"cannot write the world to {str(out)!r}: {exc.strerror or exc}", 1)
    c = world.manifest["counts"]
    console.print(f"wrote {out}: {len(world.questions)} questions, {len(world.documents)} documents "
                  f"(seed {seed}, split {split.value})", highlight=False)
    for key in ("kind", "needs", "hops", "expected_status"):
        console.print(f"  {key}: " + ", ".join(f"{k} {v}" for k, v in c[key].items()), highlight=False)
    console.print("  adversarial: " + ", ".join(f"{k.replace('questions_with_', '')} {v}" for k, v in c["adversarial"].items()),
                  highlight=False)


@world_app.command("oracle")
def oracle(
    world_dir: Path = typer.Argument(..., help="A directory written by `agentflow world generate`."),
    limit: Optional[int] = typer.Option(None, min=1, help="Only the first N questions."),
    workers: int = typer.Option(4, min=1, max=64, help="Questions answered in parallel."),
    as_json: bool = typer.Option(False, "--json", help="Print the summary as JSON."),
) -> None:
    """Answer every question by its gold path with the project's search and Python tools; exit 1 on any miss."""
    from infra.data.oracle import run_oracle

    try:
        report = run_oracle(world_dir, workers=workers, limit=limit)
    except WorldError as exc:
        fail(str(exc))
    summary = report.summary()
    if as_json:
        console.print_json(json.dumps(summary))
    else:
        console.print(f"oracle: {summary['correct']}/{summary['total']} correct ({summary['accuracy']:.1%}); "
                      f"tool calls {summary['tool_calls']}", highlight=False)
        for f in summary["failures"]:
            console.print(f"  {f['id']}: {f['status']} {f['answer']!r} {f['error'] or ''}", highlight=False)
    if report.failures:
        raise typer.Exit(1)
