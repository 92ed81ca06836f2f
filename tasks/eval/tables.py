"""Parquet table layouts (stable column names and types) and the rows built from contracts."""

from __future__ import annotations

import json

import pyarrow as pa

from tasks.contracts import Answer, JudgedStep, Question, StepRecord

ANSWERS_SCHEMA = pa.schema([
    ("run_id", pa.string()),
    ("task_id", pa.string()),
    ("question", pa.string()),
    ("gold_answer", pa.string()),
    ("answer", pa.string()),
    ("status", pa.string()),
    ("stop_reason", pa.string()),
    ("budget_limit", pa.string()),
    ("iterations", pa.int32()),
    ("citations", pa.string()),  # JSON list of {claim, step_id, source}
    ("n_citations", pa.int32()),
    ("tokens_in", pa.int64()),
    ("tokens_out", pa.int64()),
    ("latency_ms", pa.float64()),
    ("tool_ms", pa.float64()),
    ("cost_by_role", pa.string()),  # JSON {role: RoleCost}
    ("schema_version", pa.int32()),
    ("review", pa.string()),  # JSON ReviewDecision when a person was asked (review: prefect), else null
])

STEPS_SCHEMA = pa.schema([
    ("run_id", pa.string()),
    ("task_id", pa.string()),
    ("step_id", pa.int32()),
    ("role", pa.string()),
    ("model", pa.string()),
    ("tokens_in", pa.int64()),
    ("tokens_out", pa.int64()),
    ("latency_ms", pa.float64()),
    ("tool", pa.string()),
    ("tool_ms", pa.float64()),
    ("accepted", pa.bool_()),
    ("failure_type", pa.string()),
    ("detail", pa.string()),
    ("ts", pa.timestamp("us", tz="UTC")),
    ("schema_version", pa.int32()),
    ("model_calls", pa.int32()),
])

# One row per step the Verifier judged: the whole step as it saw it (JudgedStep JSON) and the question with its
# gold answer, so that `agentflow verifier-eval harvest` can turn real runs into labeled cases.
JUDGED_SCHEMA = pa.schema([
    ("run_id", pa.string()),
    ("task_id", pa.string()),
    ("step_id", pa.int32()),
    ("tool", pa.string()),
    ("accepted", pa.bool_()),
    ("failure_type", pa.string()),
    ("as_of", pa.string()),
    ("question", pa.string()),  # JSON: the question record (id, question, answer, benchmark, answer_type, ...)
    ("step", pa.string()),  # JSON: the JudgedStep
])


def answer_row(answer: Answer, question: Question) -> dict:
    costs = answer.cost.values()
    return {
        "run_id": answer.run_id,
        "task_id": question.id,
        "question": question.question,
        "gold_answer": question.answer,
        "answer": answer.text,
        "status": answer.status.value,
        "stop_reason": answer.stop_reason.value,
        "budget_limit": answer.budget_limit.value if answer.budget_limit else None,
        "iterations": answer.iterations,
        "citations": json.dumps([c.model_dump(mode="json") for c in answer.citations]),
        "n_citations": len(answer.citations),
        "tokens_in": sum(c.tokens_in for c in costs),
        "tokens_out": sum(c.tokens_out for c in costs),
        "latency_ms": sum(c.latency_ms for c in costs),
        "tool_ms": sum(c.tool_ms for c in costs),
        "cost_by_role": json.dumps({r.value: c.model_dump() for r, c in answer.cost.items()}),
        "schema_version": answer.schema_version,
        "review": answer.review.model_dump_json() if answer.review else None,
    }


def step_rows(records: list[StepRecord]) -> list[dict]:
    rows = []
    for r in records:
        row = r.model_dump(mode="python")
        row["role"] = r.role.value
        row["failure_type"] = r.failure_type.value if r.failure_type else None
        rows.append(row)
    return rows


def judged_rows(run_id: str, record: dict, judged: list[JudgedStep], as_of: str | None) -> list[dict]:
    return [{"run_id": run_id, "task_id": str(record.get("id")), "step_id": j.step_id, "tool": j.plan.tool,
             "accepted": j.verdict.accepted, "failure_type": j.verdict.failure_type.value if j.verdict.failure_type else None,
             "as_of": as_of, "question": json.dumps(record, default=str), "step": j.model_dump_json()} for j in judged]
