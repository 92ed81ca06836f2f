"""The Verifier's mechanical checks, one file per family; an LLM judges only what these leave open.
context and text hold what they share, pipeline the CHECKS in the order they run."""

from tasks.checks.context import CheckFn, CheckOptions, Outcome, StepContext, explicit_claim  # noqa: F401
from tasks.checks.coverage import check_answer_coverage  # noqa: F401
from tasks.checks.grounding import check_evidence_first  # noqa: F401
from tasks.checks.injection import instruction_like  # noqa: F401
from tasks.checks.pipeline import CHECKS  # noqa: F401
from tasks.checks.text import (  # noqa: F401
    as_of_datetime,
    contains_value,
    near_number,
    numbers_in,
    sentences,
    tokens,
)
