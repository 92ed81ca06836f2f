"""Evaluation metrics: pure functions over result rows (one row per question x system x seed).

A row is a mapping with at least ``system``, ``seed``, ``question_id`` and ``correct``; the other
metrics read the columns of ``results.parquet`` (see flows/evaluate.py) and ignore rows without them.
Conventions, fixed so that numbers can be checked by hand:

- accuracy of one seed = mean of ``correct`` over that seed's questions; the reported mean and
  standard deviation are over the seeds (sample std, ddof=1; 0.0 with one seed);
- the 95% interval is a percentile bootstrap over *questions* (each question's correctness averaged
  over the seeds it ran with), ``BOOTSTRAP_RESAMPLES`` resamples from ``numpy.random.default_rng(
  BOOTSTRAP_SEED)``: the same rows give the same interval;
- a paired difference compares two systems on the questions both ran, question by question
  (each side averaged over its seeds), with the same bootstrap;
- latency percentiles use numpy's default (linear) interpolation.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from typing import Any, Iterable, Mapping, Sequence

import numpy as np

BOOTSTRAP_RESAMPLES = 2000
BOOTSTRAP_SEED = 0
ROLES = ("planner", "executor", "verifier", "generator")
MODULES = ("planner", "executor", "verifier", "generator", "budget", "system")
NON_ANSWER_PREFIXES = ("Stopped before answering", "I could not establish a verified answer")
"""How the systems word a non-answer (the loop's stop text, the Generator's no-evidence text)."""

Row = Mapping[str, Any]


# --------------------------------------------------------------------------- per row


def is_non_answer(text: str | None) -> bool:
    """The text says there is no answer (or is empty), rather than claiming one."""
    t = (text or "").strip()
    return not t or t.startswith(NON_ANSWER_PREFIXES)


def outcome_counts(records: Iterable[Any], answer_text: str, cited_steps: Iterable[int],
                   accepted_steps: Iterable[int]) -> dict[str, int]:
    """Per-run counts from its step records (StepRecord or dicts with role/detail/accepted/tool).

    - ``tool_calls``: Executor calls; ``wrong_tool_calls``: those whose result was not ok (an error,
      a timeout, a denied tool, invalid arguments);
    - ``verifier_calls`` and ``verifier_rejections`` (verdicts with accepted False);
    - ``missing_evidence``: 1 when the answer claims something (not a non-answer) and cites no step
      whose evidence was accepted, else 0.
    """
    tool_calls = wrong = v_calls = v_rej = 0
    for r in records:
        role = _get(r, "role")
        role = getattr(role, "value", role)
        if role == "executor":
            tool_calls += 1
            if executor_status(_get(r, "detail")) != "ok":
                wrong += 1
        elif role == "verifier":
            v_calls += 1
            v_rej += int(_get(r, "accepted") is False)
    accepted = set(accepted_steps)
    supported = any(s in accepted for s in cited_steps)
    missing = int(not is_non_answer(answer_text) and not supported)
    return {"tool_calls": tool_calls, "wrong_tool_calls": wrong, "verifier_calls": v_calls,
            "verifier_rejections": v_rej, "missing_evidence": missing}


def executor_status(detail: str | None) -> str:
    """The Result status an Executor step record carries in its detail ('ok', 'error: ...')."""
    return (detail or "").split(":", 1)[0].strip() or "unknown"


def _get(r: Any, key: str) -> Any:
    return r.get(key) if isinstance(r, Mapping) else getattr(r, key, None)


# --------------------------------------------------------------------------- statistics


def percentile(values: Sequence[float], q: float) -> float | None:
    """The q-th percentile (0-100, linear interpolation); None for no values."""
    vals = [float(v) for v in values if v is not None]
    return float(np.percentile(vals, q)) if vals else None


def bootstrap_ci(values: Sequence[float], *, resamples: int = BOOTSTRAP_RESAMPLES, seed: int = BOOTSTRAP_SEED,
                 level: float = 0.95) -> tuple[float, float] | None:
    """Percentile-bootstrap interval of the mean of ``values`` (None for no values)."""
    x = np.asarray([float(v) for v in values], dtype=float)
    if x.size == 0:
        return None
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, x.size, size=(resamples, x.size))
    means = x[idx].mean(axis=1)
    tail = (1.0 - level) / 2 * 100
    lo, hi = np.percentile(means, [tail, 100 - tail])
    return float(lo), float(hi)


def wilson_ci(k: int, n: int, z: float = 1.959964) -> tuple[float, float] | None:
    """Wilson score interval of a proportion k/n (95% by default); None for n = 0. Unlike the normal
    approximation it stays inside [0, 1] and is not empty at k = 0 or k = n (0 of 11 false accepts is [0, 0.26])."""
    if n <= 0:
        return None
    p = k / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * ((p * (1 - p) / n + z * z / (4 * n * n)) ** 0.5) / (1 + z * z / n)
    return round(max(0.0, centre - half), 4), round(min(1.0, centre + half), 4)


def per_question_means(rows: Iterable[Row], value: str = "correct") -> dict[str, float]:
    """Each question's mean of ``value`` over the seeds it ran with."""
    acc: dict[str, list[float]] = defaultdict(list)
    for r in rows:
        acc[str(r["question_id"])].append(float(r[value]))
    return {q: sum(v) / len(v) for q, v in acc.items()}


def accuracy_stats(rows: Iterable[Row]) -> dict[str, Any]:
    """Accuracy of one system: per seed, mean and std over seeds, 95% bootstrap interval over questions."""
    rows = list(rows)
    by_seed: dict[int, list[float]] = defaultdict(list)
    for r in rows:
        by_seed[int(r["seed"])].append(float(r["correct"]))
    per_seed = {s: sum(v) / len(v) for s, v in sorted(by_seed.items())}
    accs = list(per_seed.values())
    q_means = per_question_means(rows)
    ci = bootstrap_ci(list(q_means.values()))
    return {
        "mean": float(np.mean(accs)) if accs else None,
        "std": float(np.std(accs, ddof=1)) if len(accs) > 1 else 0.0,
        "ci95": list(ci) if ci else None,
        "per_seed": {str(s): a for s, a in per_seed.items()},
        "n_questions": len(q_means),
        "n_seeds": len(per_seed),
    }


def paired_difference(rows_a: Iterable[Row], rows_b: Iterable[Row], value: str = "correct") -> dict[str, Any]:
    """Mean over shared questions of (a - b), each side averaged over its seeds, with a bootstrap interval."""
    a, b = per_question_means(rows_a, value), per_question_means(rows_b, value)
    shared = sorted(set(a) & set(b))
    diffs = [a[q] - b[q] for q in shared]
    ci = bootstrap_ci(diffs)
    return {
        "mean_diff": float(np.mean(diffs)) if diffs else None,
        "ci95": list(ci) if ci else None,
        "n_questions": len(shared),
        "a_better": sum(d > 0 for d in diffs),
        "b_better": sum(d < 0 for d in diffs),
        "ties": sum(d == 0 for d in diffs),
    }


# --------------------------------------------------------------------------- per system


def system_metrics(rows: Iterable[Row]) -> dict[str, Any]:
    """Every metric of one system's rows (all seeds)."""
    rows = list(rows)
    n = len(rows)
    correct = sum(bool(r["correct"]) for r in rows)
    tokens_total = sum(int(r.get("tokens_total") or 0) for r in rows)
    role_tokens = {role: sum(int(r.get(f"tokens_{role}") or 0) for r in rows) for role in ROLES}
    v_calls = sum(int(r.get("verifier_calls") or 0) for r in rows)
    v_rej = sum(int(r.get("verifier_rejections") or 0) for r in rows)
    attributed = [r for r in rows if r.get("attribution_module")]
    latencies = [float(r["latency_s"]) for r in rows if r.get("latency_s") is not None]
    return {
        "rows": n,
        "correct": correct,
        "accuracy": accuracy_stats(rows),
        "mean_score": _mean(float(r.get("score") or 0.0) for r in rows),
        "answered_rate": _mean(float(r.get("status") == "answered") for r in rows),
        "tool_calls": sum(int(r.get("tool_calls") or 0) for r in rows),
        "wrong_tool_calls": sum(int(r.get("wrong_tool_calls") or 0) for r in rows),
        "wrong_tool_calls_per_question": _mean(float(r.get("wrong_tool_calls") or 0) for r in rows),
        "missing_evidence": sum(int(r.get("missing_evidence") or 0) for r in rows),
        "missing_evidence_rate": _mean(float(r.get("missing_evidence") or 0) for r in rows),
        "mean_iterations": _mean(float(r.get("iterations") or 0) for r in rows),
        "latency_s": {"p50": percentile(latencies, 50), "p95": percentile(latencies, 95), "mean": _mean(latencies)},
        "tokens": {
            "total": tokens_total,
            "per_question": tokens_total / n if n else None,
            "by_role": role_tokens,
            "by_role_per_question": {k: v / n if n else None for k, v in role_tokens.items()},
        },
        "tokens_per_correct": tokens_total / correct if correct else None,
        "stop_reasons": dict(sorted(Counter(str(r.get("stop_reason")) for r in rows).items())),
        "verifier_calls": v_calls,
        "verifier_rejections": v_rej,
        "verifier_rejection_rate": v_rej / v_calls if v_calls else None,
        "failure_attribution": {m: sum(r["attribution_module"] == m for r in attributed) for m in MODULES},
        "failure_causes": dict(sorted(Counter(f"{r['attribution_module']}/{r.get('attribution_cause')}"
                                              for r in attributed).items())),
    }


def _mean(values: Iterable[float]) -> float | None:
    vals = list(values)
    return sum(vals) / len(vals) if vals else None


def summarize(rows: Iterable[Row], systems: Sequence[str] | None = None) -> dict[str, Any]:
    """summary.json: metrics per system and paired differences between every pair (in the given order)."""
    rows = list(rows)
    by_system: dict[str, list[Row]] = defaultdict(list)
    for r in rows:
        by_system[str(r["system"])].append(r)
    order = [s for s in (systems or sorted(by_system)) if s in by_system]
    paired = []
    for i, a in enumerate(order):
        for b in order[i + 1:]:
            paired.append({"a": a, "b": b, **paired_difference(by_system[a], by_system[b])})
    return {
        "systems": {s: system_metrics(by_system[s]) for s in order},
        "paired_differences": paired,
        "rows": len(rows),
        "bootstrap": {"resamples": BOOTSTRAP_RESAMPLES, "rng_seed": BOOTSTRAP_SEED, "level": 0.95,
                      "unit": "question (mean over seeds)"},
    }


def pareto_front(points: Sequence[tuple[str, float, float]]) -> list[str]:
    """Names on the cost-vs-accuracy frontier of (name, cost, accuracy): no other point is both cheaper
    (or equal) and at least as accurate with one of the two strictly better. Sorted by cost."""
    front = []
    for name, cost, acc in points:
        dominated = any((c <= cost and a >= acc) and (c < cost or a > acc) for n, c, a in points if n != name)
        if not dominated:
            front.append((cost, -acc, name))
    return [name for _, _, name in sorted(front)]
