"""The benchmark registry, loading and preparing: the original dataset files -> question records and, where there
is one, a corpus.

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
    :func:`infra.tools.search.load_corpus`). Inline contexts (HotpotQA dev, MuSiQue dev) are pooled from
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

import json
import os
import tempfile
from pathlib import Path
from typing import Iterable, Mapping

from infra.data.benchmarks.core import (
    Adapter,
    Benchmark,
    DatasetError,
    _Ctx,
    _json_object,
    _jsonl,
    _read_bytes,
    _Rec,
    _sha256,
)
from infra.data.benchmarks.game24 import _read_game24_csv, _read_game24_json
from infra.data.benchmarks.mathword import _read_gsm8k, _read_math500, _read_qwen_math
from infra.data.benchmarks.multihop import (
    _read_bamboogle,
    _read_hotpotqa_dev,
    _read_hotpotqa_train,
    _read_musique_dev,
    _read_musique_train,
)
from infra.data.benchmarks.world import _read_world

FORMAT = "agentflow-benchmark/1"
OUTPUT_FILES = ("questions.jsonl", "corpus.jsonl", "manifest.json")


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
