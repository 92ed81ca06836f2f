"""Generated sections of a document: the text between two marker lines is replaced, the prose around it kept."""

from __future__ import annotations

from pathlib import Path


class MarkersMissing(ValueError):
    """The document lacks the markers; nothing was written."""


def write_marked(doc: Path, begin: str, end: str, text: str, new_doc: str | None = None) -> None:
    """Put `text` between the lines `begin` and `end` of `doc`. A missing `doc` starts as `new_doc` (which holds the
    markers) when given; without the markers nothing is written."""
    body = doc.read_text() if doc.is_file() else (new_doc or "")
    if begin not in body or end not in body:
        raise MarkersMissing(f"{doc}: the markers {begin!r} and {end!r} are missing; nothing written")
    head, rest = body.split(begin, 1)
    doc.write_text(f"{head}{begin}\n{text}\n{end}{rest.split(end, 1)[1]}")
