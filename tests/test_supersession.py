"""Within one search result an older passage's figure that a newer passage contradicts is kept out of the evidence:
the detector, the cut, the Verifier's record of it, memory and the prompts, and the loop end to end."""

from __future__ import annotations

import json
from datetime import date

from hypothesis import given
from hypothesis import strategies as st

from flows.research import DIRECT_STEPS, research
from infra.models import build_backend, clear_backend_cache
from infra.runtime.settings import load_settings
from infra.tools.search import Document, SearchIndex
from tasks.checks.supersession import superseded_sentences, without_superseded
from tasks.contracts import Plan, Question, Result, Source, Verdict
from tasks.memory import EvolvingMemory
from tasks.modules.prompts import render_evidence
from tasks.modules.verifier import Verifier
from tests.scripted import answer, plan, scripted_settings

AS_OF = "2025-01-01"
# The shape the world's stale documents take, and the shape of real ones: a current page and an older digest.
PAGE = {"doc_id": "D61", "title": "Wequos Monitor", "published_at": "2024-05-09", "url": None, "score": 5.0,
        "text": "Wequos Monitor is a kitchen appliance. Wequos Monitor is priced at 2,016.16 dollars. "
                "Wequos Monitor is made by Kyraithtro Foundry."}
DIGEST = {"doc_id": "D45", "title": "Wequos Monitor: price", "published_at": "2018-04-27", "url": None, "score": 6.0,
          "text": "Yearbook entry. The price of Wequos Monitor is 1,319.46 dollars. Reported without further comment."}


def p(doc_id, text, published, title="t"):
    return {"doc_id": doc_id, "title": title, "text": text, "published_at": published, "url": None, "score": 1.0}


def test_an_older_figure_that_a_newer_passage_contradicts_is_superseded_whatever_the_wording():
    [s] = superseded_sentences([DIGEST, PAGE])  # "The price of X is" against "X is priced at": one property
    assert (s.doc_id, s.by_doc_id) == ("D45", "D61")
    assert s.sentence == "The price of Wequos Monitor is 1,319.46 dollars."
    assert (s.published_at, s.by_published_at) == (date(2018, 4, 27), date(2024, 5, 9))


def test_nothing_is_superseded_without_an_order_or_without_a_disagreement():
    older_same = p("a", "The price of Wequos Monitor is 2,016.16 dollars.", "2018-01-01")
    assert superseded_sentences([older_same, PAGE]) == []  # they agree
    assert superseded_sentences([{**DIGEST, "published_at": None}, PAGE]) == []  # undated: not ordered
    assert superseded_sentences([{**DIGEST, "published_at": PAGE["published_at"]}, PAGE]) == []  # same date: a conflict
    other_entity = p("b", "The price of Wequos Router is 99 dollars.", "2016-01-01")
    other_property = p("c", "Wequos Monitor was launched in 2001.", "2016-01-01")
    two_numbers = p("d", "The price of Wequos Monitor was 900 dollars in 2015.", "2016-01-01")
    assert superseded_sentences([other_entity, other_property, two_numbers, PAGE]) == []


def test_equally_new_sources_that_disagree_leave_every_value_in_place():
    a = p("a", "The population of Lequon is 810,810.", "2024-08-24")
    b = p("b", "Lequon has a population of 251,354.", "2024-08-24")
    old = p("c", "The population of Lequon is 965,913.", "2017-12-08")
    assert superseded_sentences([old, a, b]) == []


@given(st.lists(st.tuples(st.integers(1, 4), st.sampled_from([2019, 2020, 2021, 2022])), min_size=1, max_size=6))
def test_the_newest_value_is_never_superseded_and_only_older_disagreeing_ones_are(facts):
    passages = [p(f"d{i}", f"The population of Lequon is {v}.", f"{y}-01-01") for i, (v, y) in enumerate(facts)]
    out = superseded_sentences(passages)
    newest = max(y for _, y in facts)
    current = {v for v, y in facts if y == newest}
    if len(current) > 1:
        assert out == []
        return
    [now] = current
    assert {s.doc_id for s in out} == {f"d{i}" for i, (v, y) in enumerate(facts) if y < newest and v != now}
    assert all(s.published_at < s.by_published_at for s in out)


def test_the_cut_keeps_the_passage_s_other_figures_and_drops_a_passage_left_with_none():
    page_old = p("old", "Wequos Monitor is priced at 1,319.46 dollars. Wequos Monitor was launched in 2007.", "2018-01-01")
    data = {"passages": [DIGEST, page_old, PAGE]}
    cut = without_superseded(data, superseded_sentences(data["passages"]))
    assert [x["doc_id"] for x in cut["passages"]] == ["old", "D61"]  # the digest stated nothing else
    assert cut["passages"][0]["text"] == "Wequos Monitor was launched in 2007."
    assert {s["doc_id"] for s in cut["superseded"]} == {"D45", "old"}
    assert data["passages"][0] is DIGEST and "1,319.46" in DIGEST["text"]  # the tool's own record is not edited
    assert without_superseded(data, []) is data


def _search_step(passages):
    plan_ = Plan(step_id=1, sub_goal="find the price of Wequos Monitor", tool="search",
                 args={"query": "Wequos Monitor price"})
    return plan_, Result(step_id=1, tool="search", status="ok", data={"passages": passages},
                         source=Source.of_passage(passages[0]))


def test_the_verifier_accepts_the_step_and_records_what_a_newer_passage_replaced():
    s = load_settings(None, None, as_of=AS_OF)
    v = Verifier(s, mode="deterministic").verify(*_search_step([DIGEST, PAGE]), [])
    assert v.accepted and [x.doc_id for x in v.superseded] == ["D45"]
    assert "superseded in this result: D45 (2018-04-27) by D61 (2024-05-09)" in next(
        c.detail for c in v.checks if c.name == "freshness")
    off = load_settings(None, None, as_of=AS_OF, **{"verifier.supersede_in_result": False})
    assert Verifier(off, mode="deterministic").verify(*_search_step([DIGEST, PAGE]), []).superseded == []


def test_memory_keeps_only_the_current_figure_and_cites_the_passage_that_states_it():
    plan_, result = _search_step([DIGEST, PAGE])
    verdict = Verifier(load_settings(None, None, as_of=AS_OF), mode="deterministic").verify(plan_, result, [])
    item = EvolvingMemory().record(plan_, result, verdict)
    assert item.provenance.source.uri == "corpus://D61"  # the top passage was the superseded digest
    assert item.provenance.source.retrieved_at == result.source.retrieved_at
    shown = render_evidence([item], 4000)
    assert "2,016.16" in shown and "1,319.46" not in shown and "left out: an older figure dated 2018-04-27" in shown
    rejected = Verdict(step_id=1, accepted=False, reason="no")
    assert EvolvingMemory().record(plan_, result, rejected).content["data"] == result.data


def _corpus(tmp_path, old=DIGEST):
    docs = [Document(id=d["doc_id"], title=d["title"], text=d["text"], url=None, published_at=d["published_at"])
            for d in (old, PAGE)]
    assert SearchIndex(docs).search("Wequos Monitor price", k=3)[0].doc_id == "D45"  # BM25 ranks the digest first
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text("".join(json.dumps({"id": d.id, "title": d.title, "text": d.text, "published_at": d.published_at}) + "\n"
                              for d in docs))
    return corpus


def test_in_the_loop_the_generator_never_sees_the_older_figure(tmp_path):
    corpus = _corpus(tmp_path)
    clear_backend_cache()
    s = scripted_settings([plan("search", "Wequos Monitor price"), plan("answer")], [answer("2,016.16 dollars", 1)],
                          corpus=corpus, as_of=AS_OF)
    out = research(Question(id="q", question="What is the price of Wequos Monitor?"), s, run_id="t", steps=DIRECT_STEPS)
    prompt = "\n".join(m["content"] for m in build_backend(s.models.generator).requests[-1]["messages"])
    assert "2,016.16" in prompt and "1,319.46" not in prompt
    assert out.answer.citations[0].source.uri == "corpus://D61"
    clear_backend_cache()


def test_a_later_run_re_verifies_the_kept_evidence_against_the_source_cut_the_same_way(tmp_path):
    # the older passage keeps a figure of its own, so the record holds it cut, not dropped
    launched = {**DIGEST, "text": DIGEST["text"] + " Wequos Monitor was launched in 2007."}
    corpus, store = _corpus(tmp_path, launched), {"memory.mode": "persistent", "memory.store": str(tmp_path / "memory")}
    q = Question(id="q", question="What is the price of Wequos Monitor?")
    for run_id, script in (("run-1", [plan("search", "Wequos Monitor price"), plan("answer")]), ("run-2", [plan("answer")])):
        clear_backend_cache()
        s = scripted_settings(script, [answer("2,016.16 dollars", 1)], corpus=corpus, as_of=AS_OF, **store)
        out = research(q, s, run_id=run_id, steps=DIRECT_STEPS)
    [recheck] = out.prior["rechecked"]
    assert recheck["accepted"] is True, recheck  # the kept passages still read as the source's, once cut alike
    shown = render_evidence(out.memory.accepted_view(), 4000)
    assert "1,319.46" not in shown and "launched in 2007" in shown
    clear_backend_cache()
