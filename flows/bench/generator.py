"""The Generator on its own, on evidence real runs verified: replay each finished question's accepted evidence through
the Generator (the run's stored settings, plus overrides) and score the replayed answer beside the recorded one.

The Planner, tools and Verifier are held fixed: the view is rebuilt from the run's judged steps exactly as the loop
built it (EvolvingMemory.record, then supersession), so a change to span extraction, the Generator's prompt or its
model is measured on the questions real runs produced, one Generator call per question, without re-running the rest.
Replaying unchanged code reproduces the recorded answers (the Generator decodes greedily): that is the probe's own
check, and the first run to make after a change of model build.

Per question: whether the gold is among the answer spans offered (span mode), the recorded and the replayed answer
and whether each scored correct. Rows without accepted evidence are skipped (the Generator is not called there), and
so, unless --every, is the model call where the gold is not offered and the recorded answer was wrong (wrong either
way).

    python -m flows.bench.generator replay RUN_DIR [--system modular] [--set generator.claims_first=true] --out a.jsonl
    python -m flows.bench.generator pool a.jsonl b.jsonl     # several directories' replays, paired per question
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from pathlib import Path
from typing import Any

from flows.bench.failures import (
    FailuresError,
    judged_rows,
    judged_steps,
    question_records,
    result_rows,
    row_record,
)
from infra.runtime.settings import ConfigError, Settings, load_settings
from tasks.contracts import JudgedStep, MemoryItem
from tasks.eval.metrics import paired_difference
from tasks.eval.scorers import score_question
from tasks.memory import EvolvingMemory
from tasks.modules.generator import Generator, build_generator


def final_view(steps: list[JudgedStep], ttl_s: float | None = None) -> list[MemoryItem]:
    """The accepted evidence the Generator was shown: every judged step recorded in order, as the loop recorded it."""
    memory = EvolvingMemory(ttl_s)
    for step in sorted(steps, key=lambda s: s.step_id):
        memory.record_judged(step)
    return memory.accepted_view()


def run_settings(root: Path, system: str, seed: int, overrides: list[str]) -> Settings:
    """The settings the evaluation stored for (system, seed), with the replay's overrides on top."""
    path = root / "settings" / f"{system}.seed{seed}.yaml"
    if not path.is_file():
        raise FailuresError(f"{root}: no stored settings for {system} seed {seed} ({path.name})")
    return load_settings(path, overrides)


def replay_one(generator: Generator, record: dict[str, Any], row: dict[str, Any], view: list[MemoryItem],
               every: bool = False) -> dict[str, Any]:
    """One question: the spans' verdict, the replayed answer and both scores. In span mode a question whose gold is
    not offered and whose recorded answer was wrong is wrong either way: it is not sent to the model unless `every`."""
    question = str(record.get("question") or row.get("question") or "")
    spans = generator.spans(question, view)
    offered = None if spans is None else any(score_question(record, s).correct for s in spans)
    line = {"question_id": row["question_id"], "seed": int(row["seed"]), "gold": row.get("gold"), "offered": offered,
            "recorded": row.get("prediction"), "recorded_correct": bool(row["correct"])}
    if offered is False and not row["correct"] and not every:
        return {**line, "replayed": None, "replayed_correct": False, "generator_failure": None}
    out = generator.answer(question, view)
    # the recorded status stands: the loop's stop is the Planner's, held fixed here
    replayed = score_question(record, out.text, status=str(row.get("status") or "answered"))
    return {**line, "replayed": out.text, "replayed_correct": bool(replayed.correct),
            "generator_failure": out.failure_type.value if out.failure_type else None}


def replay(run_dir: str | Path, system: str = "modular", overrides: list[str] = (), limit: int | None = None,
           out: Path | None = None, every: bool = False) -> dict[str, Any]:
    """Replay every finished question of `system` that has accepted evidence; one JSON line each in `out`. Without
    `every`, a question the replayed Generator cannot answer right (its gold not offered) and that was recorded
    wrong is scored wrong without a call."""
    root = Path(run_dir)
    rows = [r for r in result_rows(root) if r["system"] == system]
    if not rows:
        raise FailuresError(f"{root}: no finished question of {system}")
    judged = judged_rows(root)
    steps = judged_steps(judged, system)
    records = question_records(root, judged)
    generators: dict[int, Generator] = {}
    lines: list[dict[str, Any]] = []
    for row in sorted(rows, key=lambda r: (int(r["seed"]), r["question_id"]))[:limit]:
        seed = int(row["seed"])
        if seed not in generators:
            settings = run_settings(root, system, seed, list(overrides))
            generators[seed] = build_generator(settings)
            ttl = settings.memory.evidence_ttl_s
        view = final_view(steps.get((seed, row["question_id"]), []), ttl)
        if not view:
            continue
        record = records.get(row["question_id"]) or row_record(row)
        lines.append(replay_one(generators[seed], record, row, view, every))
        if out is not None:
            with out.open("a") as f:
                f.write(json.dumps(lines[-1], default=str) + "\n")
    return summarise(lines, system, list(overrides))


def summarise(lines: list[dict[str, Any]], system: str, overrides: list[str]) -> dict[str, Any]:
    """Counts over the replayed questions: recorded vs replayed correct, which answers changed, and the paired
    difference (replayed - recorded, per question averaged over its seeds, as the tables pair systems)."""
    moved = Counter((x["recorded_correct"], x["replayed_correct"]) for x in lines)
    diff = paired_difference([{"question_id": x["question_id"], "correct": x["replayed_correct"]} for x in lines],
                             [{"question_id": x["question_id"], "correct": x["recorded_correct"]} for x in lines])
    return {"system": system, "overrides": overrides, "questions": len(lines),
            "gold_offered": sum(bool(x["offered"]) for x in lines) if any(x["offered"] is not None for x in lines) else None,
            "recorded_correct": sum(x["recorded_correct"] for x in lines),
            "replayed_correct": sum(x["replayed_correct"] for x in lines),
            "better": moved[(False, True)], "worse": moved[(True, False)],
            "difference_points": None if diff["mean_diff"] is None else round(100 * diff["mean_diff"], 1),
            "difference_ci95": None if diff["ci95"] is None else [round(100 * v, 1) for v in diff["ci95"]],
            "called": sum(x["replayed"] is not None for x in lines),
            "same_answer": sum(str(x["recorded"]).strip() == str(x["replayed"]).strip() for x in lines
                               if x["replayed"] is not None)}


def pool(paths: list[str | Path]) -> dict[str, Any]:
    """Several replays' lines (one per evaluation directory, the same overrides) summarised together; a question is
    keyed by its id, so the seeds of one benchmark pair as the tables pair them."""
    lines: list[dict[str, Any]] = []
    for path in paths:
        p = Path(path)
        if not p.is_file():
            raise FailuresError(f"{p}: no such replay file (flows.bench.generator replay --out writes one)")
        got = [json.loads(x) for x in p.read_text().splitlines() if x.strip()]
        if not got or "replayed_correct" not in got[0]:
            raise FailuresError(f"{p}: not a replay's JSON lines")
        lines += got
    return summarise(lines, "pooled", [])


def _emit(summary: dict[str, Any], json_path: str | None) -> None:
    text = json.dumps(summary, indent=2)
    print(text)
    if json_path:
        Path(json_path).write_text(text + "\n")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m flows.bench.generator", description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="command", required=True)
    r = sub.add_parser("replay", help="replay one evaluation directory's questions through the Generator")
    r.add_argument("run_dir", help="an evaluation directory (flows.bench.tables run's OUT/<benchmark>/seed<K>)")
    r.add_argument("--system", default="modular", help="a system that keeps judged steps (modular, modular-nomem)")
    r.add_argument("--set", dest="overrides", action="append", default=[], metavar="section.key=value")
    r.add_argument("--limit", type=int, default=None)
    r.add_argument("--every", action="store_true", help="call the Generator on every question, also where the gold is "
                   "not offered (the check that unchanged settings give the recorded answers back)")
    r.add_argument("--out", default=None, help="JSON lines, one per replayed question (appended)")
    r.add_argument("--json", default=None, help="write the summary here too")
    q = sub.add_parser("pool", help="summarise several replays' JSON lines together")
    q.add_argument("lines", nargs="+", help="replay --out files")
    q.add_argument("--json", default=None, help="write the summary here too")
    a = p.parse_args(argv)
    try:
        if a.command == "pool":
            _emit(pool(a.lines), a.json)
        else:
            _emit(replay(a.run_dir, a.system, a.overrides, a.limit, Path(a.out) if a.out else None, a.every), a.json)
    except (FailuresError, ConfigError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
