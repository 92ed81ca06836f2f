"""What one system returns for one question: the answer, its step records, the run's memory and, with memory across
runs, what that memory did. Shared by the modular loop (flows/research.py) and the baselines (tasks/baselines/)."""

from __future__ import annotations

from dataclasses import dataclass

from tasks.contracts import Answer, StepRecord
from tasks.memory import EvolvingMemory


@dataclass
class ResearchOutcome:
    answer: Answer
    records: list[StepRecord]
    memory: EvolvingMemory
    prior: dict | None = None  # what memory across runs did (memory.mode=persistent): rechecks, expired, lessons
