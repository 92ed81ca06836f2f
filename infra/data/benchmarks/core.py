"""What the benchmark adapters share: the Benchmark and Adapter types, the errors, reading the source files
(JSONL, JSON arrays and objects, typed records whose errors name the file and the line), the question record,
the pooled corpus, and the backend requirements (``ensure_backends``)."""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, Sequence

#: what each requirement means, for messages
BACKENDS = {"web_search": "a web-search backend"}


class DatasetError(ValueError):
    """Input that cannot be used: the message names the file, the line and the problem."""


class BackendRequiredError(RuntimeError):
    """A benchmark needs a backend (e.g. web search) that this run does not have configured."""


@dataclass
class Benchmark:
    """Question records, the corpus (None when the benchmark has none) and what describes them."""

    questions: list[dict]
    corpus: list[dict] | None
    meta: dict = field(default_factory=dict)

    @property
    def name(self) -> str:
        return self.meta.get("benchmark", "")

    @property
    def requires(self) -> list[str]:
        return list(self.meta.get("requires", []))


@dataclass(frozen=True)
class Adapter:
    """How one benchmark is read: its files (relative to the datasets root) and the reader."""

    name: str
    description: str
    files: tuple[str, ...]
    answer_type: str
    reader: Callable[["_Ctx"], tuple[list[dict], list[dict] | None]]
    requires: tuple[str, ...] = ()
    has_corpus: bool = False


@dataclass
class _Ctx:
    name: str
    paths: dict[str, Path]  # relative name in Adapter.files -> resolved path
    limit: int | None
    notes: list[str] = field(default_factory=list)
    source_questions: int = 0


# =============================================================================== reading files


def _rel(ctx: _Ctx, key: str) -> Path:
    return ctx.paths[key]


def _read_bytes(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError as exc:
        raise DatasetError(f"{path}: cannot read ({exc.strerror or exc})") from None


def _decode(path: Path, raw: bytes) -> str:
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = raw[: exc.start].count(b"\n") + 1
        raise DatasetError(f"{path}: line {line}: not valid UTF-8 ({exc.reason})") from None


def _jsonl(path: Path) -> list[tuple[int, Any]]:
    """(line number, value) for every non-blank line."""
    text = _decode(path, _read_bytes(path))
    out = []
    for n, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            out.append((n, json.loads(line)))
        except json.JSONDecodeError as exc:
            raise DatasetError(f"{path}: line {n}: not valid JSON ({exc.msg} at column {exc.colno})") from None
    if not out:
        raise DatasetError(f"{path}: no records")
    return out


def _json_items(path: Path) -> list[tuple[int, Any]]:
    """(line where the item starts, item) for a JSON array file."""
    text = _decode(path, _read_bytes(path))
    dec = json.JSONDecoder()

    def err(pos: int, msg: str) -> DatasetError:
        line = text.count("\n", 0, pos) + 1
        col = pos - (text.rfind("\n", 0, pos) + 1) + 1
        return DatasetError(f"{path}: line {line}: {msg} at column {col}")

    ws = re.compile(r"\s*")
    i = ws.match(text, 0).end()
    if not text.startswith("[", i):
        raise err(i, "expected a JSON array")
    i = ws.match(text, i + 1).end()
    out: list[tuple[int, Any]] = []
    if text.startswith("]", i):
        raise DatasetError(f"{path}: no records")
    while True:
        try:
            item, end = dec.raw_decode(text, i)
        except json.JSONDecodeError as exc:
            raise err(exc.pos, f"not valid JSON ({exc.msg})") from None
        out.append((text.count("\n", 0, i) + 1, item))
        i = ws.match(text, end).end()
        if text.startswith(",", i):
            i = ws.match(text, i + 1).end()
            continue
        if text.startswith("]", i):
            i = ws.match(text, i + 1).end()
            if i != len(text):
                raise err(i, "not valid JSON (extra data after the array)")
            return out
        raise err(i, "not valid JSON (expected ',' or ']')")


def _json_object(path: Path) -> dict:
    text = _decode(path, _read_bytes(path))
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise DatasetError(f"{path}: line {exc.lineno}: not valid JSON ({exc.msg} at column {exc.colno})") from None
    if not isinstance(value, dict):
        raise DatasetError(f"{path}: line 1: expected a JSON object, got {type(value).__name__}")
    return value


class _Rec:
    """Typed access to one source record; errors name the file and the line."""

    def __init__(self, path: Path, line: int, value: Any):
        self.where = f"{path}: line {line}"
        if not isinstance(value, dict):
            raise DatasetError(f"{self.where}: expected a JSON object, got {type(value).__name__}")
        self.v = value

    def fail(self, msg: str) -> DatasetError:
        return DatasetError(f"{self.where}: {msg}")

    def get(self, key: str, types: type | tuple[type, ...], *, required: bool = True, nonempty: bool = False) -> Any:
        if key not in self.v or self.v[key] is None:
            if required:
                raise self.fail(f"missing field {key!r}")
            return None
        val = self.v[key]
        allowed = types if isinstance(types, tuple) else (types,)
        if not isinstance(val, allowed) or (isinstance(val, bool) and bool not in allowed):
            names = " or ".join(t.__name__ for t in allowed)
            raise self.fail(f"field {key!r} must be {names}, got {type(val).__name__}")
        if nonempty and (not val or isinstance(val, str) and not val.strip()):
            raise self.fail(f"field {key!r} is empty")
        return val


def _take(items: list, limit: int | None) -> list:
    return items if limit is None else items[:limit]


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _doc_id(name: str, title: str, text: str) -> str:
    return f"{name}-{_sha256((title + chr(10) + text).encode('utf-8'))[:12]}"


def _question(bench: str, source_id: str, question: str, answer: str | None, answer_type: str,
              aliases: Iterable[str] = (), requires: Sequence[str] = (), **extra: Any) -> dict:
    seen: list[str] = []
    for a in aliases:
        a = str(a).strip()
        if a and a != answer and a not in seen:
            seen.append(a)
    rec = {"id": f"{bench}-{source_id}", "source_id": str(source_id), "question": question.strip(),
           "answer": answer, "answer_type": answer_type, "aliases": seen, "benchmark": bench,
           "requires": list(requires)}
    rec.update(extra)
    return rec


class _Pool:
    """A corpus pooled from inline paragraphs: deduplicated by (title, text), first-seen order."""

    def __init__(self, name: str):
        self.name, self.docs, self.ids, self.taken = name, [], {}, set()

    def add(self, title: str, text: str) -> str | None:
        title, text = title.strip(), text.strip()
        if not text:
            return None
        key = (title, text)
        if key not in self.ids:
            doc_id = _doc_id(self.name, title, text)
            if doc_id in self.taken:  # two different paragraphs with one 48-bit id: make the second distinct
                doc_id = f"{doc_id}-{len(self.docs)}"
            self.taken.add(doc_id)
            self.ids[key] = doc_id
            self.docs.append({"id": doc_id, "title": title, "text": text})
        return self.ids[key]


def _check_unique(questions: list[dict], path: Path) -> None:
    seen: set[str] = set()
    for q in questions:
        if q["id"] in seen:
            raise DatasetError(f"{path}: duplicate question id {q['source_id']!r}")
        seen.add(q["id"])


# =============================================================================== requirements


def missing_backends(requires: Iterable[str], available: Iterable[str]) -> list[str]:
    """The requirements not among the available backends (e.g. ``["web_search"]``)."""
    have = set(available)
    return [r for r in requires if r not in have]


def ensure_backends(bench: Benchmark | Mapping, available: Iterable[str]) -> None:
    """Raise :class:`BackendRequiredError` when the benchmark needs a backend this run lacks.

    ``bench`` is a :class:`Benchmark`, its meta/manifest, or a question record (``requires``).
    """
    meta = bench.meta if isinstance(bench, Benchmark) else bench
    need = missing_backends(meta.get("requires") or [], available)
    if need:
        what = ", ".join(BACKENDS.get(n, n) for n in need)
        name = meta.get("benchmark", "this benchmark")
        raise BackendRequiredError(
            f"{name} requires {what} (requires: {', '.join(need)}) and none is configured; "
            f"it has no local corpus, so it cannot run with local search only")
