"""What the one-file probes (programs.py, reasoning.py) share: their arguments and reading the questions file."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from infra.runtime.settings import Settings, load_settings


def probe_parser(prog: str, doc: str, out: str) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=prog, description=doc.splitlines()[0])
    p.add_argument("questions", help="JSON lines {id, question, answer} (agentflow data prepare's questions.jsonl)")
    p.add_argument("--limit", type=int, default=50)
    p.add_argument("--out", default=out)
    p.add_argument("--config", default=None)
    p.add_argument("--set", dest="overrides", action="append", default=[])
    return p


def probe_inputs(a: argparse.Namespace) -> tuple[Settings, list[dict]]:
    """The run's settings and the first --limit questions; ValueError names the first line that lacks a field
    (ConfigError and OSError pass through)."""
    settings = load_settings(a.config, a.overrides)
    lines = Path(a.questions).read_text().splitlines()
    questions = [json.loads(line) for line in lines if line.strip()][: a.limit]
    missing = [i for i, q in enumerate(questions, 1) if not {"id", "question", "answer"} <= set(q)]
    if missing:
        raise ValueError(f"line {missing[0]} lacks id, question or answer")
    return settings, questions
