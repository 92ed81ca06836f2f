"""The direct baseline's former prompt vs the same model reasoning step by step, no tools, greedy.

The tables' direct system (tasks/baselines/direct.py) made one Generator call: "Be brief" (BRIEF here), a one-line
worked example, the Generator's 256-token cap. A small model reasons in its reply or not at all, so this measures what
that prompt cost the baseline: the same questions with the brief prompt and with a step-by-step prompt and more
tokens, each scored like the tables (the benchmark's scorer on the whole reply). One JSON line per question; prints
the counts (docs/results.md, "How strong is direct?"). It is why direct now reasons step by step.

    python -m flows.bench.reasoning QUESTIONS.jsonl --benchmark gsm8k --limit 50 --out runs/reasoning.jsonl
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

from flows.bench.probe import probe_inputs, probe_parser
from infra.models import build_backend
from infra.runtime.settings import ConfigError
from tasks.eval.scorers import score
from tasks.modules.demos import DIRECT_QUESTION, DIRECT_REPLY

BRIEF = "Answer the question from what you know; you have no tools. Be brief, and end with one line 'Answer: <final answer>'."
BRIEF_TOKENS = 256
STEP_BY_STEP = "Solve the problem step by step. Then end with one line 'Answer: <final answer>'."
STEP_BY_STEP_TOKENS = 512


def brief_messages(question: str, demos: bool = True) -> list[dict[str, str]]:
    """The direct system's prompt before step by step (as it ran for the tables of 2026-12-06)."""
    shown = [{"role": "user", "content": f"Question: {DIRECT_QUESTION}"}, {"role": "assistant", "content": DIRECT_REPLY}] if demos else []
    return [{"role": "system", "content": BRIEF}, *shown, {"role": "user", "content": f"Question: {question}"}]


def step_by_step_messages(question: str) -> list[dict[str, str]]:
    return [{"role": "system", "content": STEP_BY_STEP}, {"role": "user", "content": question}]


def compare(questions: list[dict], settings, benchmark: str, out: Path) -> dict[str, float]:
    """Both prompts for each question, greedy; one JSON line each in `out`; the counts and mean reply tokens."""
    cfg = settings.models.generator
    backend = build_backend(cfg)
    arms = {"direct": (lambda q: brief_messages(q, cfg.demos), BRIEF_TOKENS),
            "step_by_step": (step_by_step_messages, STEP_BY_STEP_TOKENS)}
    counts: dict[str, float] = {"questions": 0, **{a: 0 for a in arms}, **{f"{a}_tokens_out": 0 for a in arms}}
    with out.open("w") as f:
        for q in questions:
            row = {"id": q["id"], "gold": q["answer"]}
            for arm, (messages, max_tokens) in arms.items():
                t0 = time.perf_counter()
                c = backend.complete(messages(q["question"]), max_tokens=max_tokens, temperature=0.0, seed=0)
                right = bool(score(benchmark, c.text, q).correct)
                row |= {arm: c.text, f"{arm}_right": right, f"{arm}_tokens_out": c.tokens_out,
                        f"{arm}_s": round(time.perf_counter() - t0, 2)}
                counts[arm] += right
                counts[f"{arm}_tokens_out"] += c.tokens_out
            f.write(json.dumps(row) + "\n")
            counts["questions"] += 1
    for arm in arms:
        counts[f"{arm}_tokens_out"] = round(counts[f"{arm}_tokens_out"] / max(1, counts["questions"]), 1)
    return counts


def main(argv: list[str] | None = None) -> int:
    p = probe_parser("python -m flows.bench.reasoning", __doc__, "runs/reasoning.jsonl")
    p.add_argument("--benchmark", default="gsm8k", help="whose scorer grades the replies")
    a = p.parse_args(argv)
    try:
        settings, questions = probe_inputs(a)
        score(a.benchmark, "0", questions[0] if questions else "0")  # an unknown benchmark fails here, not mid-run
    except (ConfigError, OSError, ValueError, KeyError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    out = Path(a.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    print(json.dumps(compare(questions, settings, a.benchmark, out)))
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
