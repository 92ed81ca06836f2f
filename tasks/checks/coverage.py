"""The answer gate: an answer step waits until the accepted evidence covers what the question names.

The Planner of a small model often answers after the first lookup of a multi-hop question ("the population of
the home city of X": it finds X, whose passage gives employees, and answers with them) or after looking up one
side of a comparison. Before such an answer is written, the loop asks here whether every property the question
names (by the attribute check's word families: population, chief executive, birthplace...) and every name it
capitalises is stated somewhere in the accepted evidence; what is missing goes back to the Planner as the
reason of a refused answer step.

Only evidence in words is read: when an accepted step is a program (python) or an estimate, its values need not
be stated in words, and the gate stays out. Absence of a known property word in the question leaves it open,
as the attribute check does. A refusal is a hint, not a verdict on the answer: the loop refuses at most
`verifier.answer_gate` times per question, then lets the Planner answer.
"""

from __future__ import annotations

import re

from tasks.checks.attribute import families
from tasks.checks.context import Outcome, failed, passed
from tasks.checks.text import find_span, tokens
from tasks.contracts import FailureType, MemoryItem

NAME = "answer_coverage"

# A capitalised word that opens a question is grammar, not a name ("Could you tell me...", "Is X made by Y?").
_NOT_NAMES = frozenset(
    "a an the i is are was were do does did can could would will should shall may might must has have had what which "
    "who whom whose when where why how in on at for from of to by with between among and or but if whether please "
    "tell give find name list yes no he she it they we you his her its their this that these those there".split())
_CAPITALISED = re.compile(r"[A-Z][\w'\-]*(?:\s+[A-Z][\w'\-]*)*")


def names_in(question: str) -> list[str]:
    """Capitalised names in a question, in order: 'Kryrepoth Industries', 'Shiher Holdings'."""
    out: list[str] = []
    for m in _CAPITALISED.finditer(question):
        words = m.group(0).split()
        while words and words[0].lower() in _NOT_NAMES:
            words = words[1:]
        name = " ".join(words)
        if len(name) > 1 and name not in out:
            out.append(name)
    return out


def evidence_text(item: MemoryItem) -> str | None:
    """An accepted search step's passages as text; None for evidence that is not stated in words."""
    if item.provenance.tool != "search" or not isinstance(item.content, dict):
        return None
    return "\n".join(f"{p.get('title', '')}: {p.get('text', '')}" for p in item.content.get("passages") or [])


def check_answer_coverage(question: str, view: list[MemoryItem]) -> Outcome:
    """Passes when the accepted evidence states every property and name the question asks about (or when the
    evidence is not words, or there is none: then the Generator says what it can)."""
    texts = [evidence_text(item) for item in view]
    if not texts or any(t is None for t in texts):
        return passed(NAME, "n/a: no evidence, or evidence that is not only search passages")
    text = "\n".join(t for t in texts if t)
    missing_properties = sorted(families(question) - families(text))
    hay = tokens(text)
    missing_names = [n for n in names_in(question) if find_span(hay, tokens(n)) < 0]
    if not missing_properties and not missing_names:
        return passed(NAME, "the accepted evidence states every property and name the question asks about")
    missing = [f"the {p}" for p in missing_properties] + missing_names
    listed = ", ".join(missing)
    return failed(NAME, f"no accepted evidence states {listed}", FailureType.incomplete_evidence,
                  f"the verified evidence does not yet state {listed}, which the question asks about; "
                  "search for it (a name the evidence found, with the property), then answer")
