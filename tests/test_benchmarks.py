"""Benchmark adapters on the real files (AGENTFLOW_DATASETS), `agentflow data prepare`, and bad input."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from flows.cli.data import data_app
from infra.data.benchmarks import (
    BENCHMARKS,
    BackendRequiredError,
    DatasetError,
    ensure_backends,
    load_benchmark,
    load_prepared,
    prepare,
    solve_game24,
)
from infra.tools.search import load_corpus
from tasks.contracts import Question
from tasks.eval.scorers import check_game24, score_question

# the record counts of shared/datasets/MANIFEST.md; corpus sizes as pooled (unique title+text) or as shipped
EXPECTED = {
    "gsm8k": (1319, None),
    "game24": (300, None),
    "game24-1362": (1362, None),
    "hotpotqa": (500, 4858),
    "hotpotqa-train": (100, 994),
    "musique": (100, 1839),
    "musique-train": (100, 1890),
    "bamboogle": (125, None),
    "aime24": (30, None),
    "amc23": (40, None),
    "math500": (500, None),
}

_cache: dict[str, object] = {}


def loaded(name: str, root: Path):
    if name not in _cache:
        _cache[name] = load_benchmark(name, root)
    return _cache[name]


def test_every_dataset_benchmark_is_tested():
    assert set(BENCHMARKS) == set(EXPECTED) | {"world"}


# ------------------------------------------------------------------------------- the real files


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_counts_match_manifest(name, datasets_dir):
    b = loaded(name, datasets_dir)
    n_questions, n_corpus = EXPECTED[name]
    assert len(b.questions) == n_questions == b.meta["counts"]["questions"]
    if n_corpus is None:
        assert b.corpus is None
    else:
        assert len(b.corpus) == n_corpus
    ids = [q["id"] for q in b.questions]
    assert len(set(ids)) == len(ids)
    for q in b.questions:
        Question.model_validate(q)  # the batch input contract
        assert q["benchmark"] == name and q["id"].startswith(name + "-")
        assert isinstance(q["aliases"], list) and q["answer"]


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_gold_answers_score_full_marks(name, datasets_dir):
    b = loaded(name, datasets_dir)
    for q in b.questions:
        if q["answer_type"] == "game24":
            assert q["solutions"], f"{q['id']} has no reference solution"
            for sol in q["solutions"]:
                s = score_question(q, sol)
                assert s.correct and s.value == 1.0, (q["id"], sol, s.detail)
            continue
        preds = [q["answer"]] + q["aliases"]
        if q["answer_type"] in ("number", "math"):
            preds.append(f"Working... so the final answer is $\\boxed{{{q['answer']}}}$.")
        for pred in preds:
            s = score_question(q, pred)
            assert s.correct and s.value == 1.0, (q["id"], pred, s.detail)


def test_game24_reference_solutions_are_exact(datasets_dir):
    b = loaded("game24-1362", datasets_dir)
    first = b.questions[0]
    assert first["numbers"] == [1, 1, 4, 6] and first["rank"] == 1
    assert first["human_solved_rate"] == pytest.approx(0.992)
    assert check_game24(solve_game24([3, 3, 8, 8]), [3, 3, 8, 8])[0]
    assert solve_game24([1, 1, 1, 1]) is None
    assert loaded("game24", datasets_dir).questions[0]["answer"] == "1 1 1 8"


@pytest.mark.parametrize("name, src_file", [
    ("hotpotqa", "hotpotqa/dev_subsampled.jsonl"),
    ("musique", "musique/musique_qa_100.json"),
    ("musique-train", "musique/musique_train.json"),
])
def test_corpus_contains_supporting_paragraphs(name, src_file, datasets_dir):
    b = loaded(name, datasets_dir)
    docs = {(d["title"], d["text"]): d["id"] for d in b.corpus}
    raw_path = datasets_dir / src_file
    raw = ([json.loads(x) for x in raw_path.read_text().splitlines() if x.strip()] if src_file.endswith(".jsonl")
           else json.loads(raw_path.read_text()))
    by_id = {q["source_id"]: q for q in b.questions}
    checked = 0
    for rec in raw:
        sid = rec.get("question_id") or rec.get("id")
        paras = rec.get("contexts") or rec.get("paragraphs")
        for p in paras:
            if p["is_supporting"]:
                key = (p["title"].strip(), p["paragraph_text"].strip())
                assert key in docs, (sid, p["title"])
                assert docs[key] in by_id[sid]["gold_doc_ids"]
                checked += 1
        assert len(by_id[sid]["gold_doc_ids"]) == sum(bool(p["is_supporting"]) for p in paras)
    assert checked >= 2 * len(raw)


def test_hotpotqa_train_supporting_titles_in_corpus(datasets_dir):
    b = loaded("hotpotqa-train", datasets_dir)
    titles = {d["title"]: d["id"] for d in b.corpus}
    for q in b.questions:
        assert q["supporting_titles"] and all(t in titles for t in q["supporting_titles"])
        assert q["gold_doc_ids"] == [titles[t] for t in q["supporting_titles"]]


def test_musique_keeps_aliases(datasets_dir):
    q = loaded("musique", datasets_dir).questions[0]
    assert q["aliases"] == ["leading role", "star", "leading actress", "lead"]
    assert score_question(q, "leading actress").correct


def test_prepare_is_deterministic_and_loadable(datasets_dir, tmp_path):
    a = prepare("hotpotqa", datasets_dir, tmp_path / "a")
    b = prepare("hotpotqa", datasets_dir / "hotpotqa", tmp_path / "b")  # the benchmark's own folder works too
    for f in ("questions.jsonl", "corpus.jsonl", "manifest.json"):
        assert (a / f).read_bytes() == (b / f).read_bytes(), f
    again = prepare("hotpotqa", datasets_dir, tmp_path / "a")
    assert (again / "questions.jsonl").read_bytes() == (b / "questions.jsonl").read_bytes()
    line = json.loads((a / "questions.jsonl").read_text().splitlines()[0])
    assert list(line) == sorted(line)
    docs = load_corpus(a / "corpus.jsonl")  # the search index's own reader accepts it
    assert len(docs) == 4858
    manifest = json.loads((a / "manifest.json").read_text())
    assert manifest["sources"] == [{"path": "hotpotqa/dev_subsampled.jsonl", "bytes": 3312335,
                                    "sha256": manifest["sources"][0]["sha256"]}]
    assert len(manifest["sources"][0]["sha256"]) == 64
    back = load_prepared(a)
    assert len(back.questions) == 500 and len(back.corpus) == 4858 and back.name == "hotpotqa"
    assert not [p for p in a.iterdir() if p.name.startswith(".")]  # no temporary files left


def test_limit_takes_first_questions_and_their_paragraphs(datasets_dir, tmp_path):
    full = loaded("hotpotqa", datasets_dir)
    part = load_benchmark("hotpotqa", datasets_dir, limit=5)
    assert [q["id"] for q in part.questions] == [q["id"] for q in full.questions[:5]]
    assert part.questions == full.questions[:5]  # stable ids: the same records either way
    ids = {d["id"] for d in part.corpus}
    assert all(g in ids for q in part.questions for g in q["gold_doc_ids"])
    assert len(part.corpus) <= 50
    out = prepare("game24-1362", datasets_dir, tmp_path / "g", limit=3)
    assert len((out / "questions.jsonl").read_text().splitlines()) == 3
    assert json.loads((out / "manifest.json").read_text())["counts"] == {"questions": 3, "source_questions": 1362,
                                                                        "corpus": None}


def test_bamboogle_requires_web_search(datasets_dir, tmp_path):
    out = prepare("bamboogle", datasets_dir, tmp_path / "bb")
    assert not (out / "corpus.jsonl").exists()
    b = load_prepared(out)
    assert b.requires == ["web_search"] and all(q["requires"] == ["web_search"] for q in b.questions)
    with pytest.raises(BackendRequiredError, match="web-search backend"):
        ensure_backends(b, available=[])
    with pytest.raises(BackendRequiredError):
        ensure_backends(b.questions[0], available={"search"})
    ensure_backends(b, available={"web_search"})
    ensure_backends(load_benchmark("gsm8k", datasets_dir, limit=1), available=[])


def test_prepared_file_changed_is_refused(datasets_dir, tmp_path):
    out = prepare("aime24", datasets_dir, tmp_path / "a")
    with (out / "questions.jsonl").open("a") as fh:
        fh.write('{"id": "x", "question": "q", "answer": "1"}\n')
    with pytest.raises(DatasetError, match="changed since it was prepared"):
        load_prepared(out)


def test_cli_prepare(datasets_dir, tmp_path):
    r = CliRunner().invoke(data_app, ["prepare", "math500", "--from", str(datasets_dir), "--out", str(tmp_path / "m"),
                                      "--limit", "7"])
    assert r.exit_code == 0, r.output
    assert "7 of 500 questions" in r.output
    assert len((tmp_path / "m" / "questions.jsonl").read_text().splitlines()) == 7


# ------------------------------------------------------------------------------- the synthetic world


def test_world_adapter(tmp_path):
    from infra.data.world import generate_world, write_world

    write_world(generate_world(seed=5, n_questions=30, split="test"), tmp_path / "w")
    b = load_benchmark("world", tmp_path / "w")
    assert len(b.questions) == 30 and b.corpus and b.meta["answer_type"] == "world"
    doc_ids = {d["id"] for d in b.corpus}
    for q in b.questions:
        assert q["benchmark"] == "world" and q["answer_type"] in ("number", "entity", "yes_no")
        assert all(g in doc_ids for g in q["gold_doc_ids"])
        status = "uncertain" if q["expected_status"] == "uncertain" else "answered"
        assert score_question(q, q["answer"] or "", status=status).correct, q["id"]
    out = prepare("world", tmp_path / "w", tmp_path / "p", limit=4)
    assert len(load_prepared(out).questions) == 4


# ------------------------------------------------------------------------------- bad input (no datasets needed)


def _cli(*args: str):
    return CliRunner().invoke(data_app, list(args))


def test_missing_directory_and_file(tmp_path):
    r = _cli("prepare", "gsm8k", "--from", str(tmp_path / "nowhere"), "--out", str(tmp_path / "out"))
    assert r.exit_code != 0 and "no such file or directory" in r.output
    (tmp_path / "empty").mkdir()
    r = _cli("prepare", "gsm8k", "--from", str(tmp_path / "empty"), "--out", str(tmp_path / "out"))
    assert r.exit_code != 0 and "missing file 'test.jsonl'" in r.output
    r = _cli("prepare", "no-such-bench", "--from", str(tmp_path), "--out", str(tmp_path / "out"))
    assert r.exit_code == 2 and "unknown benchmark" in r.output
    assert not (tmp_path / "out").exists()


def test_malformed_jsonl_line_named_and_nothing_written(tmp_path):
    src = tmp_path / "gsm8k"
    src.mkdir()
    good = json.dumps({"question": "1+1?", "answer": "1+1=2\n#### 2"})
    (src / "test.jsonl").write_text(good + "\n" + good + "\n{not json\n")
    out = tmp_path / "out"
    out.mkdir()
    (out / "questions.jsonl").write_text("previous\n")
    r = _cli("prepare", "gsm8k", "--from", str(tmp_path), "--out", str(out))
    assert r.exit_code == 1
    assert f"{src / 'test.jsonl'}: line 3: not valid JSON" in r.output.replace("\n", "")
    assert (out / "questions.jsonl").read_text() == "previous\n"  # untouched
    assert sorted(p.name for p in out.iterdir()) == ["questions.jsonl"]


def test_bad_records_named_by_line(tmp_path):
    (tmp_path / "gsm8k").mkdir()
    (tmp_path / "gsm8k" / "test.jsonl").write_text(json.dumps({"question": "q", "answer": "no final"}) + "\n")
    with pytest.raises(DatasetError, match=r"test\.jsonl: line 1: field 'answer' has no '#### <number>'"):
        load_benchmark("gsm8k", tmp_path)
    (tmp_path / "musique").mkdir()
    rec = {"id": "a", "question": "q?", "answer": "x", "paragraphs": []}
    (tmp_path / "musique" / "musique_qa_100.json").write_text(
        "[\n" + json.dumps(rec) + ",\n" + json.dumps({"id": "b", "paragraphs": []}) + "\n]\n")
    with pytest.raises(DatasetError, match=r"musique_qa_100\.json: line 3: missing field 'question'"):
        load_benchmark("musique", tmp_path)
    (tmp_path / "musique" / "musique_qa_100.json").write_text("[\n" + json.dumps(rec) + ",\n{broken\n]\n")
    with pytest.raises(DatasetError, match=r"musique_qa_100\.json: line 3: not valid JSON"):
        load_benchmark("musique", tmp_path)
    (tmp_path / "game24").mkdir()
    (tmp_path / "game24" / "24.csv").write_text("Rank,Puzzles\n1,1 1 4 6\n2,1 2 x\n")
    with pytest.raises(DatasetError, match=r"24\.csv: line 3: "):
        load_benchmark("game24-1362", tmp_path)


def test_world_adapter_bad_input(tmp_path):
    (tmp_path / "w").mkdir()
    for name in ("questions.jsonl", "corpus.jsonl"):
        (tmp_path / "w" / name).write_text("")
    (tmp_path / "w" / "manifest.json").write_text('{"format": "something-else"}')
    with pytest.raises(DatasetError, match="not a world manifest"):
        load_benchmark("world", tmp_path / "w")
