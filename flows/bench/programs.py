"""Where programs are written: the Planner's first program inside its JSON plan vs a fenced program for the question.

For each question, greedy: the Planner's first plan (its real prompt, worked examples and schema; the program is in
`tool_input`) and one fenced program asked for the question alone (the Verifier's recomputation prompt), each run
in the sandbox; a program is right when the last number it prints is the gold answer. Writes one JSON line per
question and prints the counts (docs/inference.md, "Where programs are written").

    python -m flows.bench.programs QUESTIONS.jsonl --limit 50 --out runs/programs.jsonl [--set section.key=value]
"""

from __future__ import annotations

import json
import sys
import time
from decimal import Decimal, InvalidOperation
from pathlib import Path

from flows.bench.probe import probe_inputs, probe_parser
from infra.runtime.settings import ConfigError
from tasks.checks.quantities import last_printed
from tasks.modules import recompute
from tasks.modules.planner import build_planner
from tasks.modules.verifier import sandbox_rerun


def _right(value: Decimal | None, gold: str) -> bool:
    try:
        return value is not None and recompute.agree(value, Decimal(str(gold).replace(",", "")))
    except InvalidOperation:
        return False


def compare(questions: list[dict], settings, out: Path) -> dict[str, int]:
    """Both programs for each question; one JSON line each in `out`; the counts."""
    settings.models.planner.temperature = 0.0  # greedy, so the two places are compared on one draw each
    planner = build_planner(settings)
    rerun = sandbox_rerun(settings)

    def value(code: str | None) -> Decimal | None:
        if not code:
            return None
        status, stdout, exit_code = rerun(code)
        return last_printed(stdout)[1] if status == "ok" and exit_code in (0, None) else None

    counts = {"questions": 0, "in_plan": 0, "fenced": 0, "planner_chose_python": 0}
    with out.open("w") as f:
        for q in questions:
            t0 = time.perf_counter()
            outcome = planner.plan(q["question"], [], None, 1)
            in_plan = outcome.plan.args.get("code") if outcome.plan and outcome.plan.tool == "python" else None
            t1 = time.perf_counter()
            reply = planner.backend.complete(
                [{"role": "system", "content": recompute.RECOMPUTE_SYSTEM}, *recompute.RECOMPUTE_DEMO,
                 {"role": "user", "content": q["question"]}], json_schema=None, max_tokens=256, temperature=0.0, seed=0)
            fenced = recompute.program_of(reply.text)
            t2 = time.perf_counter()
            row = {"id": q["id"], "gold": q["answer"], "planner_tool": outcome.plan.tool if outcome.plan else None,
                   "in_plan_code": in_plan, "in_plan_right": _right(value(in_plan), q["answer"]),
                   "fenced_code": fenced, "fenced_right": _right(value(fenced), q["answer"]),
                   "in_plan_s": round(t1 - t0, 2), "fenced_s": round(t2 - t1, 2)}
            f.write(json.dumps(row) + "\n")
            counts["questions"] += 1
            counts["in_plan"] += row["in_plan_right"]
            counts["fenced"] += row["fenced_right"]
            counts["planner_chose_python"] += row["planner_tool"] == "python"
    return counts


def main(argv: list[str] | None = None) -> int:
    a = probe_parser("python -m flows.bench.programs", __doc__, "runs/programs.jsonl").parse_args(argv)
    try:
        settings, questions = probe_inputs(a)
    except (ConfigError, OSError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    out = Path(a.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    print(json.dumps(compare(questions, settings, out)))
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
