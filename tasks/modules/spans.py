"""Answer spans: the values verified evidence states, for a Generator that may only pick among them.

A small model asked to write an answer from evidence copies the wrong thing (the first sentence, a
date header, a worked example's value); asked to choose among the values the evidence actually
states, it picks the right one far more often (embedded SmolLM2-135M, 12 one-hop world lookups with
the gold passage retrieved: 1 of 12 free, 4 of 12 as a choice). Constraining the answer to evidence
spans also makes "the answer comes from verified evidence only" hold by construction.

Spans: numbers as written, names (capitalised word runs, with the small words names contain and middle initials,
each followed by the name before a possessive and after a title inside it), ISO
dates, what a program printed (its last line), and yes / no; for a yes/no question only yes / no
(`polar_question`: on 200 world test questions (seed 7, easy and default) it finds the 31 yes/no ones and no
other; on HotpotQA dev's first 500 questions 79 of the 80 yes/no ones and no other; on GSM8K's 1,319 and
Game of 24's 300 none).
"""

from __future__ import annotations

import re
from typing import Any

from tasks.contracts import MemoryItem

# a number ends on a digit, so a clause's comma stays out of it ("66,900, of whom" offers 66,900)
_NUMBER = re.compile(r"(?<![\w.])-?\d(?:[\d,]*\d)?(?:\.\d+)?(?![\w])")
_DATE = re.compile(r"\b\d{4}-\d{2}-\d{2}\b")
# a name's word; initials ("Henry J. Kaiser", "U.S. Army") are one when another capitalised word follows them
_WORD = r"(?:(?:[A-Z]\.)+(?=\s+[A-Z])|[A-Z][\w'’&-]*)"
_NAME = re.compile(rf"\b{_WORD}(?:\s+(?:(?:of|the|and|de|da|del|du|von|van|la|le)\s+)?{_WORD})*")
_STOP = {"The", "A", "An", "It", "Its", "This", "That", "In", "On", "At", "By", "As", "He", "She", "They", "There"}
# a title before a person's name: the run "New York Governor Nelson Rockefeller" also offers "Nelson Rockefeller"
_TITLES = {"King", "Queen", "Prince", "Princess", "President", "Vice", "Governor", "Senator", "Mayor", "General",
           "Admiral", "Captain", "Colonel", "Sir", "Dame", "Lord", "Lady", "Saint", "Pope", "Bishop", "Judge",
           "Justice", "Professor", "Dr", "Mr", "Mrs", "Ms", "Chancellor", "Minister",
           "Secretary", "Emperor", "Empress", "Duke", "Duchess", "Count", "Countess", "Baron"}
_POSSESSIVE = re.compile(r"['’]s?$")


def _texts(content: Any) -> tuple[list[str], list[str]]:
    """(prose, printed): passage texts, and a program's printed last line."""
    if isinstance(content, dict):
        if isinstance(content.get("passages"), list):
            return [str(p.get("text", "")) for p in content["passages"] if isinstance(p, dict)], []
        if "stdout" in content:
            lines = [ln.strip() for ln in str(content.get("stdout") or "").splitlines() if ln.strip()]
            return [], lines[-1:]
        if isinstance(content.get("text"), str):
            return [content["text"]], []
    return [], []


def _names(text: str) -> list[str]:
    """Capitalised runs, each followed by the names inside it: a possessive ends one ("Nelson Rockefeller's
    Committee" also offers "Nelson Rockefeller"), and a title opens one ("Governor Nelson Rockefeller")."""
    out = []
    for m in _NAME.finditer(text):
        words = m.group(0).split()
        while words and words[0] in _STOP:  # a sentence's first word is capitalised, not a name
            words = words[1:]
        if words:
            out.append(" ".join(words))
            out += _inner_names(words)
    return out


def _inner_names(words: list[str]) -> list[str]:
    inner = []
    owner = next((i for i, w in enumerate(words) if _POSSESSIVE.search(w) and i < len(words) - 1), None)
    if owner is not None:  # the run up to its possessive, without the 's
        words = [*words[:owner], _POSSESSIVE.sub("", words[owner])]
        inner.append(" ".join(words))
    titled = [i for i, w in enumerate(words[:-1]) if w in _TITLES]
    if titled:
        inner.append(" ".join(words[titled[-1] + 1:]))
    return inner


def answer_spans(view: list[MemoryItem], limit: int = 80, question: str = "") -> list[str]:
    """The distinct spans of the accepted evidence, newest evidence first (a program's result leads), at most `limit`;
    a yes/no question (polar_question) is answered yes or no."""
    if question and polar_question(question):
        return ["yes", "no"]
    spans: list[str] = []
    for item in reversed(view):
        prose, printed = _texts(item.content)
        found = list(printed)
        for text in prose:
            found += _DATE.findall(text) + _NUMBER.findall(_DATE.sub(" ", text)) + _names(text)
        for s in found:
            s = s.strip()
            if s and len(s) <= 120 and s not in spans:
                spans.append(s)
    spans = spans[: max(0, limit - 2)]
    return spans + [s for s in ("yes", "no") if s not in spans]


_REQUEST = re.compile(r"^\s*(?:(?:could|can|would|will)\s+you\s+(?:please\s+)?(?:tell|give|show|find|say)(?:\s+me)?|please\s+tell\s+me)\s+")
_AUX = re.compile(r"(?:^|[,;:]\s+)(?:is|are|was|were|do|does|did|has|have|had|can|could|will|would|should)\s")
_WH = re.compile(r"\b(?:who|whom|whose|what|when|where|how|why)\b|(?<!\bin )(?<!\bof )\bwhich\b")  # not "the city in which"


def polar_question(question: str) -> bool:
    """A yes/no question: its question sentence opens a clause with an auxiliary ("Is ...?", "For my briefing, is
    it the case that ...?"), asks "whether", or says "answer yes or no"; not a request ("Could you tell me the
    ..."), an alternative ("A or B") or a wh-question."""
    q = question.strip().lower()
    if re.search(r"\byes or no\b", q):
        return True
    sentences = [x for x in re.split(r"(?<=\w\w[.!?])\s+", q) if x]
    asked = next((x for x in reversed(sentences) if "?" in x), sentences[-1] if sentences else "")
    asked = _REQUEST.sub("", asked)
    if _WH.search(asked) or re.search(r"\bor\b", asked):
        return False
    return bool(_AUX.search(asked) or re.search(r"\bwhether\b", asked))
