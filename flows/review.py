"""Human review: a run that ends needs_review pauses its Prefect flow run until a person decides.

With `review: prefect` the flow run pauses (``pause_flow_run``) waiting for a typed ReviewInput: accept
the answer, give the answer, or reject it. After `review.timeout_s` without a decision the run goes on
and the answer stays needs_review. The decision is recorded in the run's memory with provenance
origin human, in the persistent memory store (memory.mode=persistent) as a human record, on the
Answer (``answer.review``), and in the run's markdown artifact. Off by default (`review: none`), and
only inside a flow run: a plain function call never blocks on a person.
"""

from __future__ import annotations

import re
from typing import Literal

from prefect.context import FlowRunContext
from prefect.exceptions import FlowPauseTimeout
from prefect.flow_runs import pause_flow_run
from prefect.input import RunInput
from pydantic import Field

from infra.runtime.settings import Settings
from infra.runtime.storage import safe_key
from tasks.contracts import (
    Answer,
    AnswerStatus,
    Citation,
    Question,
    ReviewAction,
    ReviewDecision,
    Source,
)
from tasks.prior import decision_record, open_store


class ReviewInput(RunInput):
    """The reviewer's form in the Prefect UI."""

    action: Literal["accept", "answer", "reject"] = Field(
        description="accept: the answer is right; answer: give the right answer below; reject: the answer is wrong")
    answer: str = Field(default="", max_length=2000, description="The right answer (for action=answer).")
    reviewer: str = Field(default="", max_length=200, description="Who decides (kept as provenance).")
    note: str = Field(default="", max_length=2000, description="Why, for later runs.")


def review_prompt(answer: Answer) -> str:
    """What the reviewer reads above the form."""
    cites = "\n".join(f"- step {c.step_id}: {c.claim}" + (f" ({c.source.title or c.source.uri})" if c.source else "")
                      for c in answer.citations) or "- (none)"
    return (f"### Review needed: {answer.question_id}\n\n**Question:** {answer.question}\n\n**Answer:** {answer.text}\n\n"
            f"**Why review:** {answer.stop_reason.value}\n\n**Citations:**\n{cites}\n\n"
            "Accept the answer, give the right answer, or reject it.")


def needs_human(answer: Answer, settings: Settings) -> bool:
    """Review is on (review: prefect), the answer is needs_review, and a flow run can pause for it."""
    return settings.review.mode == "prefect" and answer.status is AnswerStatus.needs_review and FlowRunContext.get() is not None


def request_review(answer: Answer, settings: Settings) -> ReviewDecision | None:
    """Pause the current flow run for a decision; None when review is off, not needed, or no flow run is active."""
    if not needs_human(answer, settings):
        return None
    form = ReviewInput.with_initial_data(description=review_prompt(answer), action="accept")
    try:
        got = pause_flow_run(wait_for_input=form, timeout=settings.review.timeout_s, poll_interval=settings.review.poll_s,
                             key=f"review-{safe_key(answer.question_id)}")
    except FlowPauseTimeout:
        _resume_self()
        return ReviewDecision(timed_out=True, note=f"no decision within {settings.review.timeout_s} s")
    return ReviewDecision(action=ReviewAction(got.action), answer=got.answer.strip(), reviewer=got.reviewer, note=got.note)


def _resume_self() -> None:
    """After a pause timed out the run is still Paused on the server: mark it Running again and go on."""
    from prefect.client.orchestration import get_client
    from prefect.states import Running

    ctx = FlowRunContext.get()
    with get_client(sync_client=True) as client:
        client.set_flow_run_state(ctx.flow_run.id, Running(), force=True)


def apply_review(answer: Answer, decision: ReviewDecision) -> Answer:
    """The answer after the decision: accepted, replaced by the reviewer's, rejected, or unchanged (timed out)."""
    if decision.action is None:
        return answer.model_copy(update={"review": decision})
    if decision.action is ReviewAction.accept:
        return answer.model_copy(update={"review": decision, "status": AnswerStatus.answered})
    if decision.action is ReviewAction.answer and decision.answer:
        who = decision.reviewer or "reviewer"
        cite = Citation(claim=decision.answer, step_id=answer.iterations + 1, source=Source(uri=f"human://{safe_key(who)}",
                                                                                          title=f"review by {who}"))
        return answer.model_copy(update={"review": decision, "status": AnswerStatus.answered, "text": decision.answer,
                                         "citations": [cite]})
    return answer.model_copy(update={"review": decision, "status": AnswerStatus.uncertain, "citations": [],
                                     "text": f"No answer: a reviewer rejected '{answer.text[:300]}'"
                                             + (f" ({decision.note})" if decision.note else "")})


def review_outcome(outcome, question: Question, settings: Settings, run_id: str):
    """Ask for review where needed; record the decision (memory, store, artifact) and return the outcome."""
    decision = request_review(outcome.answer, settings)
    if decision is None:
        return outcome
    before = outcome.answer
    outcome.answer = apply_review(before, decision)
    if decision.action is not None:
        content = decision.model_dump(mode="json") | {"run_answer": before.text}
        accepted = decision.action is not ReviewAction.reject
        outcome.memory.record_human(before.iterations + 1, content, accepted, run_id=run_id)
        if settings.memory.mode == "persistent":
            record = decision_record(decision, before, question, settings, run_id)
            open_store(settings).write(f"{run_id}.{question.id}.review", [record.model_dump(mode="json")])
    publish_review(before, outcome.answer, decision)
    return outcome


def publish_review(before: Answer, after: Answer, decision: ReviewDecision) -> None:
    """The decision in the run's markdown artifact (for people, in the UI)."""
    from prefect.artifacts import create_markdown_artifact

    if decision.timed_out:
        what = f"no decision ({decision.note}); the answer stays **needs_review**"
    else:
        what = (f"**{decision.action.value}** by {decision.reviewer or '(unnamed)'} (provenance: human)"
                + (f"; given answer: {decision.answer}" if decision.action is ReviewAction.answer else "")
                + (f"; note: {decision.note}" if decision.note else ""))
    md = (f"### Human review: {before.question_id}\n\n**Question:** {before.question}\n\n**Run's answer:** {before.text}\n\n"
          f"**Decision:** {what}\n\n**Final answer ({after.status.value}):** {after.text}\n")
    key = "review-" + re.sub(r"[^a-z0-9-]+", "-", before.question_id.lower()).strip("-")
    create_markdown_artifact(md, key=key,
                             description=f"Human review of {before.question_id}, run {before.run_id}")
