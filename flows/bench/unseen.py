"""A dozen questions no prompt or check was tuned on, for the default configuration: six one-hop lookups over a small
hand-written corpus (bench/unseen-check/) and six GSM8K word problems far from the tables' first 50.

    python -m flows.bench.unseen build --out runs/unseen            # questions.jsonl + corpus.jsonl
    agentflow batch runs/unseen/questions.jsonl --corpus runs/unseen/corpus.jsonl --out runs/unseen/runs
    python -m flows.bench.unseen score runs/unseen/runs/<run_id> --json bench/unseen-check/result.json

The model issue's outside check is of this kind (lookups over a small corpus and word problems, 8 of 12 correct
and cited); these questions stand in for it, and only GSM8K's line numbers are kept here, never its text.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from infra.runtime.storage import ResultStore
from tasks.eval.scorers import score

HERE = Path(__file__).resolve().parents[2] / "bench" / "unseen-check"
GSM8K_LINES = (200, 300, 400, 500, 600, 700)  # 0-based lines of gsm8k/test.jsonl; the tables use lines 0-49


def build(out: Path, datasets: Path) -> list[dict]:
    """Write out/questions.jsonl (lookups, then word problems) and out/corpus.jsonl; returns the questions."""
    gsm = datasets / "gsm8k" / "test.jsonl"
    if not gsm.is_file():
        raise SystemExit(f"no {gsm}: set AGENTFLOW_DATASETS (or --data) to the datasets directory")
    lines = gsm.read_text().splitlines()
    questions = [json.loads(line) for line in (HERE / "lookups.jsonl").read_text().splitlines() if line.strip()]
    for k, i in enumerate(GSM8K_LINES, 1):
        g = json.loads(lines[i])
        questions.append({"id": f"W{k}", "question": g["question"], "answer": g["answer"].split("####")[-1].strip(),
                          "answer_type": "number"})
    out.mkdir(parents=True, exist_ok=True)
    (out / "questions.jsonl").write_text("".join(json.dumps(q) + "\n" for q in questions))
    (out / "corpus.jsonl").write_text((HERE / "corpus.jsonl").read_text())
    return questions


def grade(run_dir: Path, questions: list[dict]) -> list[dict]:
    """Each question's answer from a batch run's answers, scored by its answer type; cited means at least one citation."""
    answers = {row["task_id"]: row for row in ResultStore(str(run_dir)).read_table("answers").to_pylist()}
    rows = []
    for q in questions:
        a = answers.get(q["id"])
        if a is None:
            rows.append({"id": q["id"], "answer": None, "gold": q["answer"], "correct": False, "cited": False})
            continue
        s = score(q["answer_type"], a["answer"], q["answer"], status=a["status"])
        rows.append({"id": q["id"], "answer": a["answer"][:80], "gold": q["answer"], "status": a["status"],
                     "correct": bool(s.correct), "cited": a["n_citations"] > 0})
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m flows.bench.unseen", description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    b = sub.add_parser("build", help="write the questions and the corpus")
    b.add_argument("--out", type=Path, required=True)
    b.add_argument("--data", type=Path, default=Path(os.environ.get("AGENTFLOW_DATASETS", "../shared/datasets")))
    s = sub.add_parser("score", help="score a batch run of these questions")
    s.add_argument("run_dir", type=Path, help="the batch run's directory (it holds answers/)")
    s.add_argument("--questions", type=Path, help="the built questions.jsonl (default: two levels above run_dir)")
    s.add_argument("--json", type=Path, help="also write the rows and the count here")
    args = ap.parse_args(argv)
    if args.cmd == "build":
        qs = build(args.out, args.data)
        print(f"wrote {args.out}/questions.jsonl ({len(qs)} questions) and {args.out}/corpus.jsonl")
        return 0
    qfile = args.questions or args.run_dir.parent.parent / "questions.jsonl"
    if not qfile.is_file() or not (args.run_dir / "answers").is_dir():
        print(f"need {qfile} and {args.run_dir}/answers (run `build`, then `agentflow batch`)", file=sys.stderr)
        return 2
    rows = grade(args.run_dir, [json.loads(x) for x in qfile.read_text().splitlines() if x.strip()])
    for r in rows:
        print(f"{r['id']:4} {'right' if r['correct'] else 'wrong':5} {'cited' if r['cited'] else '-':5} {r['answer']!r} (gold {r['gold']})")
    total = {"correct_and_cited": sum(r["correct"] and r["cited"] for r in rows), "questions": len(rows)}
    print(json.dumps(total))
    if args.json:
        args.json.write_text(json.dumps({**total, "run": args.run_dir.name, "rows": rows}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
