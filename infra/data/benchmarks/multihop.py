"""Multi-hop QA: HotpotQA and MuSiQue (dev with their inline paragraphs pooled into a corpus, train with the
shipped corpus) and Bamboogle (no corpus; needs a web-search backend)."""

from __future__ import annotations

from typing import Any

from infra.data.benchmarks.core import (
    DatasetError,
    _check_unique,
    _Ctx,
    _doc_id,
    _json_items,
    _json_object,
    _jsonl,
    _Pool,
    _question,
    _Rec,
    _rel,
    _take,
)


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
