"""Constants and difficulty knobs of a synthetic world: format, splits, kinds, question fields, dates.

``WorldKnobs`` holds the difficulty knobs (hops, adversarial rates, kind weights); ``WorldError`` is raised for
bad generation parameters and for a world directory that cannot be read.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import date
from typing import Any, Mapping

FORMAT = "agentflow-world/1"
AS_OF = "2025-01-01"
SPLITS = ("train", "test")
KINDS = ("lookup", "relation", "arithmetic", "yes_no", "comparison", "calc")
DEFAULT_KIND_WEIGHTS = {"lookup": 0.22, "relation": 0.12, "arithmetic": 0.22, "yes_no": 0.16,
                        "comparison": 0.14, "calc": 0.14}
QUESTION_FIELDS = ("id", "question", "answer", "answer_number", "decimals", "answer_type", "expected_status",
                   "gold_doc_ids", "hops", "needs", "family", "kind", "split", "gold_path", "options",
                   "conflict", "stale", "distractors", "injection")
FILES = ("corpus.jsonl", "questions.jsonl", "manifest.json")

_PROFILE_LO = date(2023, 1, 1).toordinal()
_PROFILE_HI = date(2024, 9, 30).toordinal()
_STALE_LO = date(2012, 1, 1).toordinal()
_LATEST = date(2024, 12, 31).toordinal()


class WorldError(ValueError):
    """Bad generation parameters, or a world directory that cannot be read."""


# ============================================================================ knobs


@dataclass(frozen=True)
class WorldKnobs:
    """Difficulty knobs. Rates are probabilities per eligible question (see the module docstring)."""

    max_hops: int = 3
    hop_weights: tuple[float, ...] = (0.45, 0.35, 0.20)  # for 1, 2, 3 hops (truncated at max_hops)
    distractor_rate: float = 0.3
    stale_rate: float = 0.3
    conflict_rate: float = 0.1
    injection_rate: float = 0.1
    kind_weights: Any = field(default_factory=lambda: tuple(DEFAULT_KIND_WEIGHTS.items()))

    def __post_init__(self) -> None:
        kw = self.kind_weights
        items = sorted(kw.items()) if isinstance(kw, Mapping) else sorted((str(k), v) for k, v in kw)
        object.__setattr__(self, "kind_weights", tuple((k, float(v)) for k, v in items))
        object.__setattr__(self, "hop_weights", tuple(float(w) for w in self.hop_weights))
        if not isinstance(self.max_hops, int) or not 1 <= self.max_hops <= 3:
            raise WorldError(f"max_hops must be 1, 2 or 3, got {self.max_hops!r}")
        for name in ("distractor_rate", "stale_rate", "conflict_rate", "injection_rate"):
            v = getattr(self, name)
            if not isinstance(v, (int, float)) or not 0.0 <= v <= 1.0:
                raise WorldError(f"{name} must be a number in [0, 1], got {v!r}")
        if len(self.hop_weights) != 3 or any(w < 0 for w in self.hop_weights) or sum(self.hop_weights[: self.max_hops]) <= 0:
            raise WorldError(f"hop_weights must be 3 non-negative weights with a positive sum up to max_hops, got {self.hop_weights!r}")
        unknown = [k for k, _ in self.kind_weights if k not in KINDS]
        if unknown:
            raise WorldError(f"unknown question kind(s) {unknown}; kinds are {list(KINDS)}")
        if any(v < 0 for _, v in self.kind_weights) or sum(v for _, v in self.kind_weights) <= 0:
            raise WorldError("kind_weights must be non-negative with a positive sum")

    def to_dict(self) -> dict:
        return {"max_hops": self.max_hops, "hop_weights": list(self.hop_weights),
                "distractor_rate": self.distractor_rate, "stale_rate": self.stale_rate,
                "conflict_rate": self.conflict_rate, "injection_rate": self.injection_rate,
                "kind_weights": dict(self.kind_weights)}

    @classmethod
    def from_dict(cls, d: Mapping) -> "WorldKnobs":
        d = dict(d)
        if "hop_weights" in d:
            d["hop_weights"] = tuple(d["hop_weights"])
        return cls(**d)
