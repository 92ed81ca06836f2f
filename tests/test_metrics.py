"""Evaluation metrics against values computed by hand."""

import math

import pytest

from tasks.eval.metrics import (
    NON_ANSWER_PREFIXES,
    accuracy_stats,
    bootstrap_ci,
    is_non_answer,
    outcome_counts,
    paired_difference,
    pareto_front,
    percentile,
    summarize,
    system_metrics,
)


def _row(system, seed, q, correct, **extra):
    return {"system": system, "seed": seed, "question_id": q, "correct": correct, **extra}


def test_accuracy_mean_and_std_over_seeds_and_bootstrap_over_questions():
    # seed 0: q1 right, q2 wrong -> 0.5; seed 1: both right -> 1.0
    rows = [_row("m", 0, "q1", True), _row("m", 0, "q2", False), _row("m", 1, "q1", True), _row("m", 1, "q2", True)]
    a = accuracy_stats(rows)
    assert a["per_seed"] == {"0": 0.5, "1": 1.0}
    assert a["mean"] == 0.75
    assert a["std"] == pytest.approx(math.sqrt(2 * 0.25 ** 2 / 1))  # sample std, ddof=1: 0.35355
    assert a["n_questions"] == 2 and a["n_seeds"] == 2
    # per-question means over seeds are q1=1.0, q2=0.5; a 2-point resample's mean is 0.5, 0.75 or 1.0
    assert a["ci95"] == [0.5, 1.0]


def test_one_seed_has_zero_std():
    a = accuracy_stats([_row("m", 3, "q1", True), _row("m", 3, "q2", False)])
    assert a["mean"] == 0.5 and a["std"] == 0.0 and a["per_seed"] == {"3": 0.5}


def test_bootstrap_interval_by_hand():
    assert bootstrap_ci([0.6, 0.6, 0.6]) == (0.6, 0.6)
    assert bootstrap_ci([]) is None
    # mean of two resampled values from {0, 1}: 0 (p=1/4), 0.5 (1/2), 1 (1/4) -> 2.5% and 97.5% points are 0 and 1
    assert bootstrap_ci([0.0, 1.0]) == (0.0, 1.0)
    # four values 0,0,0,1: P(mean <= 0.5) = 0.949, P(mean <= 0.75) = 0.996 -> the 97.5% point is 0.75
    assert bootstrap_ci([0.0, 0.0, 0.0, 1.0]) == (0.0, 0.75)
    # a fixed rng seed: the same values give the same interval
    vals = [0.1, 0.9, 0.4, 0.7, 0.3]
    assert bootstrap_ci(vals) == bootstrap_ci(vals)


def test_paired_difference_on_shared_questions():
    a = [_row("a", 0, "q1", True), _row("a", 1, "q1", True), _row("a", 0, "q2", True), _row("a", 1, "q2", False),
         _row("a", 0, "q3", False), _row("a", 0, "only-a", True)]
    b = [_row("b", 0, "q1", False), _row("b", 0, "q2", True), _row("b", 1, "q2", False), _row("b", 0, "q3", False)]
    d = paired_difference(a, b)
    # per question a: q1 1.0, q2 0.5, q3 0.0; b: q1 0.0, q2 0.5, q3 0.0 -> differences 1, 0, 0
    assert d["n_questions"] == 3
    assert d["mean_diff"] == pytest.approx(1 / 3)
    assert (d["a_better"], d["b_better"], d["ties"]) == (1, 0, 2)
    lo, hi = d["ci95"]
    assert lo == 0.0 and hi == 1.0  # a 3-point resample holds the 1 zero to three times


def test_percentiles_are_linear():
    vals = list(range(1, 21))
    assert percentile(vals, 50) == 10.5
    assert percentile(vals, 95) == pytest.approx(19.05)
    assert percentile([], 50) is None


def test_outcome_counts_from_step_records():
    records = [
        {"role": "planner", "detail": "find"},
        {"role": "executor", "detail": "ok", "tool": "search"},
        {"role": "verifier", "accepted": True},
        {"role": "executor", "detail": "error: invalid arguments for python: 'code' is required", "tool": "python"},
        {"role": "verifier", "accepted": False},
        {"role": "executor", "detail": "timeout: 10 s", "tool": "python"},
        {"role": "verifier", "accepted": False},
    ]
    c = outcome_counts(records, "212 metres", cited_steps=[1], accepted_steps=[1])
    assert c == {"tool_calls": 3, "wrong_tool_calls": 2, "verifier_calls": 3, "verifier_rejections": 2,
                 "missing_evidence": 0}
    assert outcome_counts(records, "212 metres", [2], [1])["missing_evidence"] == 1  # cites a rejected step
    assert outcome_counts([], "42", [], [])["missing_evidence"] == 1  # a claim with no citation at all
    assert outcome_counts([], "Stopped before answering (budget_exhausted): x", [], [])["missing_evidence"] == 0


def test_non_answer_prefixes_match_the_systems_wording():
    from tasks.modules.generator import NO_EVIDENCE

    assert is_non_answer(NO_EVIDENCE) and is_non_answer("") and is_non_answer("  ")
    assert is_non_answer("Stopped before answering (error): boom")
    assert not is_non_answer("42")
    assert len(NON_ANSWER_PREFIXES) == 2


def test_system_metrics_by_hand():
    rows = [
        _row("m", 0, "q1", True, score=1.0, status="answered", stop_reason="answered", iterations=2, latency_s=1.0,
             tokens_total=100, tokens_planner=60, tokens_generator=40, tool_calls=1, wrong_tool_calls=0,
             missing_evidence=0, verifier_calls=1, verifier_rejections=0, attribution_module=None),
        _row("m", 0, "q2", False, score=0.0, status="budget_exhausted", stop_reason="budget_exhausted", iterations=4,
             latency_s=3.0, tokens_total=300, tokens_planner=200, tokens_executor=50, tokens_generator=50, tool_calls=3,
             wrong_tool_calls=2, missing_evidence=0, verifier_calls=3, verifier_rejections=2,
             attribution_module="budget", attribution_cause="steps"),
        _row("m", 1, "q1", False, score=0.0, status="answered", stop_reason="answered", iterations=1, latency_s=2.0,
             tokens_total=200, tokens_planner=100, tokens_generator=100, tool_calls=0, wrong_tool_calls=0,
             missing_evidence=1, verifier_calls=0, verifier_rejections=0, attribution_module="planner",
             attribution_cause="missing_step"),
    ]
    m = system_metrics(rows)
    assert m["correct"] == 1 and m["rows"] == 3
    assert m["tokens"]["total"] == 600 and m["tokens"]["per_question"] == 200
    assert m["tokens"]["by_role"] == {"planner": 360, "executor": 50, "verifier": 0, "generator": 190}
    assert m["tokens_per_correct"] == 600
    assert m["latency_s"]["p50"] == 2.0 and m["latency_s"]["p95"] == pytest.approx(2.9)
    assert m["mean_iterations"] == pytest.approx(7 / 3)
    assert m["wrong_tool_calls"] == 2 and m["tool_calls"] == 4
    assert m["missing_evidence"] == 1 and m["missing_evidence_rate"] == pytest.approx(1 / 3)
    assert m["verifier_rejection_rate"] == pytest.approx(2 / 4)
    assert m["stop_reasons"] == {"answered": 2, "budget_exhausted": 1}
    assert m["failure_attribution"]["budget"] == 1 and m["failure_attribution"]["planner"] == 1
    assert m["failure_causes"] == {"budget/steps": 1, "planner/missing_step": 1}
    assert m["answered_rate"] == pytest.approx(2 / 3)
    assert m["accuracy"]["per_seed"] == {"0": 0.5, "1": 0.0}


def test_no_correct_answer_has_no_tokens_per_correct_and_summary_pairs_systems():
    rows = [_row("a", 0, "q1", False, tokens_total=10), _row("b", 0, "q1", True, tokens_total=5)]
    s = summarize(rows, ["b", "a"])
    assert list(s["systems"]) == ["b", "a"]
    assert s["systems"]["a"]["tokens_per_correct"] is None
    assert s["paired_differences"][0]["a"] == "b" and s["paired_differences"][0]["mean_diff"] == 1.0
    assert s["bootstrap"]["rng_seed"] == 0


def test_pareto_front():
    points = [("cheap", 10.0, 0.5), ("dominated", 20.0, 0.4), ("best", 30.0, 0.9), ("same-cost-worse", 30.0, 0.8)]
    assert pareto_front(points) == ["cheap", "best"]
