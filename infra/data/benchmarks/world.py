"""The synthetic research world: a directory written by `agentflow world generate` read as a benchmark."""

from __future__ import annotations

from infra.data.benchmarks.core import (
    DatasetError,
    _check_unique,
    _Ctx,
    _json_object,
    _jsonl,
    _question,
    _Rec,
    _rel,
    _take,
)


def _read_world(ctx: _Ctx) -> tuple[list[dict], list[dict]]:
    from infra.data.world import FORMAT as WORLD_FORMAT
    from infra.tools.search import CorpusError, load_corpus

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
