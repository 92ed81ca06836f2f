"""Evidence first: a program for a question that states no quantities waits until some evidence is accepted.

"Which has the larger population: Fokail or Krestes?" gives a program nothing to compute with. The 0.5B Planner
often opens such a question with a python step anyway, writing the values from memory ("Fokail_population =
1000000000") or as invalid names ("Merourk Router revenue = 1000000"); the Verifier rejects each, and the Planner
writes another, until three rejections stop the run (`no_progress`: 9 of the 50 world test questions of seed 0,
8 of them after python steps only). The loop now refuses such a step before it runs, and the next turn may only
choose a tool that finds evidence (`verifier.evidence_first`). A question stating quantities (a word problem,
"36 multiplied by 317"), or any accepted evidence, leaves programs alone.
"""

from __future__ import annotations

from tasks.checks.context import Outcome, failed, passed
from tasks.checks.quantities import stated_quantities
from tasks.checks.text import numbers_in, tokens
from tasks.contracts import FailureType, MemoryItem, Plan

NAME = "evidence_first"


def check_evidence_first(question: str, plan: Plan, view: list[MemoryItem]) -> Outcome:
    """Failed for a python step when nothing is accepted yet and the question states no quantity to compute with."""
    if plan.tool != "python" or view or stated_quantities(question) or numbers_in(tokens(question)):  # 0s and 1s too
        return passed(NAME, "n/a: not a program, evidence is accepted, or the question states quantities")
    return failed(NAME, "a program before any evidence, for a question that states no quantities",
                  FailureType.unsupported, "the question states no numbers and no evidence is accepted yet, so a "
                  "program has nothing to compute with: search for the values first, then compute")
