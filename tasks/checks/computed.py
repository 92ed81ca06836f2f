"""The compute gate: an answer to a question that asks for a computed value waits for a program to compute it.

On the world's arithmetic questions ("the ratio of the area of Dydan to the area of Porax, rounded to two decimal
places") the 0.5B Planner often finds both values in one search and answers at once; the Generator, which may only
restate evidence, then writes one of the values or a ratio it guessed. A program over the verified values is the
step that computes it, and the Verifier can check that program (its operands must come from the question or the
evidence). When the Planner asks to answer such a question before any program's result is accepted, the answer is
refused once (`verifier.compute_gate` times at most) and the next turn is a python step whose program the model
writes from the question and the evidence (tasks/modules/programs.py).

Which questions ask for a computation is read off their words (ratio, difference, sum, total, average, percent,
"how many more" ...); a lookup phrased with one of them ("the total area of X") costs one program that prints the
stated value, which the Verifier grounds in the evidence.
"""

from __future__ import annotations

import re

from tasks.checks.context import Outcome, failed, passed
from tasks.contracts import FailureType, MemoryItem

NAME = "computed"
_COMPUTED = re.compile(
    r"\b(ratio|difference|sum|total|combined|altogether|average|product|percent|percentage|multiplied|divided|"
    r"how (?:many|much) (?:more|fewer|less)|times (?:as|more|larger|bigger|greater)|minus|plus)\b", re.I)


def asks_for_computation(question: str) -> bool:
    return bool(_COMPUTED.search(question))


def check_computed(question: str, view: list[MemoryItem]) -> Outcome:
    """Passed unless the question asks for a computed value and no accepted step is a program's result."""
    if not asks_for_computation(question):
        return passed(NAME, "n/a: the question asks for no computed value")
    if any(item.provenance.tool == "python" for item in view):
        return passed(NAME, "a program's result is accepted evidence")
    word = _COMPUTED.search(question).group(0).lower()
    return failed(NAME, f"the question asks for a computed value ({word!r}) and no program has computed it",
                  FailureType.needs_computation,
                  f"the question asks for a computed value ({word}): compute it with python from the verified values, "
                  "then answer")
