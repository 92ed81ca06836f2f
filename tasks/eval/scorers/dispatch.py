"""Scorer dispatch: the registry of scorers by answer type and the benchmark -> answer type table.

``score(kind, prediction, target)`` picks the scorer by benchmark name (``gsm8k``, ``hotpotqa``, ...)
or answer type (``number``, ``math``, ``game24``, ``text``, ``entity``, ``yes_no``, ``world``). The target
is either a question record (a line of a prepared questions.jsonl: ``answer``, ``aliases``, ``numbers``,
...) or the bare gold value.
"""

from __future__ import annotations

from typing import Any, Callable, Mapping

from tasks.eval.scorers.base import Score, _ok
from tasks.eval.scorers.game24 import score_game24
from tasks.eval.scorers.math500 import score_math
from tasks.eval.scorers.numeric import score_number
from tasks.eval.scorers.text import score_text
from tasks.eval.scorers.world import score_world, score_yes_no

ANSWER_TYPES: dict[str, Callable[[str, Any], Score]] = {
    "text": score_text,
    "entity": score_text,
    "number": score_number,
    "math": score_math,
    "game24": score_game24,
    "yes_no": score_yes_no,
    "world": score_world,
}

BENCHMARK_ANSWER_TYPES: dict[str, str] = {
    "gsm8k": "number",
    "aime24": "number",
    "amc23": "number",
    "math500": "math",
    "game24": "game24",
    "game24-1362": "game24",
    "hotpotqa": "text",
    "hotpotqa-train": "text",
    "musique": "text",
    "musique-train": "text",
    "bamboogle": "text",
    "world": "world",
}


def answer_type_of(kind: str) -> str:
    """The answer type a benchmark name or answer type is scored as."""
    if kind in ANSWER_TYPES:
        return kind
    if kind in BENCHMARK_ANSWER_TYPES:
        return BENCHMARK_ANSWER_TYPES[kind]
    raise KeyError(f"unknown benchmark or answer type {kind!r}; known: "
                   f"{sorted(set(ANSWER_TYPES) | set(BENCHMARK_ANSWER_TYPES))}")


def score(benchmark_or_answer_type: str, prediction: str | None, target: Any, *, status: str = "answered") -> Score:
    """Score ``prediction`` against ``target`` (a question record or a bare gold value).

    ``status`` (the Answer's status) matters only for the world, whose conflicting-source questions
    expect ``uncertain``; elsewhere a prediction that is not ``answered`` is scored on its text.
    """
    kind = answer_type_of(benchmark_or_answer_type)
    if kind == "world":
        return score_world(prediction or "", target, status)
    if prediction is None or not str(prediction).strip():
        return _ok(False, "no prediction")
    return ANSWER_TYPES[kind](str(prediction), target)


def score_question(question: Mapping, prediction: str | None, *, status: str = "answered") -> Score:
    """Score against a prepared question record, with the scorer of its benchmark (or answer type)."""
    bench = question.get("benchmark")
    kind = bench if bench in BENCHMARK_ANSWER_TYPES else question.get("answer_type")
    return score(kind, prediction, question, status=status)
