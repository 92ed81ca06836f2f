"""The Verifier's checks in the order they run: the first decisive failure decides the step."""

from __future__ import annotations

from tasks.checks.assertion import check_assertion
from tasks.checks.attribute import check_attribute
from tasks.checks.citation import check_citation_span
from tasks.checks.conflict import check_conflict
from tasks.checks.context import CheckFn
from tasks.checks.freshness import check_freshness
from tasks.checks.injection import check_injection
from tasks.checks.quantities import check_quantities
from tasks.checks.recomputation import check_recomputation
from tasks.checks.structure import check_evidence, check_schema, check_tool_status

# =============================================================================== the pipeline

# Order matters: structure before content, cheap before expensive, safety before anything reads the text.
CHECKS: list[CheckFn] = [check_schema, check_tool_status, check_evidence, check_injection, check_recomputation,
                         check_quantities, check_assertion, check_freshness, check_citation_span,
                         check_attribute, check_conflict]
