"""Local BM25 search: ranking on small hand-made corpora, corpus file errors, determinism, the cache."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from infra.tools.search import (
    CorpusError,
    Document,
    Passage,
    SearchIndex,
    cached_index,
    clear_index_cache,
    load_corpus,
    tokenize,
)

DOCS = [
    Document("lake", "Lake Orvanne", "Lake Orvanne is 212 metres deep at its deepest point.",
             "https://example.org/orvanne", "2024-03-01"),
    Document("mount", "Mount Kelbra", "Mount Kelbra rises 3,104 metres above sea level."),
    Document("velt", "Velt Corporation", "Velt Corporation was founded in 1987 by Ama Osei. It has 4,210 employees."),
    Document("quorin", "Quorin", "Quorin is a harbour city with a population of 812,345 people."),
    Document("drum", "Drummond Bakery", "The bakery sells rye bread and seeded rolls every morning."),
    Document("rail", "Ostrel Railway", "The Ostrel Railway links Quorin with Mount Kelbra by a tunnel."),
]


@pytest.fixture(scope="module")
def index() -> SearchIndex:
    return SearchIndex.from_documents(DOCS)


def write_jsonl(path: Path, records: list) -> Path:
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in records), encoding="utf-8")
    return path


@pytest.mark.parametrize(
    "query, best",
    [
        ("How deep is Lake Orvanne?", "lake"),
        ("height of Mount Kelbra", "mount"),
        ("Who founded Velt Corporation?", "velt"),
        ("population of Quorin", "quorin"),
        ("where can I buy rye bread", "drum"),
        ("railway tunnel", "rail"),
        ("How many employees does Velt have?", "velt"),  # plural/singular agree
        ("4210", "velt"),  # digit groups: "4,210" in text matches "4210"
    ],
)
def test_relevant_document_ranks_first(index, query, best):
    got = index.search(query, k=3)
    assert got, query
    assert got[0].doc_id == best
    assert all(isinstance(p, Passage) for p in got)
    assert [p.score for p in got] == sorted((p.score for p in got), reverse=True)


def test_title_is_indexed():
    ix = SearchIndex.from_documents([Document("a", "Zephyrine Almanac", "A yearly book of tides."),
                                     Document("b", "Tide tables", "Tables of tides for the coast.")])
    assert ix.search("Zephyrine", k=2)[0].doc_id == "a"


def test_passage_carries_document_fields(index):
    p = index.search("Lake Orvanne", k=1)[0]
    assert (p.doc_id, p.title, p.url, p.published_at) == ("lake", "Lake Orvanne", "https://example.org/orvanne", "2024-03-01")
    assert p.text == DOCS[0].text
    assert p.score > 0


@pytest.mark.parametrize("k", [1, 2, 3, 5, 50])
def test_k_is_respected(index, k):
    got = index.search("Quorin Mount Kelbra Lake Orvanne Velt bakery", k=k)
    assert len(got) == min(k, 6)  # six documents contain a query term
    assert len({p.doc_id for p in got}) == len(got)


def test_only_matching_documents_are_returned(index):
    assert [p.doc_id for p in index.search("bakery", k=10)] == ["drum"]


@pytest.mark.parametrize("query", ["", "   ", "the of and is", "what is it?", "zzzqqq unknownword", "!!! ???"])
def test_empty_stopword_or_unknown_query_gives_nothing(index, query):
    assert index.search(query, k=3) == []


def test_bad_k_and_max_chars_are_refused(index):
    with pytest.raises(ValueError):
        index.search("Quorin", k=0)
    with pytest.raises(ValueError):
        index.search("Quorin", max_chars=0)


@pytest.mark.parametrize("max_chars", [1, 10, 30, 600])
def test_passage_text_is_truncated(index, max_chars):
    p = index.search("Velt Corporation", k=1, max_chars=max_chars)[0]
    assert len(p.text) <= max_chars
    full = DOCS[2].text
    if len(full) <= max_chars:
        assert p.text == full
    else:
        assert p.text.endswith("\u2026") and full.startswith(p.text[:-1])


def test_search_is_deterministic_and_ties_keep_corpus_order():
    docs = [Document(f"d{i}", "Same", "identical words here") for i in range(8)]
    ix = SearchIndex.from_documents(docs)
    first = ix.search("identical words", k=5)
    assert [p.doc_id for p in first] == ["d0", "d1", "d2", "d3", "d4"]
    for _ in range(3):
        assert SearchIndex.from_documents(docs).search("identical words", k=5) == first


@settings(max_examples=40, deadline=None)
@given(st.text(max_size=60))
def test_any_query_is_safe_and_repeatable(query):
    ix = SearchIndex.from_documents(DOCS)
    a = ix.search(query, k=4)
    assert a == ix.search(query, k=4)
    assert len(a) <= 4 and all(p.score > 0 for p in a)


def test_empty_index():
    ix = SearchIndex.from_documents([])
    assert len(ix) == 0
    assert ix.search("anything") == []


def test_len(index):
    assert len(index) == len(DOCS)


def test_tokenize_rules():
    assert tokenize("The Cities of Quorin, 4,210 employees; 412.7 million") == ["city", "quorin", "4210", "employee", "412.7", "million"]


# ------------------------------------------------------------------------------- corpus files


def test_load_corpus_reads_fields_and_skips_blank_lines(tmp_path):
    path = tmp_path / "c.jsonl"
    path.write_text(
        json.dumps({"id": "a", "title": "A", "text": "alpha", "url": "https://x.example/a", "published_at": "2024-01-02"})
        + "\n\n   \n"
        + json.dumps({"id": "b", "title": "", "text": "beta", "extra": 1})
        + "\n",
        encoding="utf-8",
    )
    docs = load_corpus(path)
    assert docs == [Document("a", "A", "alpha", "https://x.example/a", "2024-01-02"), Document("b", "", "beta")]
    ix = SearchIndex.from_jsonl(path)
    assert len(ix) == 2 and ix.search("beta")[0].doc_id == "b"


GOOD = {"id": "ok", "title": "T", "text": "fine"}


@pytest.mark.parametrize(
    "bad, fragment",
    [
        ("{not json", "not valid JSON"),
        ("[1, 2]", "expected a JSON object"),
        (json.dumps({"title": "T", "text": "x"}), "missing required field 'id'"),
        (json.dumps({"id": "x", "text": "x"}), "missing required field 'title'"),
        (json.dumps({"id": "x", "title": "T"}), "missing required field 'text'"),
        (json.dumps({"id": 7, "title": "T", "text": "x"}), "field 'id' must be a string"),
        (json.dumps({"id": " ", "title": "T", "text": "x"}), "field 'id' is empty"),
        (json.dumps({"id": "x", "title": "T", "text": ""}), "field 'text' is empty"),
        (json.dumps({"id": "x", "title": "T", "text": "x", "url": 5}), "field 'url' must be a string or null"),
        (json.dumps({"id": "x", "title": "T", "text": "x", "published_at": "last year"}), "not an ISO date"),
        (json.dumps({"id": "ok", "title": "T", "text": "again"}), "duplicate id 'ok' (first seen on line 1)"),
    ],
)
def test_bad_line_names_file_line_and_problem(tmp_path, bad, fragment):
    path = write_jsonl(tmp_path / "corpus.jsonl", [GOOD, "", bad])
    with pytest.raises(CorpusError) as err:
        load_corpus(path)
    msg = str(err.value)
    assert str(path) in msg and "line 3" in msg and fragment in msg
    with pytest.raises(CorpusError):
        SearchIndex.from_jsonl(path)


def test_invalid_utf8_line_is_reported(tmp_path):
    path = tmp_path / "c.jsonl"
    path.write_bytes(json.dumps(GOOD).encode() + b"\n" + b'{"id": "\xff"}\n')
    with pytest.raises(CorpusError, match="line 2: not valid UTF-8"):
        load_corpus(path)


def test_corpus_error_is_a_value_error():
    assert issubclass(CorpusError, ValueError)


def test_missing_file_is_an_os_error(tmp_path):
    with pytest.raises(OSError):
        load_corpus(tmp_path / "nope.jsonl")


def test_duplicate_ids_rejected_from_documents_too():
    with pytest.raises(CorpusError, match="duplicate"):
        SearchIndex.from_documents([Document("a", "", "x"), Document("a", "", "y")])


# ------------------------------------------------------------------------------- cache


def test_cache_returns_same_object_until_file_changes(tmp_path, monkeypatch):
    clear_index_cache()
    path = write_jsonl(tmp_path / "c.jsonl", [GOOD])
    a = cached_index(path)
    assert cached_index(path) is a
    assert cached_index(str(path)) is a  # str or Path
    monkeypatch.chdir(tmp_path)
    assert cached_index("c.jsonl") is a  # keyed by the resolved path
    write_jsonl(path, [GOOD, {"id": "two", "title": "Second", "text": "another document"}])
    b = cached_index(path)
    assert b is not a and len(b) == 2
    assert cached_index(path) is b
    # same size, new mtime: rebuilt as well
    st = path.stat()
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 5_000_000_000))
    assert cached_index(path) is not b


def test_cache_does_not_keep_a_broken_file(tmp_path):
    clear_index_cache()
    path = write_jsonl(tmp_path / "c.jsonl", ["{broken"])
    with pytest.raises(CorpusError):
        cached_index(path)
    write_jsonl(path, [GOOD])
    assert len(cached_index(path)) == 1
