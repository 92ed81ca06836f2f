"""`agentflow verifier-eval run`: measure a Verifier on labeled verification cases.

Every case (tasks.eval.verifier_cases) is verified with a deterministic, llm or hybrid Verifier; the report
gives false accepts and false rejects overall and per category, the confusion matrix, mean latency and model
calls per case. The command line is flows.cli.verifier; the case format is documented in docs/verifier-eval.md.
"""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass
from datetime import datetime

from rich.table import Table

from tasks.eval.metrics import wilson_ci
from tasks.eval.verifier_seeds import AS_OF, CATEGORIES, LABELS

# =============================================================================== run

@dataclass
class CaseOutcome:
    id: str
    category: str
    label: str
    predicted: str
    failure_type: str | None
    reason: str
    latency_ms: float
    model_calls: int
    confidence: float
    tokens: int = 0  # model tokens (judge or independent program) spent on this case
    verdict_in_run: str | None = None  # a harvested case: what the run's own Verifier said of the step
    admitted_injection: bool = False  # accepted, and what would enter memory still holds instruction-like text


def memory_view(case: dict, as_of: datetime) -> list:
    """The case's memory as the loop would pass it: live accepted and estimate items only."""
    from tasks.contracts import MemoryItem
    from tasks.memory import EVIDENCE_STATUSES

    view = []
    for raw in case.get("memory") or []:
        item = MemoryItem.model_validate(raw)
        if item.status in EVIDENCE_STATUSES and item.is_live(as_of):
            view.append(item)
    return view


def admits_injection(result: dict, verdict) -> bool:
    """An accepted step whose evidence, as memory would keep it (quarantined passages left out), still holds
    instruction-like text: the safety property the quarantine must keep, whatever the label."""
    from tasks.checks.injection import instruction_like, output_fields, passage_text
    from tasks.contracts import Result
    from tasks.memory import as_evidence

    if not verdict.accepted:
        return False
    kept = as_evidence(Result.model_validate(result), verdict).data
    passages = kept.get("passages") if isinstance(kept, dict) else None
    texts = [passage_text(p) for p in passages or [] if isinstance(p, dict)] + [t for _, t in output_fields(kept)]
    return any(instruction_like(t) for t in texts)


def run_cases(cases: list[dict], settings, mode: str) -> list[CaseOutcome]:
    """Verify every case with a Verifier in `mode`; one outcome per case, in order."""
    from tasks.checks import as_of_datetime
    from tasks.modules.verifier import Verifier

    verifiers: dict[str, Verifier] = {}
    outcomes = []
    for case in cases:
        as_of = case.get("as_of") or AS_OF
        if as_of not in verifiers:
            verifiers[as_of] = Verifier(settings.model_copy(update={"as_of": as_of}), mode=mode)
        v = verifiers[as_of]
        t0 = time.perf_counter()
        try:
            # the loop gives the Verifier the question; a case may hide it ("question_seen": false)
            question = str(case.get("question") or "") if case.get("question_seen", True) else ""
            verdict = v.verify_raw(case["plan"], case["result"], memory_view(case, as_of_datetime(as_of)), question)
            predicted, ftype, reason = ("accept" if verdict.accepted else "reject"), \
                (verdict.failure_type.value if verdict.failure_type else None), verdict.reason
            calls, conf = (verdict.usage.calls if verdict.usage else 0), verdict.confidence
            tokens = verdict.usage.tokens_in + verdict.usage.tokens_out if verdict.usage else 0
            admitted = admits_injection(case["result"], verdict)
        except Exception as exc:  # a crash is a verdict nobody can use: counted as a reject, reported
            predicted, ftype, reason, calls, conf, tokens = "reject", "error", f"{type(exc).__name__}: {exc}", 0, 0.0, 0
            admitted = False
        outcomes.append(CaseOutcome(case["id"], case["category"], case["label"], predicted, ftype, reason[:300],
                                    (time.perf_counter() - t0) * 1000, calls, conf, tokens, case.get("verdict_in_run"),
                                    admitted))
    return outcomes


def _rate(num: int, den: int) -> float | None:
    return round(num / den, 4) if den else None


def summarize(outcomes: list[CaseOutcome], mode: str = "") -> dict:
    """False accept / false reject rates overall and per category, confusion matrices, latency and model calls."""
    def block(rows: list[CaseOutcome]) -> dict:
        conf = {lab: {pred: 0 for pred in LABELS} for lab in LABELS}
        for o in rows:
            conf[o.label][o.predicted] += 1
        neg, pos = sum(conf["reject"].values()), sum(conf["accept"].values())
        return {"cases": len(rows), "false_accepts": conf["reject"]["accept"], "false_rejects": conf["accept"]["reject"],
                "false_accept_rate": _rate(conf["reject"]["accept"], neg), "false_reject_rate": _rate(conf["accept"]["reject"], pos),
                "false_accept_ci95": wilson_ci(conf["reject"]["accept"], neg),
                "false_reject_ci95": wilson_ci(conf["accept"]["reject"], pos),
                "confusion": conf, "failure_types": dict(Counter(o.failure_type or "-" for o in rows).most_common()),
                "injection_admitted": sum(o.admitted_injection for o in rows)}

    cats = [c for c in CATEGORIES if any(o.category == c for o in outcomes)]
    cats += sorted({o.category for o in outcomes} - set(cats))
    n = len(outcomes)
    return {
        "verifier": mode,
        "overall": block(outcomes),
        "per_category": {c: block([o for o in outcomes if o.category == c]) for c in cats},
        # harvested cases: errors the run's Verifier let through vs those it caught (see tasks/eval/harvest.py)
        "per_verdict_in_run": {v: block([o for o in outcomes if o.verdict_in_run == v]) for v in ("accept", "reject")
                               if any(o.verdict_in_run == v for o in outcomes)},
        "mean_latency_ms": round(sum(o.latency_ms for o in outcomes) / n, 2) if n else None,
        "model_calls_per_case": round(sum(o.model_calls for o in outcomes) / n, 4) if n else None,
        "model_tokens_per_case": round(sum(o.tokens for o in outcomes) / n, 1) if n else None,
        "errors": [{"id": o.id, "category": o.category, "label": o.label, "predicted": o.predicted,
                    "failure_type": o.failure_type, "reason": o.reason} for o in outcomes if o.label != o.predicted][:200],
    }


def report_tables(report: dict) -> list[Table]:
    t = Table(title=f"Verifier ({report['verifier']}): false accepts and false rejects")
    for col in ("category", "cases", "false rejects", "FR rate (95% CI)", "false accepts", "FA rate (95% CI)",
                "top failure types"):
        t.add_column(col, justify="left" if col in ("category", "top failure types") else "right")
    rows = list(report["per_category"].items()) + [("overall", report["overall"])]
    rows += [(f"  {v}ed in its run", b) for v, b in report.get("per_verdict_in_run", {}).items()]
    def fmt(rate: float | None, ci: list | tuple | None) -> str:
        return "-" if rate is None else f"{rate:.1%}" + (f" ({ci[0]:.0%}-{ci[1]:.0%})" if ci else "")

    for name, b in rows:
        top = ", ".join(f"{k}:{v}" for k, v in list(b["failure_types"].items())[:3])
        t.add_row(name, str(b["cases"]), str(b["false_rejects"]), fmt(b["false_reject_rate"], b.get("false_reject_ci95")),
                  str(b["false_accepts"]), fmt(b["false_accept_rate"], b.get("false_accept_ci95")), top)
    c = report["overall"]["confusion"]
    m = Table(title="Confusion matrix (rows: label, columns: verdict)")
    for col in ("label", "accept", "reject"):
        m.add_column(col, justify="right")
    for lab in LABELS:
        m.add_row(lab, str(c[lab]["accept"]), str(c[lab]["reject"]))
    m.caption = f"accepted steps whose kept evidence holds instruction-like text: {report['overall']['injection_admitted']}"
    return [t, m]
