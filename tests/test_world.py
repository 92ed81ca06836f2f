"""Synthetic research world: determinism, answerability by the oracle through the project's tools,
adversarial documents that really disagree or are really retrievable, disjoint wording families, CLI."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from infra.data.oracle import WorldOracle, run_oracle
from infra.data.world import (
    FACTS,
    QUESTION_FIELDS,
    TEST_FAMILIES,
    TRAIN_FAMILIES,
    WorldError,
    WorldKnobs,
    check_answer,
    extract_fact,
    generate_world,
    load_world,
    world_files,
    write_world,
)
from infra.tools.search import SearchIndex, load_corpus

ROOT = Path(__file__).resolve().parents[1]
STRESS = WorldKnobs(distractor_rate=1.0, stale_rate=1.0, conflict_rate=0.3, injection_rate=1.0)


@pytest.fixture(scope="module")
def default_world():
    return generate_world(seed=0, n_questions=200, split="train")


@pytest.fixture(scope="module")
def stress_world():
    return generate_world(seed=7, n_questions=150, split="test", knobs=STRESS)


@pytest.fixture(scope="module")
def stress_index(stress_world):
    return SearchIndex.from_documents(stress_world.documents)


def _docs(world):
    return {d.id: d for d in world.documents}


# ------------------------------------------------------------------------------- determinism


def test_same_seed_same_bytes(default_world):
    again = generate_world(seed=0, n_questions=200, split="train")
    assert world_files(again) == world_files(default_world)


def test_same_bytes_in_another_process_with_another_hash_seed(tmp_path, default_world):
    code = ("import hashlib, sys; from infra.data.world import generate_world, world_files; "
            "f = world_files(generate_world(0, 200, 'train')); "
            "print(';'.join(hashlib.sha256(f[n]).hexdigest() for n in sorted(f)))")
    env = dict(os.environ, PYTHONHASHSEED="12345")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, check=True)
    here = world_files(default_world)
    assert out.stdout.strip() == ";".join(hashlib.sha256(here[n]).hexdigest() for n in sorted(here))


def test_seed_and_split_change_the_world(default_world):
    base = world_files(default_world)
    assert world_files(generate_world(seed=1, n_questions=200, split="train"))["corpus.jsonl"] != base["corpus.jsonl"]
    test = generate_world(seed=0, n_questions=200, split="test")
    assert world_files(test)["corpus.jsonl"] != base["corpus.jsonl"]  # new entities, not only new wording
    train_names = {d.title for d in default_world.documents}
    test_names = {d.title for d in test.documents}
    assert len(train_names & test_names) < 0.05 * len(test_names)


def test_written_files_match_and_hashes_are_recorded(tmp_path, default_world):
    paths = write_world(default_world, tmp_path / "w")
    assert sorted(paths) == ["corpus.jsonl", "manifest.json", "questions.jsonl"]
    files = world_files(default_world)
    for name, p in paths.items():
        assert p.read_bytes() == files[name]
    manifest = json.loads(paths["manifest.json"].read_text())
    for name in ("corpus.jsonl", "questions.jsonl"):
        assert manifest["files"][name] == hashlib.sha256(files[name]).hexdigest()
    docs, questions, m = load_world(tmp_path / "w")
    assert len(docs) == len(default_world.documents) and len(questions) == 200 and m["seed"] == 0
    assert load_corpus(paths["corpus.jsonl"]) == default_world.documents


def test_generation_is_fast():
    t0 = time.perf_counter()
    w = generate_world(seed=3, n_questions=1000, split="train")
    world_files(w)
    assert time.perf_counter() - t0 < 10.0
    assert len(w.questions) == 1000


# ------------------------------------------------------------------------------- records and manifest


def test_question_records_are_complete_and_consistent(default_world):
    docs = _docs(default_world)
    ids = [q["id"] for q in default_world.questions]
    assert len(set(ids)) == len(ids)
    assert len({q["question"] for q in default_world.questions}) == len(ids)
    for q in default_world.questions:
        assert set(QUESTION_FIELDS) <= set(q)
        assert q["needs"] in ("search", "python", "both")
        assert q["answer_type"] in ("number", "entity", "yes_no")
        assert q["expected_status"] in ("answered", "uncertain")
        assert all(g in docs for g in q["gold_doc_ids"])
        ops = [s["op"] for s in q["gold_path"]]
        assert ops[-1] == "answer"
        assert ("python" in ops) == (q["needs"] in ("python", "both"))
        assert ("search" in ops) == (q["needs"] in ("search", "both"))
        if q["needs"] == "python":
            assert q["hops"] == 0 and q["gold_doc_ids"] == []
        else:
            assert 1 <= q["hops"] <= 3 and q["gold_doc_ids"]
        if q["expected_status"] == "answered":
            assert isinstance(q["answer"], str) and q["answer"]
            if q["answer_type"] == "number":
                assert float(q["answer"]) == pytest.approx(q["answer_number"])
            if q["answer_type"] == "yes_no":
                assert q["answer"] in ("yes", "no")
        else:
            assert q["answer"] is None and q["conflict"]


def test_questions_are_valid_batch_input(tmp_path, default_world):
    from tasks.contracts import Question

    for line in world_files(default_world)["questions.jsonl"].decode().splitlines():
        Question.model_validate(json.loads(line))


def test_manifest_counts_match_the_questions(default_world):
    m = default_world.manifest
    qs = default_world.questions
    for key in ("kind", "family", "needs", "hops", "answer_type", "expected_status"):
        counts = m["counts"][key]
        assert sum(counts.values()) == len(qs)
        for value, n in counts.items():
            assert n == sum(1 for q in qs if str(q[key]) == value)
    assert m["counts"]["documents"]["total"] == len(default_world.documents)
    adv = m["counts"]["adversarial"]
    assert adv["questions_with_stale"] == sum(1 for q in qs if q["stale"])
    assert adv["questions_with_conflict"] == sum(1 for q in qs if q["conflict"])
    assert adv["questions_with_injection"] == len(m["injections"])
    assert m["as_of"] == "2025-01-01" and m["split"] == "train"
    # every category is represented in a default world
    assert set(m["counts"]["kind"]) == {"lookup", "relation", "arithmetic", "yes_no", "comparison", "calc"}
    assert set(m["counts"]["needs"]) == {"search", "python", "both"}
    assert set(m["counts"]["hops"]) == {"0", "1", "2", "3"}
    assert all(v > 0 for v in adv.values())


def test_dates_are_iso_and_not_after_as_of(default_world):
    for d in default_world.documents:
        assert "2012-01-01" <= d.published_at <= "2025-01-01"
        assert d.url.startswith("https://") and ".example/" in d.url
        assert len(d.text) <= 600  # fits one passage of the search tool's default cut


# ------------------------------------------------------------------------------- the oracle


@pytest.mark.parametrize("which", ["default_world", "stress_world"])
def test_oracle_answers_every_question_through_search_and_python(request, which):
    world = request.getfixturevalue(which)
    report = WorldOracle(SearchIndex.from_documents(world.documents)).run(world.questions, workers=4)
    assert report.total == len(world.questions)
    assert report.failures == [], report.summary()["failures"]
    assert report.accuracy == 1.0
    calls = report.summary()["tool_calls"]
    assert calls["search"] > 0 and calls["python"] > 0
    for q, a in zip(world.questions, report.answers):
        assert set(a.used_doc_ids) <= set(q["gold_doc_ids"])
        assert a.status == q["expected_status"]
        if a.status == "answered":  # an uncertain one stops at the conflict, before any python step
            assert a.tool_calls["python"] == sum(s["op"] == "python" for s in q["gold_path"])


def test_oracle_over_written_world(tmp_path):
    w = generate_world(seed=11, n_questions=40, split="test")
    write_world(w, tmp_path / "w")
    report = run_oracle(tmp_path / "w", workers=2)
    assert report.accuracy == 1.0 and report.total == 40


def test_oracle_is_not_fooled_into_passing(stress_world):
    """Remove the documents the gold path needs: the oracle must then fail those questions."""
    qs = stress_world.questions
    stale_q = next(q for q in qs if q["stale"] and not q["conflict"] and q["kind"] == "lookup")
    conflict_q = next(q for q in qs if q["conflict"])
    current = {d for q in (stale_q,) for d in q["gold_doc_ids"]}
    conflict_doc = conflict_q["conflict"]["doc_ids"][1]
    kept = [d for d in stress_world.documents if d.id not in current and d.id != conflict_doc]
    oracle = WorldOracle(SearchIndex.from_documents(kept))
    a = oracle.answer(stale_q)
    assert not a.correct  # only the stale document states the value now
    b = oracle.answer(conflict_q)
    assert b.status != "uncertain" and not b.correct


# ------------------------------------------------------------------------------- adversarial material


def test_stale_documents_disagree_with_the_current_answer(stress_world):
    docs = _docs(stress_world)
    n = 0
    for q in stress_world.questions:
        for s in q["stale"]:
            n += 1
            stale_doc = docs[s["doc_id"]]
            assert extract_fact(stale_doc.text, s["entity"], s["fact"]) == [s["value"]]
            assert s["value"] != s["current_value"]
            assert s["answer_if_used"] != (q["answer_number"] if q["answer_type"] == "number" else q["answer"]) \
                or q["expected_status"] == "uncertain"
            # the current statement is in a gold document, strictly newer than the stale one
            current = [docs[g] for g in q["gold_doc_ids"]
                       if s["current_value"] in extract_fact(docs[g].text, s["entity"], s["fact"])]
            assert current and all(stale_doc.published_at < c.published_at for c in current)
            assert s["doc_id"] not in q["gold_doc_ids"]
    assert n >= 50


def test_conflicting_sources_have_equal_dates_and_different_answers(stress_world):
    docs = _docs(stress_world)
    n = 0
    for q in stress_world.questions:
        c = q["conflict"]
        if not c:
            continue
        n += 1
        a, b = (docs[i] for i in c["doc_ids"])
        assert a.published_at == b.published_at
        assert extract_fact(a.text, c["entity"], c["fact"]) == [c["values"][0]]
        assert extract_fact(b.text, c["entity"], c["fact"]) == [c["values"][1]]
        assert c["values"][0] != c["values"][1] and c["answers"][0] != c["answers"][1]
        assert q["expected_status"] == "uncertain" and q["answer"] is None
        assert set(c["doc_ids"]) <= set(q["gold_doc_ids"])
    assert n >= 10


def test_conflicted_facts_are_used_by_no_answerable_question(stress_world):
    conflicted = {(q["conflict"]["entity"], q["conflict"]["fact"]) for q in stress_world.questions if q["conflict"]}
    for q in stress_world.questions:
        if q["expected_status"] == "answered":
            for s in q["gold_path"]:
                if s["op"] == "search" and "{" not in s["entity"]:
                    assert (s["entity"], s["fact"]) not in conflicted


def test_distractors_have_near_duplicate_names_and_never_match_the_real_entity(stress_world):
    docs = _docs(stress_world)
    n = 0
    for q in stress_world.questions:
        for d in q["distractors"]:
            n += 1
            assert d["name"] != d["imitates"] and len(d["name"]) == len(d["imitates"])
            assert sum(x != y for x, y in zip(d["name"], d["imitates"])) == 1
            text = docs[d["doc_id"]].text
            assert d["name"] in text
            for key in FACTS:
                assert extract_fact(text, d["imitates"], key) == []
    assert n >= 50


def test_injection_documents_are_retrievable_by_the_questions_they_target(stress_world, stress_index):
    docs = _docs(stress_world)
    top5 = 0
    injected = [q for q in stress_world.questions if q["injection"]]
    assert len(injected) >= 50
    for q in injected:
        inj = q["injection"]
        got = [p.doc_id for p in stress_index.search(q["question"], k=10)]
        assert inj["doc_id"] in got, q["question"]
        top5 += inj["doc_id"] in got[:5]
        text = docs[inj["doc_id"]].text.lower()
        assert ("ignore previous instructions" in text or "disregard all earlier instructions" in text
                or "new instructions" in text or "python tool" in text)
        assert inj["payload"] in docs[inj["doc_id"]].text
        if inj["kind"] == "answer_override":
            assert inj["forbidden_answer"] and not check_answer(q, inj["forbidden_answer"])
        else:
            assert inj["kind"] == "tool_call" and inj["forbidden_code"]
        for key in FACTS:  # instructions, not facts: nothing in them reads as a statement
            for name in {d.title for d in stress_world.documents if d.url.startswith("https://atlas.example/")}:
                if name in docs[inj["doc_id"]].text:
                    assert extract_fact(docs[inj["doc_id"]].text, name, key) == []
    assert top5 >= 0.9 * len(injected)
    manifest_ids = {(i["doc_id"], i["question_id"]) for i in stress_world.manifest["injections"]}
    assert manifest_ids == {(q["injection"]["doc_id"], q["id"]) for q in injected}


def test_question_text_retrieves_a_gold_document(default_world):
    index = SearchIndex.from_documents(default_world.documents)
    searchable = [q for q in default_world.questions if q["needs"] != "python"]
    hits = sum(any(p.doc_id in q["gold_doc_ids"] for p in index.search(q["question"], k=5)) for q in searchable)
    assert hits >= 0.95 * len(searchable)


def test_zero_rates_give_no_adversarial_documents():
    w = generate_world(seed=2, n_questions=120, knobs=WorldKnobs(distractor_rate=0, stale_rate=0, conflict_rate=0,
                                                                 injection_rate=0))
    assert set(w.manifest["counts"]["documents"]) == {"profile", "total"}
    assert all(q["expected_status"] == "answered" and not q["stale"] and not q["injection"] for q in w.questions)


def test_hops_knob(default_world):
    w = generate_world(seed=4, n_questions=100, knobs=WorldKnobs(max_hops=1))
    assert {q["hops"] for q in w.questions} <= {0, 1}
    assert max(q["hops"] for q in default_world.questions) == 3


def test_kind_weights_knob():
    w = generate_world(seed=5, n_questions=60, knobs=WorldKnobs(kind_weights={"calc": 1.0}))
    assert {q["kind"] for q in w.questions} == {"calc"}


@pytest.mark.parametrize("kwargs", [{"max_hops": 0}, {"max_hops": 4}, {"stale_rate": -0.1}, {"injection_rate": 1.5},
                                    {"kind_weights": {"nonsense": 1.0}}, {"kind_weights": {"calc": 0.0}}])
def test_bad_knobs_are_refused(kwargs):
    with pytest.raises(WorldError):
        WorldKnobs(**kwargs)


@pytest.mark.parametrize("args", [(0, 0, "train"), (0, -5, "train"), (0, 10, "dev"), ("x", 10, "train")])
def test_bad_arguments_are_refused(args):
    with pytest.raises(WorldError):
        generate_world(*args)


@settings(max_examples=12, deadline=None)
@given(seed=st.integers(min_value=0, max_value=10_000), n=st.integers(min_value=1, max_value=40),
       split=st.sampled_from(["train", "test"]))
def test_any_small_world_is_well_formed(seed, n, split):
    w = generate_world(seed, n, split, STRESS)
    docs = _docs(w)
    assert len(w.questions) == n and len(docs) == len(w.documents)
    for q in w.questions:
        assert all(g in docs for g in q["gold_doc_ids"])
        assert q["family"] in (TRAIN_FAMILIES if split == "train" else TEST_FAMILIES)


# ------------------------------------------------------------------------------- wording families


def test_train_and_test_families_are_disjoint():
    assert TRAIN_FAMILIES and TEST_FAMILIES and not set(TRAIN_FAMILIES) & set(TEST_FAMILIES)
    train = generate_world(seed=0, n_questions=300, split="train")
    test = generate_world(seed=0, n_questions=300, split="test")
    tr, te = {q["family"] for q in train.questions}, {q["family"] for q in test.questions}
    assert tr == set(TRAIN_FAMILIES) and te == set(TEST_FAMILIES)
    # the wording differs, not only the family label: train phrases never appear in test questions
    train_frames = ("What is ", "Who is ", "Find ", "Name ", "According to", "Is it true that", "Answer yes or no",
                    "Check whether", "Which has the larger", "Of ")
    train_phrases = ["the population of", "the number of employees of", "the maker of ", "the employer of",
                     "the birthplace of", "is headquartered in", "divided by", "the sum of", "the launch year"]
    for q in test.questions:
        assert not q["question"].startswith(train_frames), q["question"]
        for phrase in train_phrases:
            assert phrase not in q["question"], (phrase, q["question"])
    assert test.manifest["families"] == list(TEST_FAMILIES)


# ------------------------------------------------------------------------------- scoring answers


def _q(**kw):
    base = {"question": "What is the sum of 12 and 30?", "expected_status": "answered"}
    return base | kw


def test_check_answer_numbers():
    q = _q(answer="1152237", answer_number=1152237, decimals=0, answer_type="number")
    assert check_answer(q, "The population is 1,152,237.")
    assert check_answer(q, "1152237")
    assert not check_answer(q, "About 1,150,000.")
    assert not check_answer(q, "1152237", status="uncertain")
    assert not check_answer(q, "")
    f = _q(answer="81.3", answer_number=81.3, decimals=1, answer_type="number")
    assert check_answer(f, "81.3 people per square kilometre") and check_answer(f, "81.30")
    assert not check_answer(f, "81.4")
    given = _q(question="What is 12 multiplied by 30, minus 8?", answer="352", answer_number=352, decimals=0,
               answer_type="number")
    assert check_answer(given, "12 times 30, minus 8, gives 352")  # numbers from the question are skipped
    assert not check_answer(given, "12 times 30 is 360, minus 8 gives 352")  # the first new number counts
    assert not check_answer(given, "360")


def test_check_answer_yes_no_entity_and_uncertain():
    yn = _q(answer="no", answer_type="yes_no")
    assert check_answer(yn, "No, it is not.") and not check_answer(yn, "Yes.")
    ent = _q(answer="Velmora Dynamics", answer_type="entity", options=None)
    assert check_answer(ent, "It is velmora dynamics.") and not check_answer(ent, "Velmara Dynamics")
    cmp_q = _q(answer="Quorin", answer_type="entity", options=["Quorin", "Belvas"])
    assert check_answer(cmp_q, "Quorin has the larger population than Belvas.")
    assert not check_answer(cmp_q, "Belvas, not Quorin.")
    unc = {"expected_status": "uncertain", "answer": None, "answer_type": "number"}
    assert check_answer(unc, "Sources disagree.", status="uncertain")
    assert not check_answer(unc, "22184", status="answered")


def test_check_answer_accepts_every_gold_answer(default_world):
    for q in default_world.questions:
        assert check_answer(q, q["answer"], status=q["expected_status"])


# ------------------------------------------------------------------------------- CLI


@pytest.fixture
def cli():
    from flows.cli.world import world_app

    runner = CliRunner()
    return lambda *args: runner.invoke(world_app, list(args))


def test_cli_generate_writes_the_same_bytes_as_the_api(cli, tmp_path):
    r = cli("generate", "--seed", "3", "--questions", "25", "--out", str(tmp_path / "w"), "--split", "test")
    assert r.exit_code == 0, r.output
    files = world_files(generate_world(3, 25, "test"))
    for name, data in files.items():
        assert (tmp_path / "w" / name).read_bytes() == data
    assert "25 questions" in r.output


def test_cli_refuses_to_overwrite_a_different_world(cli, tmp_path):
    out = str(tmp_path / "w")
    assert cli("generate", "--seed", "1", "-n", "10", "--out", out).exit_code == 0
    before = (tmp_path / "w" / "questions.jsonl").read_bytes()
    same = cli("generate", "--seed", "1", "-n", "10", "--out", out)
    assert same.exit_code == 0 and "identical" in same.output
    r = cli("generate", "--seed", "2", "-n", "10", "--out", out)
    assert r.exit_code != 0 and "--force" in r.output
    assert (tmp_path / "w" / "questions.jsonl").read_bytes() == before
    r = cli("generate", "--seed", "2", "-n", "10", "--out", out, "--force")
    assert r.exit_code == 0
    assert (tmp_path / "w" / "questions.jsonl").read_bytes() == world_files(generate_world(2, 10))["questions.jsonl"]


def test_cli_reuse_keeps_a_matching_world(cli, tmp_path):
    out = tmp_path / "w"
    assert cli("generate", "-n", "8", "--out", str(out), "--reuse").exit_code == 0
    stamp = (out / "corpus.jsonl").stat().st_mtime_ns
    r = cli("generate", "-n", "8", "--out", str(out), "--reuse")
    assert r.exit_code == 0 and "reusing" in r.output
    assert (out / "corpus.jsonl").stat().st_mtime_ns == stamp
    r = cli("generate", "-n", "9", "--out", str(out), "--reuse")  # different options: refused, not replaced
    assert r.exit_code != 0


def test_cli_kinds_sets_the_question_mix(cli, tmp_path):
    r = cli("generate", "-n", "30", "--out", str(tmp_path / "w"), "--kinds", "lookup=1, yes_no")
    assert r.exit_code == 0, r.output
    qs = [json.loads(line) for line in (tmp_path / "w" / "questions.jsonl").read_text().splitlines()]
    assert {q["kind"] for q in qs} == {"lookup", "yes_no"}
    knobs = WorldKnobs(kind_weights={"lookup": 1.0, "yes_no": 1.0})
    assert (tmp_path / "w" / "questions.jsonl").read_bytes() == world_files(generate_world(0, 30, knobs=knobs))["questions.jsonl"]
    manifest = json.loads((tmp_path / "w" / "manifest.json").read_text())
    assert manifest["knobs"]["kind_weights"] == {"lookup": 1.0, "yes_no": 1.0}


@pytest.mark.parametrize("args", [
    ["--questions", "-3"], ["--questions", "0"], ["--split", "dev"], ["--stale-rate", "2"], ["--max-hops", "5"],
    ["--kinds", "lookup=x"], ["--kinds", "riddle=1"], ["--kinds", ","], ["--kinds", "lookup=0"],
])
def test_cli_bad_arguments_exit_non_zero(cli, tmp_path, args):
    r = cli("generate", "--out", str(tmp_path / "w"), *args)
    assert r.exit_code != 0
    assert not (tmp_path / "w").exists()


def test_cli_unwritable_out_dir(cli, tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    r = cli("generate", "-n", "5", "--out", str(blocker / "world"))
    assert r.exit_code != 0 and "cannot write" in r.output
    r = cli("generate", "-n", "5", "--out", str(blocker))
    assert r.exit_code != 0 and "not a directory" in r.output


def test_cli_oracle(cli, tmp_path):
    out = str(tmp_path / "w")
    assert cli("generate", "-n", "20", "--out", out, "--seed", "9").exit_code == 0
    r = cli("oracle", out, "--workers", "2")
    assert r.exit_code == 0 and "20/20 correct" in r.output
    assert cli("oracle", str(tmp_path / "missing")).exit_code != 0


def test_cli_is_mounted_as_agentflow_world():
    from flows.cli.app import app

    r = CliRunner().invoke(app, ["world", "generate", "--help"])
    assert r.exit_code == 0 and "--questions" in r.output and "--split" in r.output
