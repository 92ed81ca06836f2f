"""`agentflow data ...`: turn the original benchmark files into questions.jsonl (+ corpus.jsonl) for evaluation."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer
from rich.table import Table

from flows.cli.startup import command_group, console, fail
from infra.data.benchmarks import BENCHMARKS, DatasetError, prepare

data_app = command_group(
    "Benchmark data: read the original files (GSM8K, Game of 24, HotpotQA, MuSiQue, Bamboogle, AIME24, "
    "AMC23, MATH-500, a synthetic world) and write questions.jsonl, corpus.jsonl and manifest.json."
)


@data_app.command("prepare")
def prepare_cmd(
    name: str = typer.Argument(..., help=f"Benchmark: {', '.join(BENCHMARKS)}."),
    src: Path = typer.Option(..., "--from", help="The datasets directory (laid out as shared/datasets), the "
                                                 "benchmark's own folder, or (world) a generated world."),
    out: Path = typer.Option(..., "--out", help="Directory for questions.jsonl, corpus.jsonl and manifest.json."),
    limit: Optional[int] = typer.Option(None, min=1, help="Only the first N questions (in file order)."),
) -> None:
    """Prepare one benchmark: same files and options, same bytes."""
    if name not in BENCHMARKS:
        fail(f"unknown benchmark {name!r}; known: {', '.join(BENCHMARKS)}")
    try:
        written = prepare(name, src, out, limit=limit)
    except DatasetError as exc:
        fail(_escape(f"{name}: {exc}"), 1)
    except OSError as exc:
        fail(_escape(f"cannot write to {str(out)!r}: {exc.strerror or exc}"), 1)
    import json

    meta = json.loads((written / "manifest.json").read_text(encoding="utf-8"))
    c = meta["counts"]
    corpus = f", {c['corpus']} documents" if c["corpus"] is not None else ", no corpus"
    console.print(f"wrote {written}: {c['questions']} of {c['source_questions']} questions{corpus} ({name})",
                  highlight=False, markup=False)
    for need in meta["requires"]:
        console.print(f"  note: {name} requires {need}: a run without it configured is refused",
                      highlight=False, markup=False)
    for note in meta["notes"]:
        console.print(f"  note: {note}", highlight=False, markup=False)


@data_app.command("list")
def list_cmd() -> None:
    """The benchmarks that `prepare` knows, their files and how they are scored."""
    table = Table("name", "files", "scored as", "corpus", "requires", "description")
    for a in BENCHMARKS.values():
        table.add_row(a.name, ", ".join(a.files), a.answer_type, "yes" if a.has_corpus else "no",
                      ", ".join(a.requires) or "-", a.description)
    console.print(table)


def _escape(text: str) -> str:
    from rich.markup import escape

    return escape(text)
