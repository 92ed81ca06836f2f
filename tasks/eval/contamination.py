"""Contamination measurement: planted false accepts in prior memory, and what each run did with them.

A planted record is what a past false accept would have left: an 'accepted' search result for the
question, citing its real gold document but with the text changed to state a wrong final answer
(a perturbed number, the other option of a comparison, the opposite yes/no). Whether an answer
*carries* the planted value is decided by the question's own scorer with the planted value as gold.
Pure functions over question records, answers and the loop's prior-memory report (flows/evaluate.py
wires them into `agentflow eval --attempts K --memory ... --plant N`).
"""

from __future__ import annotations

import re
from collections import defaultdict
from typing import Any, Iterable, Mapping

from tasks.checks import contains_value, numbers_in, tokens
from tasks.contracts import Answer, PriorRecord, Question
from tasks.eval.metrics import is_non_answer
from tasks.eval.scorers import score_question
from tasks.prior import planted_record

MEMORY_MODES = ("persistent", "run", "off")
PLANTED_STATUSES = ("rejected", "superseded", "accepted", "unread")


def planted_value(record: Mapping) -> tuple[str, float | None] | None:
    """A wrong final answer for a question with a known one, or None (no gold, or nothing to perturb)."""
    answer = record.get("answer")
    if answer is None or record.get("expected_status") == "uncertain":
        return None
    kind = record.get("answer_type")
    if kind == "number" and record.get("answer_number") is not None:
        d = int(record.get("decimals") or 0)
        wrong = round(float(record["answer_number"]) * 1.5 + 7, d)
        return (f"{wrong:.{d}f}" if d else str(int(wrong))), wrong
    if kind == "yes_no":
        return ("no" if str(answer).lower() == "yes" else "yes"), None
    others = [o for o in record.get("options") or [] if str(o) != str(answer)]
    return (str(others[0]), None) if others else None


def plant_for(record: Mapping) -> PriorRecord | None:
    """The planted record for one question: its first gold search, its first gold document, a wrong value."""
    wrong = planted_value(record)
    search = next((s for s in record.get("gold_path") or [] if s.get("op") == "search" and "{" not in s.get("query", "")), None)
    docs = record.get("gold_doc_ids") or []
    if wrong is None or search is None or not docs:
        return None
    entity = str(search.get("entity") or search["query"])
    text = f"{entity}: the answer to the question '{record['question']}' is {wrong[0]}."
    passage = {"doc_id": str(docs[0]), "title": entity, "text": text, "published_at": "2024-06-01"}
    claim = {"subject": entity[:300], "attribute": str(search.get("fact") or "answer")[:200], "value": wrong[0][:300],
             "cites": [str(docs[0])]}
    q = Question(id=str(record["id"]), question=str(record["question"]), family=record.get("family"))
    return planted_record(q, "search", {"query": search["query"]}, [passage], claim, run_id="planted")


def carries(record: Mapping, value: str, number: float | None, text: str) -> bool:
    """Whether an answer text states the planted value (graded by the question's scorer, the planted value as gold).
    A non-answer ('I could not establish ...') carries nothing, whatever yes/no word it happens to contain."""
    if is_non_answer(text):
        return False
    fake = {**record, "answer": value, "answer_number": number, "expected_status": "answered"}
    try:
        return bool(score_question(fake, text, status="answered").correct)
    except Exception:
        return contains_value(text, value)


def planted_status(planted_id: str | None, prior: Mapping | None) -> str:
    """What this run did with the planted record: rejected on re-verification, ignored as already superseded,
    accepted (a failure of the checks), or never read (memory not persistent, or not reached)."""
    if not planted_id or not prior:
        return "unread"
    for rc in prior.get("rechecked") or []:
        if rc.get("id") == planted_id:
            return "accepted" if rc.get("accepted") else "rejected"
    if planted_id in (prior.get("superseded_ignored") or []):
        return "superseded"
    return "unread"


_TAG = re.compile(r"<[^>]*>")


def answer_value(record: Mapping, text: str, extracted: str | None) -> str | None:
    """The value an answer states, for checking its citations: what the scorer extracted when it extracted a
    part of the text; for a number question whose scorer keeps the whole text (the world), the first number
    that is not in the question (markup of quoted evidence aside); otherwise None (nothing to check)."""
    if extracted and str(extracted).strip() != (text or "").strip() and str(extracted).lower() not in ("yes", "no"):
        return str(extracted)
    if record.get("answer_type") == "number":
        given = set(numbers_in(tokens(str(record.get("question", "")))))
        return next((str(n) for n in numbers_in(tokens(_TAG.sub(" ", text or ""))) if n not in given), None)
    return None


def wrong_citations(answer: Answer, accepted_text: Mapping[int, str], value: str | None) -> int:
    """Citations that point at no accepted evidence of the run, or at evidence that does not state the
    answer's value (when there is one to check: see answer_value)."""
    n = 0
    for c in answer.citations:
        text = accepted_text.get(c.step_id)
        if text is None or (value and not contains_value(text, value)):
            n += 1
    return n


def contamination_fields(record: Mapping, planted: PriorRecord | None, prior: Mapping | None, answer_text: str) -> dict[str, Any]:
    """The per-row columns of results.parquet about the planted record of this question."""
    if planted is None:
        return {"planted_id": None, "planted_value": None, "planted_status": None, "planted_in_answer": None,
                "contamination_recovered": None}
    claim = planted.content["claim"]
    wrong = planted_value(record)
    status = planted_status(planted.id, prior)
    in_answer = carries(record, claim["value"], wrong[1] if wrong else None, answer_text)
    recovered = None if status == "unread" else (status in ("rejected", "superseded") and not in_answer)
    return {"planted_id": planted.id, "planted_value": claim["value"], "planted_status": status,
            "planted_in_answer": in_answer, "contamination_recovered": recovered}


def _mean(values: Iterable[float]) -> float | None:
    vals = list(values)
    return round(sum(vals) / len(vals), 4) if vals else None


def attempts_table(rows: Iterable[Mapping]) -> list[dict[str, Any]]:
    """Per (system, memory, attempt): success, tokens, wrong citations, contamination recovery on planted items."""
    groups: dict[tuple, list[Mapping]] = defaultdict(list)
    for r in rows:
        groups[(r.get("base_system") or r["system"], r.get("memory") or "run", int(r.get("attempt") or 1))].append(r)
    order = {m: i for i, m in enumerate(MEMORY_MODES)}
    out = []
    for (system, memory, attempt), rs in sorted(groups.items(), key=lambda kv: (kv[0][0], order.get(kv[0][1], 9), kv[0][2])):
        planted = [r for r in rs if r.get("planted_id")]
        read = [r for r in planted if r.get("planted_status") not in (None, "unread")]
        out.append({
            "system": system, "memory": memory, "attempt": attempt, "questions": len(rs),
            "success": _mean(float(bool(r["correct"])) for r in rs),
            "tokens_per_question": _mean(float(r.get("tokens_total") or 0) for r in rs),
            "wrong_citations": sum(int(r.get("wrong_citations") or 0) for r in rs),
            "planted": len(planted), "planted_read": len(read),
            "planted_rejected": sum(r.get("planted_status") == "rejected" for r in planted),
            "planted_superseded": sum(r.get("planted_status") == "superseded" for r in planted),
            "planted_accepted": sum(r.get("planted_status") == "accepted" for r in planted),
            "contamination_recovery_rate": _mean(float(bool(r["contamination_recovered"])) for r in read),
            "planted_in_answer_rate": _mean(float(bool(r["planted_in_answer"])) for r in planted),
        })
    return out
