"""Memory across runs (issue 9): the persistent store, prior lessons for the Planner, re-verification of
prior evidence, expiry, and recovery from a planted false accept. Scripted models, no Prefect needed."""

from __future__ import annotations

import re
import threading
from datetime import timedelta

import pytest

from flows.research import DIRECT_STEPS, ModuleSteps, research
from infra.models import clear_backend_cache
from infra.runtime.memory_store import MemoryStore
from tasks.contracts import (
    AnswerStatus,
    Citation,
    FailureType,
    GenerationOutcome,
    MemoryStatus,
    Origin,
    PriorKind,
    Question,
    utcnow,
)
from tasks.modules.generator import NO_EVIDENCE
from tasks.modules.prompts import planner_messages
from tasks.prior import PriorMemory, load_context, open_store, planted_record, resolve, task_key
from tests.scripted import answer, plan, scripted_settings
from tests.test_storage import s3_endpoint  # noqa: F401  (the moto S3 endpoint fixture)

Q = Question(id="q1", question="How deep is Lake Orvanne?", family="lookup")


@pytest.fixture(autouse=True)
def _fresh_backends():
    clear_backend_cache()
    yield
    clear_backend_cache()


def persistent(tmp_path, planner, generator=None, corpus=None, **extra):
    clear_backend_cache()  # scripted replies start over for each run
    return scripted_settings(planner, generator, corpus=corpus, **{"memory.mode": "persistent",
                                                                   "memory.store": str(tmp_path / "memory"), **extra})


class Recording:
    """The direct module steps, recording what the Planner was given."""

    def __init__(self, generate=None):
        self.lessons: list = []
        self.messages: list = []
        self.views: list = []
        self.steps = ModuleSteps(self.plan, DIRECT_STEPS.execute_step, DIRECT_STEPS.verify_step,
                                 generate or DIRECT_STEPS.generate_answer)

    def plan(self, question, view, feedback, step_id, task_id, settings, deadline_s=None, lessons=None, allow_answer=True,
             avoid=()):
        self.lessons.append(list(lessons or []))
        self.views.append(view)
        self.messages.append(planner_messages(question, {}, view, feedback, 2400, lessons))
        return DIRECT_STEPS.plan_step(question, view, feedback, step_id, task_id, settings, deadline_s, lessons=lessons,
                                      allow_answer=allow_answer, avoid=avoid)


def extractive_generate(question, view, task_id, settings, deadline_s=None):
    """A Generator that repeats the depth stated by the newest evidence it is shown (planted or not)."""
    for item in reversed(view):
        found = re.findall(r"(\d+) metres", str(item.content))
        if found:
            text = f"Lake Orvanne is {found[-1]} metres deep."
            return GenerationOutcome(text=text, citations=[Citation(claim=text, step_id=item.step_id,
                                                                    source=item.provenance.source)])
    return GenerationOutcome(text=NO_EVIDENCE)


# --------------------------------------------------------------------------- the store


def _rec(i: int, task: str = "t") -> dict:
    return {"id": f"lesson-{i}", "kind": "lesson", "task_key": task, "family": "f", "created_at": utcnow().isoformat(),
            "expires_at": None, "value": i}


def _store_roundtrip(store: MemoryStore) -> None:
    store.write("run1.q1", [_rec(1), _rec(2)])
    store.write("run1.q1", [_rec(1), _rec(2)])  # a resumed run rewrites its own part: no duplicates
    store.write("run2.q1", [_rec(2), _rec(3)])  # the same record from another run: one record
    got = sorted(r["id"] for r in store.read())
    assert got == ["lesson-1", "lesson-2", "lesson-3"]
    assert {r["id"] for r in store.read(task_key="t")} == set(got)
    assert store.read(task_key="other") == []


def test_store_writes_are_idempotent_by_record_id(tmp_path):
    _store_roundtrip(MemoryStore(str(tmp_path / "mem")))


def test_store_works_on_a_real_s3_endpoint(s3_endpoint):  # noqa: F811
    _store_roundtrip(MemoryStore("s3://agentflow-test/memory-store", s3_endpoint_url=s3_endpoint))


def test_concurrent_writers_never_corrupt_the_store(tmp_path):
    store = MemoryStore(str(tmp_path / "mem"))
    barrier = threading.Barrier(8)

    def writer(w: int) -> None:
        barrier.wait()
        for rewrite in range(3):  # each writer rewrites its own part while the others write theirs
            store.write(f"run-{w}.q", [_rec(w * 100 + k, task=f"t{w}") for k in range(5)] + [_rec(999)])

    threads = [threading.Thread(target=writer, args=(w,)) for w in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    ids = [r["id"] for r in store.read()]
    assert len(ids) == len(set(ids)) == 8 * 5 + 1
    assert not [p for p in (tmp_path / "mem" / "records").iterdir() if p.name.startswith(".tmp")]


def test_concurrent_runs_of_a_batch_each_write_their_own_part(tmp_path):
    from flows.batch import InputReport, run_batch

    qs = [Question(id=f"m{i}", question=f"What is 6 * 7 (case {'abcd'[i]})?") for i in range(4)]  # the program fits
    # one reply, repeated: every question runs the program, then repeats it (refused, a lesson) and stops
    s = persistent(tmp_path, [plan("python", "print(6 * 7)")], [answer("42", 1)], **{"storage.out": str(tmp_path / "runs")})
    run_batch(InputReport(questions=qs), s, "batch-1", log_dir=str(tmp_path / "logs"), steps=DIRECT_STEPS,
              progress=False, concurrency=4)
    parts = sorted(p.name for p in (tmp_path / "memory" / "records").iterdir())
    assert parts == [f"part-batch-1.m{i}.parquet" for i in range(4)]
    records = open_store(s).read()
    assert {r["task_id"] for r in records} == {q.id for q in qs}
    assert sorted(r["kind"] for r in records) == ["evidence"] * 4 + ["lesson"] * 4


# --------------------------------------------------------------------------- lessons and prior evidence


def test_lessons_of_an_earlier_run_reach_the_planner_marked_prior(tmp_path):
    first = persistent(tmp_path, [plan("python", "raise SystemExit(3)"), plan("python", "print(17 * 23)"), plan("answer")],
                       [answer("391", 2)])
    q = Question(id="m1", question="What is 17 * 23?")
    out1 = research(q, first, run_id="run-1", steps=DIRECT_STEPS)
    assert out1.answer.status is AnswerStatus.answered
    stored = open_store(first).read(task_key=task_key(q.question))
    assert sorted(r["kind"] for r in stored) == ["evidence", "lesson"]
    lesson = next(r for r in stored if r["kind"] == "lesson")
    assert lesson["args"] == {"code": "raise SystemExit(3)"} and lesson["failure_type"] == "tool_error"

    rec = Recording()
    second = persistent(tmp_path, [plan("answer")], [answer("391", 1)])
    out2 = research(q, second, run_id="run-2", steps=rec.steps)
    shown = rec.lessons[0]
    assert [r.kind for r in shown] == [PriorKind.lesson] and shown[0].run_id == "run-1"
    prompt = rec.messages[0][1]["content"]
    assert "Lessons from earlier runs (prior: not evidence" in prompt
    assert re.search(r"\[prior lesson, run run-1, 0\.0 days old\] python .*raise SystemExit\(3\).* failed \(tool_error\)", prompt)
    # the earlier accepted evidence was re-verified (step 1) before the Planner saw it as evidence
    assert rec.views[0] and rec.views[0][0].provenance.origin is Origin.prior
    item = out2.memory.get("step-1")
    assert item.status is MemoryStatus.accepted and item.provenance.prior_id and item.provenance.run_id == "run-1"
    assert out2.prior["rechecked"][0]["accepted"] is True
    assert out2.answer.status is AnswerStatus.answered


def test_similar_tasks_of_the_same_family_share_lessons_others_do_not(tmp_path):
    first = persistent(tmp_path, [plan("python", "raise SystemExit(4)"), plan("answer")])
    research(Question(id="a", question="How deep is Lake Orvanne at its deepest point?", family="lookup"), first,
             run_id="run-1", steps=DIRECT_STEPS)
    s = persistent(tmp_path, [plan("answer")])
    similar = PriorMemory(open_store(s), Question(id="b", question="How deep is Lake Orvanne at the deepest point",
                                                  family="lookup"), s, "run-2")
    other = PriorMemory(open_store(s), Question(id="c", question="When was Velt Corporation founded?", family="lookup"),
                        s, "run-3")
    assert [r.kind for r in similar.lessons] == [PriorKind.lesson]
    assert other.lessons == [] and other.candidates == []


def test_prior_evidence_is_reverified_under_the_current_as_of_date(tmp_path, corpus_file):
    first = persistent(tmp_path, [plan("search", "Lake Orvanne depth"), plan("answer")],
                       [answer("212 metres", 1)], corpus=corpus_file, as_of="2025-01-01")
    assert research(Q, first, run_id="run-1", steps=DIRECT_STEPS).answer.status is AnswerStatus.answered
    # a run "as of" a date before the source was published may not use it, whatever an earlier run did
    rec = Recording()
    early = persistent(tmp_path, [plan("answer")], corpus=corpus_file, as_of="2023-01-01")
    out = research(Q, early, run_id="run-2", steps=rec.steps)
    check = out.prior["rechecked"][0]
    assert check["accepted"] is False and check["failure_type"] == FailureType.stale_source.value
    assert rec.views[0] == []  # the Planner never saw it as evidence
    assert out.answer.status is not AnswerStatus.answered


def test_expired_prior_records_are_ignored_and_reported(tmp_path, corpus_file):
    s = persistent(tmp_path, [plan("answer")], corpus=corpus_file)
    old = planted_record(Q, "search", {"query": "Lake Orvanne depth"},
                         [{"doc_id": "d1", "title": "Lake Orvanne", "text": "Lake Orvanne is 212 metres deep at its "
                           "deepest point.", "published_at": "2024-03-01"}],
                         {"subject": "Lake Orvanne", "attribute": "depth", "value": "212 metres", "cites": ["d1"]},
                         created_at=utcnow() - timedelta(days=40), ttl_s=30 * 86400)
    open_store(s).write("old-run.q1", [old.model_dump(mode="json")])
    out = research(Q, s, run_id="run-2", steps=DIRECT_STEPS)
    assert [e["id"] for e in out.prior["expired"]] == [old.id]
    assert out.prior["expired"][0]["age_days"] >= 40
    assert out.prior["rechecked"] == [] and out.memory.accepted_view() == []


# --------------------------------------------------------------------------- contamination recovery

PLANTED = "350"


def _plant(settings) -> str:
    bad = planted_record(Q, "search", {"query": "Lake Orvanne depth"},
                         [{"doc_id": "d1", "title": "Lake Orvanne", "text": f"Lake Orvanne is {PLANTED} metres deep at "
                           "its deepest point.", "published_at": "2024-03-01"}],
                         {"subject": "Lake Orvanne", "attribute": "depth", "value": f"{PLANTED} metres", "cites": ["d1"]},
                         run_id="past-run", created_at=utcnow() - timedelta(days=3))
    open_store(settings).write("past-run.q1", [bad.model_dump(mode="json")])
    return bad.id


def test_a_planted_false_accept_is_reverified_rejected_corrected_and_never_answered(tmp_path, corpus_file):
    s = persistent(tmp_path, [plan("search", "Lake Orvanne depth", sub_goal="find the depth"), plan("answer")],
                   corpus=corpus_file, as_of="2025-01-01")
    bad_id = _plant(s)
    # the contamination is real: a run that trusted memory would answer with the planted value
    ctx = load_context(open_store(s), Q, s, utcnow())
    assert [c.id for c in ctx.candidates] == [bad_id]

    rec = Recording(generate=extractive_generate)
    out = research(Q, s, run_id="run-new", steps=rec.steps)
    check = out.prior["rechecked"][0]
    assert check["id"] == bad_id and check["planted"] and check["accepted"] is False
    assert check["failure_type"] in (FailureType.unsupported.value, FailureType.citation_mismatch.value)
    assert "failed re-verification" in check["reason"]
    assert rec.views[0] == []  # never evidence in this run
    assert "failed re-verification" in rec.messages[0][1]["content"]  # the Planner is told, as feedback
    # the run answers from its own verified search, not from the planted value
    assert out.answer.status is AnswerStatus.answered
    assert "212 metres" in out.answer.text and PLANTED not in out.answer.text
    # the correction is recorded, and the bad record is superseded with a link both ways
    records = resolve([r for r in ctx_records(s)])
    bad = next(r for r in records if r.id == bad_id)
    corr = next(r for r in records if r.kind is PriorKind.correction)
    assert bad.status is MemoryStatus.superseded and bad.superseded_by == corr.id
    assert corr.supersedes == bad_id and corr.run_id == "run-new" and corr.content["rejected_run"] == "past-run"

    # a later run does not re-check (or use) the superseded record; it sees the correction as a lesson
    rec3 = Recording(generate=extractive_generate)
    later = persistent(tmp_path, [plan("answer")], corpus=corpus_file, as_of="2025-01-01")
    out3 = research(Q, later, run_id="run-later", steps=rec3.steps)
    assert bad_id not in [c["id"] for c in out3.prior["rechecked"]]
    assert bad_id in out3.prior["superseded_ignored"]
    prompt = rec3.messages[0][1]["content"]
    assert "[prior correction, run run-new" in prompt and f"'{PLANTED} metres'" in prompt
    assert PLANTED not in out3.answer.text


def ctx_records(settings):
    from tasks.contracts import PriorRecord

    return [PriorRecord.model_validate(r) for r in open_store(settings).read()]


def test_memory_mode_run_neither_reads_nor_writes_the_store(tmp_path, corpus_file):
    s = persistent(tmp_path, [plan("search", "Lake Orvanne depth"), plan("answer")], [answer("212 metres", 1)],
                   corpus=corpus_file)
    _plant(s)
    off = scripted_settings([plan("search", "Lake Orvanne depth"), plan("answer")], [answer("212 metres", 1)],
                            corpus=corpus_file, **{"memory.store": str(tmp_path / "memory")})
    out = research(Q, off, run_id="run-off", steps=DIRECT_STEPS)
    assert out.prior is None and out.answer.status is AnswerStatus.answered
    assert len(open_store(s).read()) == 1


def test_the_prior_memory_report_is_logged(tmp_path, corpus_file):
    import json as _json

    from infra.runtime.events import RunLog

    s = persistent(tmp_path, [plan("search", "Lake Orvanne depth"), plan("answer")], [answer("212 metres", 1)],
                   corpus=corpus_file)
    _plant(s)
    log = RunLog(tmp_path / "ev.jsonl", run_id="run-log")
    research(Q, s, run_id="run-log", log=log, steps=DIRECT_STEPS)
    log.close()
    events = [_json.loads(line) for line in (tmp_path / "ev.jsonl").read_text().splitlines()]
    prior = [e for e in events if e.get("event") == "prior_memory"]
    assert prior and prior[0]["task_id"] == "q1" and prior[0]["rechecked"][0]["accepted"] is False
    assert prior[0]["written"] >= 2  # the run's evidence and the correction
