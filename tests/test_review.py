"""Human review (issue 9): a needs_review run pauses its Prefect flow run for a typed decision, resumed
here through Prefect's API from another thread; the timeout path; the decision in memory and artifact."""

from __future__ import annotations

import json
import threading
import time

import pytest

from flows.research import research_flow
from flows.review import ReviewInput, apply_review
from infra.models import clear_backend_cache
from infra.runtime.settings import ModelConfig
from tasks.contracts import Answer, AnswerStatus, Origin, Question, ReviewAction, ReviewDecision, StopReason
from tasks.prior import open_store, task_key
from tests.scripted import answer, plan, scripted_settings

CONFLICT = json.dumps({"verdict": "reject", "failure_type": "conflict", "reason": "two sources disagree"})


@pytest.fixture(autouse=True)
def _fresh_backends():
    clear_backend_cache()
    yield
    clear_backend_cache()


def review_settings(tmp_path, corpus, **extra):
    """A run whose only step the judge rejects as a conflict, with on_conflict=human_review: it ends needs_review."""
    return scripted_settings([plan("search", "Lake Orvanne depth"), plan("answer")], [answer("212 metres", 1)],
                             corpus=corpus, **{
                                 "models.verifier": ModelConfig(backend="scripted", model="scripted-judge",
                                                                script=[CONFLICT]).model_dump(),
                                 "verifier.mode": "llm", "verifier.on_conflict": "human_review",
                                 "review.mode": "prefect", "review.poll_s": 1,
                                 "memory.mode": "persistent", "memory.store": str(tmp_path / "memory"), **extra})


def _flow_run(name: str):
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterName

    with get_client(sync_client=True) as client:
        runs = client.read_flow_runs(flow_run_filter=FlowRunFilter(name=FlowRunFilterName(any_=[name])))
    return runs[0] if runs else None


def _wait_paused(name: str, timeout_s: float = 90):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        run = _flow_run(name)
        if run is not None and run.state is not None and run.state.is_paused():
            return run
        time.sleep(0.3)
    raise AssertionError(f"flow run {name} never paused")


def _artifact(key: str):
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterKey

    with get_client(sync_client=True) as client:
        got = client.read_artifacts(artifact_filter=ArtifactFilter(key=ArtifactFilterKey(any_=[key])))
    return got[0] if got else None


def _run_in_thread(question, settings, run_id, log):
    box: dict = {}

    def target():
        try:
            box["outcome"] = research_flow(question, settings, run_id, str(log))
        except BaseException as exc:  # surfaced by the test
            box["error"] = exc

    t = threading.Thread(target=target, daemon=True)
    t.start()
    return t, box


def test_needs_review_pauses_and_a_person_gives_the_answer_through_the_api(prefect_harness, corpus_file, tmp_path):
    from prefect.flow_runs import resume_flow_run

    q = Question(id="rev1", question="How deep is Lake Orvanne?")
    s = review_settings(tmp_path, corpus_file, **{"review.timeout_s": 120})
    thread, box = _run_in_thread(q, s, "run-review-1", tmp_path / "ev.jsonl")
    paused = _wait_paused("research-rev1")
    assert paused.state.state_details.run_input_keyset  # the typed form the UI shows
    resume_flow_run(paused.id, run_input={"action": "answer", "answer": "212 metres", "reviewer": "ana",
                                          "note": "the 2024 survey"})
    thread.join(120)
    assert "error" not in box, box.get("error")
    out = box["outcome"]
    a = out.answer
    assert a.status is AnswerStatus.answered and a.text == "212 metres"
    assert a.review.action is ReviewAction.answer and a.review.reviewer == "ana"
    assert a.citations[0].source.uri == "human://ana"
    human = [i for i in out.memory.all_items() if i.provenance.origin is Origin.human]
    assert human and human[0].content["answer"] == "212 metres"
    # in the persistent store as a human record, for later runs
    stored = [r for r in open_store(s).read(task_key=task_key(q.question)) if r["kind"] == "human"]
    assert stored and stored[0]["origin"] == "human" and stored[0]["content"]["answer"] == "212 metres"
    art = _artifact("review-rev1")
    assert art is not None and "answer** by ana" in art.data and "provenance: human" in art.data
    assert _flow_run("research-rev1").state.is_completed()


def test_no_decision_before_the_timeout_leaves_the_answer_needs_review(prefect_harness, corpus_file, tmp_path):
    q = Question(id="rev2", question="How deep is Lake Orvanne?")
    s = review_settings(tmp_path, corpus_file, **{"review.timeout_s": 2})
    t0 = time.monotonic()
    out = research_flow(q, s, "run-review-2", str(tmp_path / "ev.jsonl"))
    assert time.monotonic() - t0 < 60
    a = out.answer
    assert a.status is AnswerStatus.needs_review and a.review.timed_out and a.review.action is None
    assert not [i for i in out.memory.all_items() if i.provenance.origin is Origin.human]
    art = _artifact("review-rev2")
    assert art is not None and "stays **needs_review**" in art.data
    assert _flow_run("research-rev2").state.is_completed()


def test_review_off_by_default_never_pauses(prefect_harness, corpus_file, tmp_path):
    s = review_settings(tmp_path, corpus_file, **{"review.mode": "none"})
    out = research_flow(Question(id="rev3", question="How deep is Lake Orvanne?"), s, "run-review-3",
                        str(tmp_path / "ev.jsonl"))
    assert out.answer.status is AnswerStatus.needs_review and out.answer.review is None


def test_decisions_change_the_answer_as_the_reviewer_says():
    base = Answer(question_id="q", question="?", text="300 metres", status=AnswerStatus.needs_review,
                  stop_reason=StopReason.conflicting_evidence, iterations=2)
    accepted = apply_review(base, ReviewDecision(action=ReviewAction.accept, reviewer="bo"))
    assert accepted.status is AnswerStatus.answered and accepted.text == "300 metres"
    rejected = apply_review(base, ReviewDecision(action=ReviewAction.reject, note="wrong survey"))
    assert rejected.status is AnswerStatus.uncertain and rejected.citations == [] and "rejected" in rejected.text
    timed_out = apply_review(base, ReviewDecision(timed_out=True))
    assert timed_out.status is AnswerStatus.needs_review and timed_out.review.timed_out
    assert set(ReviewInput.model_fields) >= {"action", "answer", "reviewer", "note"}


def test_review_prefect_in_a_config_file_is_the_shorthand(tmp_path):
    from infra.runtime.settings import load_settings

    cfg = tmp_path / "run.yaml"
    cfg.write_text("review: prefect\n")
    assert load_settings(cfg).review.mode == "prefect"
    assert load_settings(None).review.mode == "none"


def test_a_batch_pauses_after_its_questions_and_rewrites_the_reviewed_answer(prefect_harness, corpus_file, tmp_path):
    import pyarrow.parquet as pq
    from prefect.flow_runs import resume_flow_run

    from flows.batch import batch_research

    qfile = tmp_path / "qs.jsonl"
    qfile.write_text(json.dumps({"id": "revb", "question": "How deep is Lake Orvanne?"}) + "\n")
    s = review_settings(tmp_path, corpus_file, **{"review.timeout_s": 120, "storage.out": str(tmp_path / "runs")})
    box: dict = {}

    def target():
        try:
            box["summary"] = batch_research(str(qfile), s, run_id="batch-review", log_dir=str(tmp_path / "logs"),
                                            progress=False)
        except BaseException as exc:
            box["error"] = exc

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    deadline = time.monotonic() + 90
    paused = None
    while paused is None and time.monotonic() < deadline:
        from prefect.client.orchestration import get_client

        with get_client(sync_client=True) as client:
            paused = next((r for r in client.read_flow_runs() if r.state and r.state.is_paused()), None)
        time.sleep(0.3)
    assert paused is not None, "the batch never paused"
    resume_flow_run(paused.id, run_input={"action": "accept", "reviewer": "cy"})
    thread.join(120)
    assert "error" not in box, box.get("error")
    rows = pq.read_table(tmp_path / "runs" / "batch-review" / "answers").to_pylist()
    assert [(r["task_id"], r["status"]) for r in rows] == [("revb", "answered")]
    decision = json.loads(rows[0]["review"])  # the reviewed row says who decided what
    assert decision["action"] == "accept" and decision["reviewer"] == "cy"
    assert _artifact("review-revb") is not None
