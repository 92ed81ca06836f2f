"""Benchmark adapters: the original dataset files -> question records and, where there is one, a corpus.

``load_benchmark(name, path)`` reads the files of one benchmark from ``path``: either the datasets
root laid out as in shared/datasets/MANIFEST.md (``path/gsm8k/test.jsonl``) or the benchmark's own
folder (``path/test.jsonl``); the synthetic world reads a directory written by ``agentflow world
generate``. ``prepare(name, src, out)`` writes, into ``out``:

``questions.jsonl``
    one question per line, keys sorted: ``id`` (``<benchmark>-<source id>``, stable), ``question``,
    ``answer`` (string; null only for the world's "uncertain" questions), ``answer_type`` (how it is
    scored: ``number | math | game24 | text``; the world keeps ``number | entity | yes_no``),
    ``aliases`` (other accepted answers), ``benchmark``, ``source_id``, ``requires`` (``["web_search"]``
    for Bamboogle, else empty) and what the scorer or the analysis needs: ``numbers`` and
    ``solutions`` (Game of 24), ``gold_doc_ids`` and ``supporting_titles`` (HotpotQA, MuSiQue),
    ``solution``, ``subject``, ``level``, ``url``, ``decomposition`` ...
``corpus.jsonl``
    for HotpotQA, MuSiQue and the world: ``{id, title, text}`` per line (the format of
    :func:`infra.search.load_corpus`). Inline contexts (HotpotQA dev, MuSiQue dev) are pooled from
    the prepared questions and deduplicated by (title, text); a document's id is
    ``<benchmark>-<first 12 hex of sha256(title + "\\n" + text)>``, so it does not depend on
    ``--limit``. Separate corpus files (the train sets, the world) are taken whole.
``manifest.json``
    format, benchmark, answer type, requirements, limit, counts, the source files (their name in the
    datasets layout, wherever they were read from; size; sha256) and the sha256 of the files written.

Same files and arguments give the same bytes. Bad input raises :class:`DatasetError` naming the
file and the line (for a JSON array, the line where the record starts); nothing is written then, and
files are written to temporary names and renamed, manifest last.
"""

from __future__ import annotations

import csv
import functools
import hashlib
import io
import json
import os
import re
import tempfile
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, Sequence

__all__ = [
    "BENCHMARKS",
    "FORMAT",
    "GAME24_PROMPT",
    "Adapter",
    "BackendRequiredError",
    "Benchmark",
    "DatasetError",
    "ensure_backends",
    "load_benchmark",
    "load_prepared",
    "missing_backends",
    "prepare",
    "solve_game24",
]

FORMAT = "agentflow-benchmark/1"
OUTPUT_FILES = ("questions.jsonl", "corpus.jsonl", "manifest.json")
GAME24_PROMPT = ("Using the numbers [{numbers}], create an expression that equals 24. You must use basic arithmetic "
                 "operations (+, -, ×, /) and parentheses. **Each number can only be used once.**  Example: for "
                 "[1, 2, 3, 4], one solution is (1+2+3)×4.")
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


# =============================================================================== numbers


def _canonical_number(text: str, where: str) -> str:
    """'2,125' -> '2125', '025' -> '25', '27.0' -> '27', '-3.50' -> '-3.5'."""
    s = str(text).strip().replace(",", "").replace("$", "")
    try:
        v = Fraction(s)
    except (ValueError, ZeroDivisionError):
        raise DatasetError(f"{where}: answer {text!r} is not a number") from None
    if v.denominator == 1:
        return str(v.numerator)
    return format(float(v), "g") if "/" not in s else s


# =============================================================================== readers


def _read_gsm8k(ctx: _Ctx) -> tuple[list[dict], None]:
    path = _rel(ctx, "gsm8k/test.jsonl")
    rows = _jsonl(path)
    ctx.source_questions = len(rows)
    out = []
    for line, value in _take(rows, ctx.limit):
        r = _Rec(path, line, value)
        q, a = r.get("question", str, nonempty=True), r.get("answer", str, nonempty=True)
        if "####" not in a:
            raise r.fail("field 'answer' has no '#### <number>' final answer")
        solution, final = a.rsplit("####", 1)
        out.append(_question(ctx.name, f"{line:04d}", q, _canonical_number(final, r.where), "number",
                             solution=solution.strip()))
    return out, None


def _read_game24_json(ctx: _Ctx) -> tuple[list[dict], None]:
    path = _rel(ctx, "game24/data.json")
    items = _json_items(path)
    ctx.source_questions = len(items)
    out = []
    for line, value in _take(items, ctx.limit):
        r = _Rec(path, line, value)
        pid = r.get("pid", (str, int))
        nums = r.get("question", list)
        if len(nums) != 4 or not all(isinstance(n, int) and not isinstance(n, bool) for n in nums):
            raise r.fail(f"field 'question' must be a list of 4 integers, got {nums!r}")
        sols = r.get("answer", list, required=False) or []
        if not all(isinstance(s, str) for s in sols):
            raise r.fail("field 'answer' must be a list of strings")
        out.append(_game24_question(ctx.name, str(pid), nums, sols))
    return out, None


def _game24_question(bench: str, source_id: str, nums: list[int], solutions: list[str], **extra: Any) -> dict:
    return _question(bench, source_id, GAME24_PROMPT.format(numbers=", ".join(map(str, nums))),
                     " ".join(map(str, nums)), "game24", numbers=list(nums), solutions=list(solutions), **extra)


def _read_game24_csv(ctx: _Ctx) -> tuple[list[dict], None]:
    path = _rel(ctx, "game24/24.csv")
    text = _decode(path, _read_bytes(path))
    reader = csv.DictReader(io.StringIO(text, newline=""))
    if not reader.fieldnames or "Puzzles" not in reader.fieldnames or "Rank" not in reader.fieldnames:
        raise DatasetError(f"{path}: line 1: expected a header with 'Rank' and 'Puzzles', got {reader.fieldnames}")
    rows = []
    for row in reader:
        rows.append((reader.line_num, row))
    if not rows:
        raise DatasetError(f"{path}: no records")
    ctx.source_questions = len(rows)
    out = []
    for line, row in _take(rows, ctx.limit):
        where = f"{path}: line {line}"
        try:
            rank = int(row["Rank"])
            nums = [int(x) for x in (row["Puzzles"] or "").split()]
        except (TypeError, ValueError):
            raise DatasetError(f"{where}: 'Rank' must be an integer and 'Puzzles' four integers, "
                               f"got {row.get('Rank')!r}, {row.get('Puzzles')!r}") from None
        if len(nums) != 4:
            raise DatasetError(f"{where}: 'Puzzles' must hold four integers, got {row['Puzzles']!r}")
        solved = row.get("Solved rate") or ""
        rate = float(solved.rstrip("%")) / 100 if re.fullmatch(r"\d+(?:\.\d+)?%", solved.strip()) else None
        sol = solve_game24(nums)
        out.append(_game24_question(ctx.name, f"{rank:04d}", nums, [sol] if sol else [], rank=rank,
                                    human_solved_rate=rate))
        if sol is None:
            ctx.notes.append(f"rank {rank} ({row['Puzzles']}) has no solution")
    return out, None


def _is_paragraph(p: Any) -> bool:
    return isinstance(p, dict) and isinstance(p.get("title"), str) and isinstance(p.get("paragraph_text"), str)


def _read_hotpotqa_dev(ctx: _Ctx) -> tuple[list[dict], list[dict]]:
    path = _rel(ctx, "hotpotqa/dev_subsampled.jsonl")
    rows = _jsonl(path)
    ctx.source_questions = len(rows)
    pool = _Pool(ctx.name)
    out = []
    for line, value in _take(rows, ctx.limit):
        r = _Rec(path, line, value)
        qid = r.get("question_id", str, nonempty=True)
        text = r.get("question_text", str, nonempty=True)
        spans: list[str] = []
        for obj in r.get("answers_objects", list, nonempty=True):
            if not isinstance(obj, dict) or not isinstance(obj.get("spans"), list):
                raise r.fail("field 'answers_objects' must hold objects with a 'spans' list")
            spans += [str(s) for s in obj["spans"] if str(s).strip()]
            if obj.get("number"):
                spans.append(str(obj["number"]))
        if not spans:
            raise r.fail("no answer span in 'answers_objects'")
        gold, titles = [], []
        for c in r.get("contexts", list, nonempty=True):
            if not _is_paragraph(c):
                raise r.fail("field 'contexts' must hold objects with 'title' and 'paragraph_text' strings")
            doc_id = pool.add(c["title"], c["paragraph_text"])
            if c.get("is_supporting") and doc_id is not None:
                gold.append(doc_id)
                titles.append(c["title"].strip())
        out.append(_question(ctx.name, qid, text, spans[0], "text", aliases=spans[1:], gold_doc_ids=gold,
                             supporting_titles=titles))
    _check_unique(out, path)
    return out, pool.docs


def _read_hotpotqa_train(ctx: _Ctx) -> tuple[list[dict], list[dict]]:
    qpath, cpath = _rel(ctx, "hotpotqa/hotpotqa_train.json"), _rel(ctx, "hotpotqa/hotpotqa_train_corpus.json")
    items = _json_items(qpath)
    ctx.source_questions = len(items)
    raw = _json_object(cpath)
    corpus, by_title = [], {}
    for title, sents in raw.items():
        if not isinstance(sents, list) or not all(isinstance(s, str) for s in sents):
            raise DatasetError(f"{cpath}: entry {title!r}: expected a list of sentences")
        text = "".join(sents).strip()
        if not text:
            continue
        doc = {"id": _doc_id(ctx.name, title.strip(), text), "title": title.strip(), "text": text}
        corpus.append(doc)
        by_title.setdefault(title.strip(), doc["id"])
    out = []
    missing = 0
    for line, value in _take(items, ctx.limit):
        r = _Rec(qpath, line, value)
        qid = r.get("_id", str, nonempty=True)
        facts = r.get("supporting_facts", list)
        titles: list[str] = []
        for f in facts:
            if not isinstance(f, list) or not f or not isinstance(f[0], str):
                raise r.fail("field 'supporting_facts' must hold [title, sentence index] pairs")
            if f[0].strip() not in titles:
                titles.append(f[0].strip())
        gold = [by_title[t] for t in titles if t in by_title]
        missing += len(titles) - len(gold)
        out.append(_question(ctx.name, qid, r.get("question", str, nonempty=True),
                             str(r.get("answer", (str, int, float))).strip(), "text", gold_doc_ids=gold,
                             supporting_titles=titles, type=r.get("type", str, required=False),
                             level=r.get("level", str, required=False)))
    if missing:
        ctx.notes.append(f"{missing} supporting titles are not in {cpath.name}")
    _check_unique(out, qpath)
    return out, corpus


def _musique_question(ctx: _Ctx, r: _Rec, pool: _Pool | None, by_key: dict | None) -> tuple[dict, int]:
    qid = r.get("id", str, nonempty=True)
    gold, titles, missing = [], [], 0
    for p in r.get("paragraphs", list):
        if not _is_paragraph(p):
            raise r.fail("field 'paragraphs' must hold objects with 'title' and 'paragraph_text' strings")
        if pool is not None:
            doc_id = pool.add(p["title"], p["paragraph_text"])
        else:
            doc_id = by_key.get((p["title"].strip(), p["paragraph_text"].strip()))
            if doc_id is None and p.get("is_supporting"):
                missing += 1
        if p.get("is_supporting") and doc_id is not None:
            gold.append(doc_id)
            titles.append(p["title"].strip())
    aliases = r.get("answer_aliases", list, required=False) or []
    decomposition = r.get("question_decomposition", list, required=False) or []
    q = _question(ctx.name, qid, r.get("question", str, nonempty=True), r.get("answer", str, nonempty=True).strip(),
                  "text", aliases=[str(a) for a in aliases], gold_doc_ids=gold, supporting_titles=titles,
                  answerable=r.get("answerable", bool, required=False),
                  decomposition=[{"question": d.get("question"), "answer": d.get("answer")}
                                 for d in decomposition if isinstance(d, dict)],
                  hops=len(decomposition) or None)
    return q, missing


def _read_musique_dev(ctx: _Ctx) -> tuple[list[dict], list[dict]]:
    path = _rel(ctx, "musique/musique_qa_100.json")
    items = _json_items(path)
    ctx.source_questions = len(items)
    pool = _Pool(ctx.name)
    out = [_musique_question(ctx, _Rec(path, line, v), pool, None)[0] for line, v in _take(items, ctx.limit)]
    _check_unique(out, path)
    return out, pool.docs


def _read_musique_train(ctx: _Ctx) -> tuple[list[dict], list[dict]]:
    qpath, cpath = _rel(ctx, "musique/musique_train.json"), _rel(ctx, "musique/musique_train_corpus.json")
    items = _json_items(qpath)
    ctx.source_questions = len(items)
    corpus, by_key = [], {}
    for line, value in _json_items(cpath):
        r = _Rec(cpath, line, value)
        title, text = r.get("title", str).strip(), r.get("text", str).strip()
        if not text or (title, text) in by_key:
            continue
        doc = {"id": _doc_id(ctx.name, title, text), "title": title, "text": text}
        by_key[(title, text)] = doc["id"]
        corpus.append(doc)
    out, missing = [], 0
    for line, value in _take(items, ctx.limit):
        q, m = _musique_question(ctx, _Rec(qpath, line, value), None, by_key)
        out.append(q)
        missing += m
    if missing:
        ctx.notes.append(f"{missing} supporting paragraphs are not in {cpath.name}")
    _check_unique(out, qpath)
    return out, corpus


def _read_bamboogle(ctx: _Ctx) -> tuple[list[dict], None]:
    path = _rel(ctx, "bamboogle/bamboogle.jsonl")
    rows = _jsonl(path)
    ctx.source_questions = len(rows)
    out = []
    for line, value in _take(rows, ctx.limit):
        r = _Rec(path, line, value)
        idx = r.get("idx", (int, str))
        out.append(_question(ctx.name, str(idx), r.get("question", str, nonempty=True),
                             str(r.get("answer", (str, int, float))).strip(), "text", requires=["web_search"]))
    _check_unique(out, path)
    return out, None


def _read_qwen_math(key: str) -> Callable[[_Ctx], tuple[list[dict], None]]:
    """AIME24 / AMC23 in the Qwen2.5-Math layout: id, problem, answer, url (and solution)."""

    def read(ctx: _Ctx) -> tuple[list[dict], None]:
        path = _rel(ctx, key)
        rows = _jsonl(path)
        ctx.source_questions = len(rows)
        out = []
        for line, value in _take(rows, ctx.limit):
            r = _Rec(path, line, value)
            sid = r.get("id", (int, str))
            answer = _canonical_number(r.get("answer", (str, int, float)), r.where)
            extra = {"url": r.get("url", str, required=False)}
            sol = r.get("solution", str, required=False)
            if sol is not None:
                extra["solution"] = sol
            out.append(_question(ctx.name, f"{int(sid):03d}" if isinstance(sid, int) else sid,
                                 r.get("problem", str, nonempty=True), answer, "number", **extra))
        _check_unique(out, path)
        return out, None

    return read


def _read_math500(ctx: _Ctx) -> tuple[list[dict], None]:
    path = _rel(ctx, "math500/test.jsonl")
    rows = _jsonl(path)
    ctx.source_questions = len(rows)
    out = []
    for line, value in _take(rows, ctx.limit):
        r = _Rec(path, line, value)
        q = _question(ctx.name, f"{line:04d}", r.get("problem", str, nonempty=True),
                      r.get("answer", str, nonempty=True).strip(), "math",
                      solution=r.get("solution", str, required=False), subject=r.get("subject", str, required=False),
                      level=r.get("level", (int, str), required=False),
                      unique_id=r.get("unique_id", str, required=False))
        out.append(q)
    return out, None


def _read_world(ctx: _Ctx) -> tuple[list[dict], list[dict]]:
    from infra.search import CorpusError, load_corpus
    from infra.world import FORMAT as WORLD_FORMAT

    mpath = _rel(ctx, "manifest.json")
    manifest = _json_object(mpath)
    if manifest.get("format") != WORLD_FORMAT:
        raise DatasetError(f"{mpath}: not a world manifest (format {manifest.get('format')!r}, "
                           f"expected {WORLD_FORMAT!r})")
    qpath, cpath = _rel(ctx, "questions.jsonl"), _rel(ctx, "corpus.jsonl")
    try:
        docs = load_corpus(cpath)
    except CorpusError as exc:
        raise DatasetError(str(exc)) from None
    except OSError as exc:
        raise DatasetError(f"{cpath}: cannot read ({exc.strerror or exc})") from None
    corpus = []
    for d in docs:
        doc = {"id": d.id, "title": d.title, "text": d.text}
        if d.url:
            doc["url"] = d.url
        if d.published_at:
            doc["published_at"] = d.published_at
        corpus.append(doc)
    rows = _jsonl(qpath)
    ctx.source_questions = len(rows)
    out = []
    for line, value in _take(rows, ctx.limit):
        r = _Rec(qpath, line, value)
        sid = r.get("id", str, nonempty=True)
        kind = r.get("answer_type", str, nonempty=True)
        if kind not in ("number", "entity", "yes_no"):
            raise r.fail(f"field 'answer_type' must be number, entity or yes_no, got {kind!r}")
        status = r.get("expected_status", str, nonempty=True)
        answer = r.get("answer", str, required=status != "uncertain")
        ours = ("id", "question", "answer", "answer_type", "aliases", "benchmark", "source_id", "requires")
        extra = {k: v for k, v in r.v.items() if k not in ours}
        out.append(_question(ctx.name, sid, r.get("question", str, nonempty=True), answer, kind, **extra))
    ctx.notes.append(f"world seed {manifest.get('seed')}, split {manifest.get('split')}")
    _check_unique(out, qpath)
    return out, corpus


# =============================================================================== the registry

BENCHMARKS: dict[str, Adapter] = {a.name: a for a in (
    Adapter("gsm8k", "GSM8K test: grade-school math word problems (numeric answer after '####')",
            ("gsm8k/test.jsonl",), "number", _read_gsm8k),
    Adapter("game24", "Game of 24, the 300 puzzles of AgentFlow's test set (with reference solutions)",
            ("game24/data.json",), "game24", _read_game24_json),
    Adapter("game24-1362", "Game of 24, the 1362 Tree-of-Thoughts puzzles ranked by human difficulty "
                           "(reference solutions computed exactly)",
            ("game24/24.csv",), "game24", _read_game24_csv),
    Adapter("hotpotqa", "HotpotQA dev (500, IRCoT subsample); its paragraphs pooled into the search corpus",
            ("hotpotqa/dev_subsampled.jsonl",), "text", _read_hotpotqa_dev, has_corpus=True),
    Adapter("hotpotqa-train", "HotpotQA train (100, HippoRAG) with its 994-title corpus",
            ("hotpotqa/hotpotqa_train.json", "hotpotqa/hotpotqa_train_corpus.json"), "text", _read_hotpotqa_train,
            has_corpus=True),
    Adapter("musique", "MuSiQue dev (100, KAG); its paragraphs pooled into the search corpus; answer aliases kept",
            ("musique/musique_qa_100.json",), "text", _read_musique_dev, has_corpus=True),
    Adapter("musique-train", "MuSiQue train (100, HippoRAG) with its 1890-passage corpus",
            ("musique/musique_train.json", "musique/musique_train_corpus.json"), "text", _read_musique_train,
            has_corpus=True),
    Adapter("bamboogle", "Bamboogle (125): no corpus; needs a web-search backend",
            ("bamboogle/bamboogle.jsonl",), "text", _read_bamboogle, requires=("web_search",)),
    Adapter("aime24", "AIME 2024 (30): integer answers", ("aime24/test.jsonl",), "number",
            _read_qwen_math("aime24/test.jsonl")),
    Adapter("amc23", "AMC 2023 (40): numeric answers", ("amc23/test.jsonl",), "number",
            _read_qwen_math("amc23/test.jsonl")),
    Adapter("math500", "MATH-500: LaTeX answers, scored by sympy equivalence", ("math500/test.jsonl",), "math",
            _read_math500),
    Adapter("world", "A synthetic research world written by `agentflow world generate` (--from is its directory)",
            ("questions.jsonl", "corpus.jsonl", "manifest.json"), "world", _read_world, has_corpus=True),
)}


def _resolve(adapter: Adapter, src: Path) -> dict[str, Path]:
    if not src.exists():
        raise DatasetError(f"{src}: no such file or directory")
    if src.is_file():
        if len(adapter.files) != 1:
            raise DatasetError(f"{src}: {adapter.name} reads {len(adapter.files)} files "
                               f"({', '.join(adapter.files)}); give their directory")
        return {adapter.files[0]: src}
    if not src.is_dir():
        raise DatasetError(f"{src}: not a directory")
    paths = {}
    for rel in adapter.files:
        candidates = [src / rel]
        if "/" in rel:
            candidates.append(src / Path(rel).name)  # --from points at the benchmark's own folder
        found = next((c for c in candidates if c.is_file()), None)
        if found is None:
            looked = " or ".join(str(c) for c in candidates)
            raise DatasetError(f"{adapter.name}: missing file {Path(rel).name!r} (looked for {looked})")
        paths[rel] = found
    return paths


def _adapter(name: str) -> Adapter:
    if name not in BENCHMARKS:
        raise KeyError(f"unknown benchmark {name!r}; known: {', '.join(BENCHMARKS)}")
    return BENCHMARKS[name]


def load_benchmark(name: str, path: str | Path, limit: int | None = None) -> Benchmark:
    """Read benchmark ``name`` from ``path``: the datasets root, the benchmark's folder, or (one-file
    benchmarks) the file itself; only the first ``limit`` questions (file order)."""
    adapter = _adapter(name)
    if limit is not None and (not isinstance(limit, int) or limit < 1):
        raise ValueError(f"limit must be a positive integer, got {limit!r}")
    src = Path(path)
    paths = _resolve(adapter, src)
    ctx = _Ctx(name=name, paths=paths, limit=limit)
    questions, corpus = adapter.reader(ctx)
    sources = []
    for rel, p in paths.items():
        data = _read_bytes(p)
        sources.append({"path": rel, "bytes": len(data), "sha256": _sha256(data)})
    meta = {
        "format": FORMAT,
        "benchmark": name,
        "description": adapter.description,
        "answer_type": adapter.answer_type,
        "requires": list(adapter.requires),
        "limit": limit,
        "counts": {"questions": len(questions), "source_questions": ctx.source_questions,
                   "corpus": None if corpus is None else len(corpus)},
        "sources": sources,
        "notes": ctx.notes,
    }
    return Benchmark(questions=questions, corpus=corpus, meta=meta)


@functools.lru_cache(maxsize=4096)
def _solve(key: tuple[int, ...]) -> str | None:
    seen: set[tuple[Fraction, ...]] = set()

    def go(items: list[tuple[Fraction, str]]) -> str | None:
        if len(items) == 1:
            return items[0][1] if items[0][0] == 24 else None
        state = tuple(sorted(v for v, _ in items))
        if state in seen:
            return None
        seen.add(state)
        for i in range(len(items)):
            for j in range(len(items)):
                if i == j:
                    continue
                (a, ea), (b, eb) = items[i], items[j]
                rest = [items[k] for k in range(len(items)) if k not in (i, j)]
                options = []
                if i < j:
                    options += [(a + b, f"({ea} + {eb})"), (a * b, f"({ea} * {eb})")]
                options.append((a - b, f"({ea} - {eb})"))
                if b != 0:
                    options.append((a / b, f"({ea} / {eb})"))
                for v, e in options:
                    got = go(rest + [(v, e)])
                    if got is not None:
                        return got
        return None

    found = go([(Fraction(n), str(n)) for n in key])
    if found is None:
        return None
    return found[1:-1] if found.startswith("(") and found.endswith(")") else found


def solve_game24(numbers: Sequence[int]) -> str | None:
    """One expression over ``numbers`` (each used once, + - * /) equal to 24 exactly, or None. Deterministic."""
    return _solve(tuple(int(n) for n in numbers))


# =============================================================================== writing


def _jsonl_bytes(records: Iterable[Mapping]) -> bytes:
    return "".join(json.dumps(r, sort_keys=True, ensure_ascii=False) + "\n" for r in records).encode("utf-8")


def _write_files(out: Path, files: dict[str, bytes], remove: Iterable[str] = ()) -> None:
    """Write every file to a temporary name first, then rename them into place in order (manifest last)."""
    if out.exists() and not out.is_dir():
        raise DatasetError(f"{out}: exists and is not a directory")
    out.mkdir(parents=True, exist_ok=True)
    temps: dict[str, str] = {}
    try:
        for name, data in files.items():
            fd, tmp = tempfile.mkstemp(prefix=f".{name}.", suffix=".tmp", dir=out)
            temps[name] = tmp
            with os.fdopen(fd, "wb") as fh:
                fh.write(data)
                fh.flush()
                os.fsync(fh.fileno())
            os.chmod(tmp, 0o644)
        for name in files:
            os.replace(temps.pop(name), out / name)
    finally:
        for tmp in temps.values():
            Path(tmp).unlink(missing_ok=True)
    for name in remove:
        (out / name).unlink(missing_ok=True)


def prepare(name: str, src: str | Path, out: str | Path, limit: int | None = None) -> Path:
    """Write questions.jsonl, corpus.jsonl (when the benchmark has one) and manifest.json into ``out``.

    Everything is read and checked before anything is written. A corpus.jsonl left in ``out`` by an
    earlier preparation is removed when this benchmark has none. Returns ``out``.
    """
    bench = load_benchmark(name, src, limit)
    out = Path(out)
    files = {"questions.jsonl": _jsonl_bytes(bench.questions)}
    if bench.corpus is not None:
        files["corpus.jsonl"] = _jsonl_bytes(bench.corpus)
    manifest = dict(bench.meta)
    manifest["files"] = {k: _sha256(v) for k, v in files.items()}
    files["manifest.json"] = (json.dumps(manifest, sort_keys=True, indent=2, ensure_ascii=False) + "\n").encode("utf-8")
    _write_files(out, files, remove=[] if bench.corpus is not None else ["corpus.jsonl"])
    return out


def load_prepared(path: str | Path) -> Benchmark:
    """Read a directory written by :func:`prepare` (files checked against the manifest's hashes)."""
    d = Path(path)
    if not d.is_dir():
        raise DatasetError(f"{d}: no such directory")
    mpath = d / "manifest.json"
    if not mpath.is_file():
        raise DatasetError(f"{d}: not a prepared benchmark (no manifest.json; run `agentflow data prepare`)")
    meta = _json_object(mpath)
    if meta.get("format") != FORMAT:
        raise DatasetError(f"{mpath}: unknown format {meta.get('format')!r} (expected {FORMAT!r})")
    got: dict[str, list[dict] | None] = {}
    for name, expected in sorted((meta.get("files") or {}).items()):
        p = d / name
        if not p.is_file():
            raise DatasetError(f"{p}: missing (listed in {mpath.name})")
        if _sha256(_read_bytes(p)) != expected:
            raise DatasetError(f"{p}: changed since it was prepared (sha256 differs from {mpath.name}); "
                               "prepare it again")
        got[name] = [_Rec(p, n, v).v for n, v in _jsonl(p)]
    if "questions.jsonl" not in got:
        raise DatasetError(f"{mpath}: lists no questions.jsonl")
    return Benchmark(questions=got["questions.jsonl"], corpus=got.get("corpus.jsonl"), meta=meta)


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
