"""The labeled verification set: the builder makes enough cases of every category from the real benchmark
files, and the runner's rates are right on a tiny hand-labeled set."""

from __future__ import annotations

import json
from collections import Counter

import pytest
from typer.testing import CliRunner

from flows.cli.verifier import verifier_eval_app
from flows.verifier_eval import CaseOutcome, run_cases, summarize
from infra.runtime.settings import load_settings
from tasks.contracts import MemoryItem
from tasks.eval.verifier_cases import build_cases, read_cases
from tasks.eval.verifier_seeds import CATEGORIES
from tests.conftest import MECHANICS_MODEL, MECHANICS_SETS

runner = CliRunner()


@pytest.fixture(scope="module")
def built(datasets_dir):
    return build_cases([datasets_dir], per_category=60, seed=0)


def test_builder_makes_300_cases_with_40_per_category_from_the_real_files(built):
    assert len(built) >= 300
    counts = Counter(c["category"] for c in built)
    assert all(counts[c] >= 40 for c in CATEGORIES), counts
    sources = Counter(c["source"] for c in built)
    assert sources["hotpotqa"] and sources["musique"] and sources["gsm8k"] and sources["world"], sources
    assert len({c["id"] for c in built}) == len(built)
    for c in built:
        assert {"id", "category", "question", "as_of", "plan", "result", "label"} <= set(c)
        kept = c["category"] == "correct" or c["perturbation"] in ("extra_passage", "world_injection_doc")  # quarantined
        assert c["label"] == ("accept" if kept else "reject")
        for m in c.get("memory") or []:
            MemoryItem.model_validate(m)
    json.dumps(built)


def test_builder_is_deterministic(datasets_dir, built):
    again = build_cases([datasets_dir], per_category=60, seed=0)
    assert json.dumps(again, sort_keys=True) == json.dumps(built, sort_keys=True)


def test_the_deterministic_verifier_meets_the_targets_on_the_built_set(built):
    report = summarize(run_cases(built, load_settings(), "deterministic"), "deterministic")
    per = report["per_category"]
    assert per["correct"]["false_reject_rate"] <= 0.05, per["correct"]
    for c in ("stale_source", "schema_error", "prompt_injection"):
        assert per[c]["false_accept_rate"] <= 0.02, (c, per[c])
    assert per["subtly_wrong"]["false_accept_rate"] <= 0.10, per["subtly_wrong"]  # the rest needs a judge
    # a notice beside the cited passage is quarantined and the step kept; nothing accepted keeps instruction-like text
    beside = [c for c in built if c["perturbation"] in ("extra_passage", "world_injection_doc")]
    assert beside and all(c["label"] == "accept" for c in beside)
    assert per["prompt_injection"]["false_reject_rate"] <= 0.05, per["prompt_injection"]
    assert report["overall"]["injection_admitted"] == 0
    assert report["model_calls_per_case"] == 0


def test_runner_rates_on_a_tiny_hand_labeled_set():
    rows = [("a", "correct", "accept", "accept"), ("b", "correct", "accept", "reject"), ("c", "correct", "accept", "accept"),
            ("d", "correct", "accept", "accept"), ("e", "stale_source", "reject", "reject"), ("f", "stale_source", "reject", "accept"),
            ("g", "schema_error", "reject", "reject")]
    outs = [CaseOutcome(i, cat, lab, pred, None, "", 10.0 * n, n % 2, 0.5) for n, (i, cat, lab, pred) in enumerate(rows)]
    r = summarize(outs, "deterministic")
    assert r["overall"]["confusion"] == {"accept": {"accept": 3, "reject": 1}, "reject": {"accept": 1, "reject": 2}}
    assert r["overall"]["false_reject_rate"] == 0.25 and r["overall"]["false_accept_rate"] == round(1 / 3, 4)
    assert r["per_category"]["correct"]["false_reject_rate"] == 0.25
    assert r["per_category"]["correct"]["false_accept_rate"] is None  # no reject-labeled case there
    assert r["per_category"]["stale_source"]["false_accept_rate"] == 0.5
    assert r["per_category"]["schema_error"]["false_accept_rate"] == 0.0
    assert r["mean_latency_ms"] == 30.0 and r["model_calls_per_case"] == round(3 / 7, 4)
    assert [e["id"] for e in r["errors"]] == ["b", "f"]


HAND = [
    {"id": "h1", "category": "correct", "question": "How deep is Lake Orvanne?", "as_of": "2025-01-01",
     "plan": {"step_id": 1, "sub_goal": "find the depth", "tool": "search", "args": {"query": "Lake Orvanne depth"}},
     "result": {"step_id": 1, "tool": "search", "status": "ok", "data": {
         "passages": [{"doc_id": "d1", "title": "Lake Orvanne", "text": "Lake Orvanne is 212 metres deep.", "published_at": "2024-03-01",
                       "score": 2.0}],
         "claim": {"subject": "Lake Orvanne", "attribute": "depth", "value": "212 metres", "cites": ["d1"]}}},
     "label": "accept"},
    {"id": "h2", "category": "subtly_wrong", "question": "How deep is Lake Orvanne?", "as_of": "2025-01-01",
     "plan": {"step_id": 1, "sub_goal": "find the depth", "tool": "search", "args": {"query": "Lake Orvanne depth"}},
     "result": {"step_id": 1, "tool": "search", "status": "ok", "data": {
         "passages": [{"doc_id": "d1", "title": "Lake Orvanne", "text": "Lake Orvanne is 212 metres deep.", "published_at": "2024-03-01",
                       "score": 2.0}],
         "claim": {"subject": "Lake Orvanne", "attribute": "depth", "value": "221 metres", "cites": ["d1"]}}},
     "label": "reject"},
    {"id": "h3", "category": "schema_error", "question": "?", "as_of": "2025-01-01",
     "plan": {"step_id": 1, "sub_goal": "x", "tool": "python", "args": {"code": "print(1)"}},
     "result": {"step_id": 1, "tool": "python", "status": "finished"}, "label": "reject"},
    {"id": "h4", "category": "correct", "question": "labelled wrongly on purpose", "as_of": "2025-01-01",
     "plan": {"step_id": 1, "sub_goal": "x", "tool": "python", "args": {"code": "print(2)"}},
     "result": {"step_id": 1, "tool": "python", "status": "ok", "data": {"stdout": "3\n", "stderr": "", "exit_code": 0}},
     "label": "accept"},
]


def test_run_command_on_a_hand_labeled_file(tmp_path):
    path = tmp_path / "hand.jsonl"
    path.write_text("".join(json.dumps(c) + "\n" for c in HAND))
    out = tmp_path / "report.json"
    res = runner.invoke(verifier_eval_app, ["run", "--labeled", str(path), "--verifier", "deterministic", "--json",
                                            "--out", str(out)])
    assert res.exit_code == 0, res.output
    report = json.loads(out.read_text())
    assert json.loads(res.output[res.output.index("{"):]) == report
    assert report["overall"]["confusion"] == {"accept": {"accept": 1, "reject": 1}, "reject": {"accept": 0, "reject": 2}}
    assert report["per_category"]["correct"]["false_reject_rate"] == 0.5
    assert report["per_category"]["subtly_wrong"]["failure_types"] == {"citation_mismatch": 1}
    assert report["per_category"]["schema_error"]["failure_types"] == {"schema": 1}
    assert report["errors"][0]["id"] == "h4" and report["errors"][0]["failure_type"] == "recomputation"
    plain = runner.invoke(verifier_eval_app, ["run", "--labeled", str(path), "--verifier", "deterministic"])
    assert plain.exit_code == 0 and "false" in plain.output.lower() and "Confusion" in plain.output


def test_build_command_and_bad_inputs(tmp_path, datasets_dir):
    out = tmp_path / "cases.jsonl"
    res = runner.invoke(verifier_eval_app, ["build", "--out", str(out), "--from", str(datasets_dir / "hotpotqa"),
                                            "--from", str(datasets_dir / "gsm8k"), "--per-category", "5", "--no-world"])
    assert res.exit_code == 0, res.output
    cases = read_cases(out)
    assert Counter(c["category"] for c in cases) == {c: 5 for c in CATEGORIES}
    assert {c["source"] for c in cases} <= {"hotpotqa", "gsm8k"}
    bad = runner.invoke(verifier_eval_app, ["build", "--out", str(out), "--from", str(tmp_path), "--no-world"])
    assert bad.exit_code == 2 and "no usable benchmark files" in bad.output
    written = out.read_bytes()
    bad = runner.invoke(verifier_eval_app, ["build", "--out", str(out), "--from", str(datasets_dir / "gsm8k"), "--no-world"])
    assert bad.exit_code == 2 and "only GSM8K programs" in bad.output and "hotpotqa/ or musique/" in bad.output
    assert out.read_bytes() == written  # the refused build left the earlier file as it was
    (tmp_path / "broken.jsonl").write_text('{"id": 1}\n')
    bad = runner.invoke(verifier_eval_app, ["run", "--labeled", str(tmp_path / "broken.jsonl"), "--verifier", "deterministic"])
    assert bad.exit_code == 2 and "needs id, category" in bad.output
    bad = runner.invoke(verifier_eval_app, ["run", "--labeled", str(out), "--verifier", "oracle"])
    assert bad.exit_code == 2


@pytest.mark.slow
def test_the_embedded_model_as_judge_on_a_few_cases(built):
    """LLM-only with the real embedded model: it runs, counts one model call per case and is marked not independent."""
    subset = [c for c in built if c["category"] in ("correct", "prompt_injection")][:1] + \
             [c for c in built if c["category"] == "prompt_injection"][:1]
    settings = load_settings(None, MECHANICS_SETS, **{"models.verifier": {"backend": "embedded", "model": MECHANICS_MODEL}})
    outs = run_cases(subset, settings, "llm")
    assert all(o.model_calls == 1 for o in outs) and all(o.failure_type != "error" for o in outs), outs
    assert all(o.confidence <= settings.verifier.judge_confidence_cap for o in outs)
