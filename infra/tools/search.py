"""Local BM25 search over a JSONL corpus (bm25s).

A corpus file holds one JSON object per line::

    {"id": "d1", "title": "Lake Orvanne", "text": "Lake Orvanne is 212 metres deep ...",
     "url": "https://example.org/orvanne", "published_at": "2024-03-01"}

``id``, ``title`` and ``text`` are required strings (``id`` and ``text`` non-empty); ``url`` and
``published_at`` (an ISO date, or an ISO date-time) are optional. Blank lines are skipped; other
keys are ignored. A bad line raises :class:`CorpusError` naming the file, the 1-based line number
and what is wrong; a duplicate id names both lines.

The index covers title and text. Tokenisation is ours (not bm25s's) so that indexing and querying
agree exactly and do not depend on optional packages: case-folded word tokens, digit groups joined
("4,210" -> "4210", "412.7" stays one token), English stopwords removed (bm25s's ``STOPWORDS_EN_PLUS``),
and a light, deterministic plural stemmer (Harman's "S" stemmer). Results are ordered by score,
ties broken by corpus order, so the same corpus and query always give the same passages.
Documents with no query term (score 0) are never returned.
"""

from __future__ import annotations

import json
import re
import threading
from dataclasses import dataclass
from datetime import date, datetime
from pathlib import Path
from typing import Iterable

import bm25s
import numpy as np
from bm25s.stopwords import STOPWORDS_EN_PLUS

__all__ = [
    "CorpusError",
    "Document",
    "Passage",
    "SearchIndex",
    "cached_index",
    "clear_index_cache",
    "load_corpus",
    "tokenize",
]


class CorpusError(ValueError):
    """A corpus file that cannot be used; the message names the file, the line and the problem."""


@dataclass(frozen=True)
class Document:
    id: str
    title: str
    text: str
    url: str | None = None
    published_at: str | None = None  # ISO date


@dataclass(frozen=True)
class Passage:
    doc_id: str
    title: str
    text: str
    url: str | None
    published_at: str | None
    score: float


# ------------------------------------------------------------------------------- tokenisation

_STOPWORDS = frozenset(STOPWORDS_EN_PLUS)
_DIGIT_GROUP = re.compile(r"(?<=\d),(?=\d{3}(?!\d))")
_TOKEN = re.compile(r"\d+(?:\.\d+)?|\w+")


def _stem(tok: str) -> str:
    """Harman's S-stemmer: plural endings only; leaves short words, digits and names of 3 letters alone."""
    if len(tok) <= 3 or not tok.isalpha():
        return tok
    if tok.endswith("ies") and not tok.endswith(("eies", "aies")):
        return tok[:-3] + "y"
    if tok.endswith("es") and not tok.endswith(("aes", "ees", "oes")):
        return tok[:-1]
    if tok.endswith("s") and not tok.endswith(("us", "ss")):
        return tok[:-1]
    return tok


def tokenize(text: str) -> list[str]:
    """The tokens the index uses for ``text`` (documents and queries alike)."""
    text = _DIGIT_GROUP.sub("", text.casefold())
    out = []
    for tok in _TOKEN.findall(text):
        tok = tok.strip("_")
        if not tok or tok in _STOPWORDS:
            continue
        out.append(_stem(tok))
    return out


# ------------------------------------------------------------------------------- corpus files


def _valid_iso_date(value: str) -> bool:
    try:
        date.fromisoformat(value)
        return True
    except ValueError:
        pass
    try:
        datetime.fromisoformat(value)
        return True
    except ValueError:
        return False


def _document_from_record(rec: object, where: str) -> Document:
    if not isinstance(rec, dict):
        raise CorpusError(f"{where}: expected a JSON object, got {type(rec).__name__}")
    for key in ("id", "title", "text"):
        if key not in rec:
            raise CorpusError(f"{where}: missing required field {key!r}")
        if not isinstance(rec[key], str):
            raise CorpusError(f"{where}: field {key!r} must be a string, got {type(rec[key]).__name__}")
    if not rec["id"].strip():
        raise CorpusError(f"{where}: field 'id' is empty")
    if not rec["text"].strip():
        raise CorpusError(f"{where}: field 'text' is empty")
    for key in ("url", "published_at"):
        v = rec.get(key)
        if v is not None and not isinstance(v, str):
            raise CorpusError(f"{where}: field {key!r} must be a string or null, got {type(v).__name__}")
    pub = rec.get("published_at")
    if pub is not None and not _valid_iso_date(pub):
        raise CorpusError(f"{where}: field 'published_at' is not an ISO date: {pub!r}")
    return Document(id=rec["id"], title=rec["title"], text=rec["text"], url=rec.get("url") or None,
                    published_at=pub or None)


def load_corpus(path: str | Path) -> list[Document]:
    """Read a JSONL corpus. Raises CorpusError (bad line, duplicate id) or OSError (unreadable file)."""
    p = Path(path)
    docs: list[Document] = []
    first_line: dict[str, int] = {}
    with p.open("rb") as fh:
        for n, raw in enumerate(fh, start=1):
            where = f"{p}: line {n}"
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise CorpusError(f"{where}: not valid UTF-8 ({exc.reason} at byte {exc.start})") from None
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
            except json.JSONDecodeError as exc:
                raise CorpusError(f"{where}: not valid JSON ({exc.msg} at column {exc.colno})") from None
            doc = _document_from_record(rec, where)
            if doc.id in first_line:
                raise CorpusError(f"{where}: duplicate id {doc.id!r} (first seen on line {first_line[doc.id]})")
            first_line[doc.id] = n
            docs.append(doc)
    return docs


# ------------------------------------------------------------------------------- the index


class SearchIndex:
    """BM25 over title + text of a fixed list of documents."""

    def __init__(self, docs: Iterable[Document], *, k1: float = 1.5, b: float = 0.75):
        self._docs: list[Document] = list(docs)
        seen: set[str] = set()
        for d in self._docs:
            if d.id in seen:
                raise CorpusError(f"duplicate document id {d.id!r}")
            seen.add(d.id)
        self._bm25: bm25s.BM25 | None = None
        if self._docs:
            corpus_tokens = [tokenize(f"{d.title}\n{d.text}") for d in self._docs]
            self._bm25 = bm25s.BM25(k1=k1, b=b)
            self._bm25.index(corpus_tokens, show_progress=False)

    @classmethod
    def from_documents(cls, docs: Iterable[Document]) -> "SearchIndex":
        return cls(docs)

    @classmethod
    def from_jsonl(cls, path: str | Path) -> "SearchIndex":
        return cls(load_corpus(path))

    def __len__(self) -> int:
        return len(self._docs)

    @property
    def documents(self) -> list[Document]:
        return list(self._docs)

    def search(self, query: str, k: int = 3, max_chars: int = 600) -> list[Passage]:
        """The ``k`` best passages for ``query``, best first; [] when no query term is in the corpus.

        Each passage is its document's text, cut to at most ``max_chars`` characters (an ellipsis
        marks a cut).
        """
        if not isinstance(k, int) or k < 1:
            raise ValueError(f"k must be a positive integer, got {k!r}")
        if not isinstance(max_chars, int) or max_chars < 1:
            raise ValueError(f"max_chars must be a positive integer, got {max_chars!r}")
        if self._bm25 is None or not isinstance(query, str):
            return []
        vocab = self._bm25.vocab_dict
        terms = [t for t in tokenize(query) if t in vocab and t != ""]
        if not terms:
            return []
        scores = np.asarray(self._bm25.get_scores(terms), dtype=np.float64)
        positive = np.flatnonzero(scores > 0)
        if positive.size == 0:
            return []
        # best score first; equal scores in corpus order (deterministic)
        order = positive[np.lexsort((positive, -scores[positive]))][:k]
        return [self._passage(int(i), float(scores[i]), max_chars) for i in order]

    def _passage(self, i: int, score: float, max_chars: int) -> Passage:
        d = self._docs[i]
        text = d.text
        if len(text) > max_chars:
            text = text[: max_chars - 1].rstrip() + "\u2026"
        return Passage(doc_id=d.id, title=d.title, text=text, url=d.url, published_at=d.published_at, score=score)


# ------------------------------------------------------------------------------- per-process cache

_cache: dict[str, tuple[tuple[int, int], SearchIndex]] = {}
_cache_lock = threading.Lock()


def cached_index(path: str | Path) -> SearchIndex:
    """The index of ``path``, built once per process and rebuilt only when the file changes.

    Keyed by the resolved path; the entry is reused while the file's (mtime_ns, size) are unchanged.
    """
    p = Path(path).resolve()
    st = p.stat()
    stamp = (st.st_mtime_ns, st.st_size)
    key = str(p)
    with _cache_lock:
        hit = _cache.get(key)
        if hit is not None and hit[0] == stamp:
            return hit[1]
        index = SearchIndex.from_jsonl(p)
        _cache[key] = (stamp, index)
        return index


def clear_index_cache() -> None:
    with _cache_lock:
        _cache.clear()
