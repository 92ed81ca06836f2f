"""The unseen-questions check (flows/bench/unseen.py): what it builds, and how it grades a batch run's answers."""

from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.parquet as pq

from flows.bench.unseen import GSM8K_LINES, HERE, build, grade, main


def test_build_writes_six_lookups_and_six_word_problems_the_tables_never_use(tmp_path, datasets_dir):
    qs = build(tmp_path, datasets_dir)
    assert [q["id"] for q in qs] == [f"L{i}" for i in range(1, 7)] + [f"W{i}" for i in range(1, 7)]
    assert min(GSM8K_LINES) >= 50  # the tables run GSM8K's first 50 questions
    tables = {json.loads(x)["question"] for x in (datasets_dir / "gsm8k" / "test.jsonl").read_text().splitlines()[:50]}
    assert not tables & {q["question"] for q in qs}
    assert all(q["answer_type"] == "number" and q["answer"].replace(",", "").isdigit() for q in qs[6:])  # GSM8K's "#### N"
    assert (tmp_path / "corpus.jsonl").read_text() == (HERE / "corpus.jsonl").read_text()
    assert [json.loads(x)["id"] for x in (tmp_path / "questions.jsonl").read_text().splitlines()] == [q["id"] for q in qs]


def _run(tmp_path, rows):
    (tmp_path / "answers").mkdir()
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "answers" / "part-0.parquet")
    return tmp_path


def test_grade_counts_an_answer_only_when_it_is_right_and_cited(tmp_path):
    questions = [{"id": "L1", "answer": "412 metres", "answer_type": "number"},
                 {"id": "L4", "answer": "Mirela Osk", "answer_type": "text"},
                 {"id": "W1", "answer": "55", "answer_type": "number"},
                 {"id": "W2", "answer": "78", "answer_type": "number"}]
    run = _run(tmp_path, [{"task_id": "L1", "answer": "412", "status": "answered", "n_citations": 1},
                          {"task_id": "L4", "answer": "Mirela Osk", "status": "answered", "n_citations": 0},
                          {"task_id": "W1", "answer": "54", "status": "answered", "n_citations": 1}])
    rows = {r["id"]: r for r in grade(run, questions)}
    assert rows["L1"]["correct"] and rows["L1"]["cited"]
    assert rows["L4"]["correct"] and not rows["L4"]["cited"]  # right, but not cited
    assert not rows["W1"]["correct"] and not rows["W2"]["correct"] and rows["W2"]["answer"] is None  # wrong; missing


def test_score_without_a_run_says_what_is_missing_and_fails(tmp_path, capsys):
    assert main(["score", str(tmp_path / "nope")]) == 2
    assert "run `build`, then `agentflow batch`" in capsys.readouterr().err
