"""What one system returns for one question: the answer, its step records, the run's memory and, with memory across
runs, what that memory did. Shared by the modular loop (flows/research.py) and the baselines (tasks/baselines/)."""

from __future__ import annotations

from dataclasses import dataclass, field

from tasks.contracts import Answer, JudgedStep, StepRecord
from tasks.memory import EvolvingMemory


@dataclass
class ResearchOutcome:
    answer: Answer
    records: list[StepRecord]
    memory: EvolvingMemory
    prior: dict | None = None  # what memory across runs did (memory.mode=persistent): rechecks, expired, lessons
    judged: list[JudgedStep] = field(default_factory=list)  # every step the Verifier judged (the modular loop)
