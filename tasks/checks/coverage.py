"""The answer gate: an answer step waits until the accepted evidence covers what the question names.

The Planner of a small model often answers after the first lookup of a multi-hop question ("the population of
the home city of X": it finds X, whose passage gives employees, and answers with them) or after looking up one
side of a comparison. Before such an answer is written, the loop asks here whether every name the question
capitalises and every property it names (by the attribute check's word families: population, chief executive,
birthplace...) is stated in the accepted evidence; what is missing goes back to the Planner as the reason of a
refused answer step, with the search that would find it when one can be read off the evidence.

A question naming two or more properties is a chain (X -> its home city -> that city's population): a property
counts only in a sentence about a name on the chain, which starts at the question's names and follows the
sentences that state one of the question's relations ("The headquarters of X are in Dydan" adds Dydan). A search
returns several passages, and another person's birthplace in one of them is not the birthplace asked for. A
sentence is about the names it states and its passage's title (a paragraph's "He was born in ...").

Only evidence in words is read: when an accepted step is a program (python) or an estimate, its values need not
be stated in words, and the gate stays out. A question naming no known property is judged by its names alone.
A refusal is a hint, not a verdict on the answer: the loop refuses at most `verifier.answer_gate` times per
question, then lets the Planner answer.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from tasks.checks.attribute import families
from tasks.checks.context import Outcome, failed, passed
from tasks.checks.text import find_span, sentences, tokens
from tasks.contracts import FailureType, MemoryItem

NAME = "answer_coverage"
_MAX_HOPS = 4

# A capitalised word that opens a question is grammar, not a name ("Could you tell me...", "Is X made by Y?").
_NOT_NAMES = frozenset(
    "a an the i is are was were do does did can could would will should shall may might must has have had what which "
    "who whom whose when where why how in on at for from of to by with between among and or but if whether please "
    "tell give find name list answer yes no he she it they we you his her its their this that these those there".split())
_CAPITALISED = re.compile(r"[A-Z][\w'\-]*(?:\s+[A-Z][\w'\-]*)*")


def names_in(text: str) -> list[str]:
    """Capitalised names in a text, in order: 'Kryrepoth Industries', 'Shiher Holdings'."""
    out: list[str] = []
    for m in _CAPITALISED.finditer(text):
        words = m.group(0).split()
        while words and words[0].lower() in _NOT_NAMES:
            words = words[1:]
        name = " ".join(words)
        if len(name) > 1 and name not in out:
            out.append(name)
    return out


def without_names(text: str) -> str:
    """The text with its names blanked out: "Orlan Works" is a company, not an employer."""
    for name in names_in(text):
        text = text.replace(name, " ")
    return text


def properties(text: str) -> set[str]:
    """The property families a text names outside its names."""
    return families(without_names(text))


@dataclass(frozen=True)
class Statement:
    """One sentence of an accepted passage: the names it is about and the property families it states."""

    names: frozenset[str]
    families: frozenset[str]


def statements(view: list[MemoryItem]) -> list[Statement] | None:
    """The accepted search passages' sentences; None when some accepted evidence is not search passages."""
    out: list[Statement] = []
    for item in view:
        if item.provenance.tool != "search" or not isinstance(item.content, dict):
            return None
        for p in item.content.get("passages") or []:
            title = names_in(str(p.get("title") or ""))
            for s in sentences(str(p.get("text") or "")):
                out.append(Statement(frozenset(title + names_in(s)), frozenset(properties(s))))
    return out


def question_names(question: str) -> list[str]:
    """The names a question asks about: its capitalised names, less a lone capitalised word that opens one of its
    sentences ("According to the records, ...": a name in a question seldom opens it, and a word that does is
    grammar the stop list cannot all hold)."""
    openers = {m.group(1) for m in re.finditer(r"(?:^|[.?!]\s+)([A-Z][\w'\-]*)(?![\w'\-]*\s+[A-Z])", question)}
    return [n for n in names_in(question) if n not in openers]


def _family_positions(question: str) -> dict[str, int]:
    """Each property family the question names, at the position of its first word."""
    out: dict[str, int] = {}
    for i, tok in enumerate(tokens(without_names(question))):
        for f in families(tok):
            out.setdefault(f, i)
    return out


def chain(start: list[str], said: list[Statement], relations: set[str]) -> tuple[set[str], tuple[str, str] | None]:
    """The names reached from `start` through sentences stating one of `relations`, and the newest of them with
    the relation that reached it."""
    known, newest = set(start), None
    for _ in range(_MAX_HOPS):
        grew = False
        for st in said:
            via = st.families & relations
            if via and known & st.names:
                for name in sorted(st.names - known):
                    known.add(name)
                    newest, grew = (name, min(via)), True
        if not grew:
            break
    return known, newest


def check_answer_coverage(question: str, view: list[MemoryItem]) -> Outcome:
    """Passes when the accepted evidence states every name and property the question asks about (or when the
    evidence is not words, or there is none: then the Generator says what it can)."""
    said = statements(view)
    if not view or said is None:
        return passed(NAME, "n/a: no evidence, or evidence that is not only search passages")
    text = tokens(" ".join(f"{p.get('title') or ''}. {p.get('text') or ''}"
                           for item in view for p in item.content.get("passages") or []))
    asked = _family_positions(question)
    named = question_names(question)
    missing_names = [n for n in named if find_span(text, tokens(n)) < 0]
    known, newest = chain(named, said, set(asked))
    about = [st for st in said if st.names & known] if len(asked) >= 2 else said
    covered = set().union(*(st.families for st in about))
    missing_properties = sorted(set(asked) - covered, key=asked.get)
    if not missing_properties and not missing_names:
        return passed(NAME, "the accepted evidence states every name and property the question asks about")
    listed = ", ".join([f"the {p}" for p in missing_properties] + missing_names)
    query = next_lookup(asked, missing_properties, missing_names, newest)
    then = f'next step: search "{query}"' if query else "search for it (a name the evidence found, with the property)"
    return failed(NAME, f"no accepted evidence states {listed}", FailureType.incomplete_evidence,
                  f"the verified evidence does not yet state {listed}, which the question asks about; {then}, then answer")


def next_lookup(asked: dict[str, int], missing_properties: list[str], missing_names: list[str],
                newest: tuple[str, str] | None) -> str | None:
    """The search that would close the gap: a missing name with the first property the question names, or the
    newest name on the chain with the missing property named nearest before its relation in the question ("the
    population of the home city of X": X's home city is Dydan, so "Dydan population")."""
    if missing_names:
        return " ".join([missing_names[0], *sorted(asked, key=asked.get)[:1]])
    if newest is None or not missing_properties:
        return None
    name, via = newest
    before = [p for p in missing_properties if asked[p] < asked[via]]
    return f"{name} {max(before, key=asked.get) if before else missing_properties[0]}"
