"""Benchmark adapters: the original dataset files (GSM8K, Game of 24, HotpotQA, MuSiQue, ...) -> question records
and a corpus; one module per benchmark family, the registry and prepare/load in registry, the shared types in core."""

from infra.data.benchmarks.core import (
    BACKENDS,
    Adapter,
    BackendRequiredError,
    Benchmark,
    DatasetError,
    ensure_backends,
    missing_backends,
)
from infra.data.benchmarks.game24 import GAME24_PROMPT, solve_game24
from infra.data.benchmarks.registry import BENCHMARKS, FORMAT, OUTPUT_FILES, load_benchmark, load_prepared, prepare

__all__ = [
    "BENCHMARKS",
    "FORMAT",
    "GAME24_PROMPT",
    "Adapter",
    "BackendRequiredError",
    "Benchmark",
    "DatasetError",
    "ensure_backends",
    "load_benchmark",
    "load_prepared",
    "missing_backends",
    "prepare",
    "solve_game24",
]
