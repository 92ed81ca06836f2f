"""Benchmark scorers, one module per answer kind: a prediction (free text) and a target -> Score.
The kinds are dispatched by benchmark name or answer type in :mod:`tasks.eval.scorers.dispatch`."""

from tasks.eval.scorers.base import Score, accuracy, mean_f1
from tasks.eval.scorers.dispatch import (
    ANSWER_TYPES,
    BENCHMARK_ANSWER_TYPES,
    answer_type_of,
    score,
    score_question,
)
from tasks.eval.scorers.game24 import check_game24, score_game24
from tasks.eval.scorers.math500 import math_equivalent, score_math
from tasks.eval.scorers.numeric import extract_final_number, numeric_match, parse_number, score_number
from tasks.eval.scorers.text import exact_match, normalize_answer, score_text, token_f1
from tasks.eval.scorers.world import score_world, score_yes_no, yes_no_match

__all__ = [
    "ANSWER_TYPES",
    "BENCHMARK_ANSWER_TYPES",
    "Score",
    "accuracy",
    "answer_type_of",
    "check_game24",
    "exact_match",
    "extract_final_number",
    "math_equivalent",
    "mean_f1",
    "normalize_answer",
    "numeric_match",
    "parse_number",
    "score",
    "score_game24",
    "score_math",
    "score_number",
    "score_question",
    "score_text",
    "score_world",
    "score_yes_no",
    "token_f1",
    "yes_no_match",
]
