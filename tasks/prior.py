"""Memory across runs: lessons and evidence of earlier runs, read at the start of a run and written at its end.

What an earlier run learnt reaches a new run in two ways, and neither makes it evidence:
- lessons (failed plans with their failure types and arguments, corrections, reviewers' decisions)
  are shown to the Planner marked as prior, with their run and age;
- evidence an earlier run accepted becomes a *candidate*: the loop re-runs the same tool call through
  the Executor and judges the fresh result, carrying the prior claim, with the current Verifier under
  the current as-of date, plus one check that the source still says what the record says. Only then
  is it accepted evidence of this run (provenance origin=prior, with the record's id). A candidate
  that fails is answered with a correction record that supersedes it (with a link both ways).
Expired records are ignored and reported. Records live in infra/runtime/memory_store.py (one part per run
and task, content-hash ids: idempotent, safe for concurrent runs of a batch).
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Callable

from infra.runtime.memory_store import MemoryStore
from infra.runtime.settings import Settings
from tasks.contracts import (
    Answer,
    Check,
    FailureType,
    MemoryItem,
    MemoryStatus,
    NextAction,
    Origin,
    Plan,
    PriorKind,
    PriorRecord,
    Question,
    Result,
    ReviewAction,
    ReviewDecision,
    Verdict,
    plan_signature,
    utcnow,
)
from tasks.memory import as_evidence

_WORD = re.compile(r"[a-z0-9]+")
GENERIC_FAMILY = "generic"
REVIEW_TOOL = "human_review"


def task_key(question: str) -> str:
    """The same task in any run: a hash of the question's lower-case words."""
    return hashlib.sha256(" ".join(_WORD.findall(question.lower())).encode()).hexdigest()[:16]


def task_family(question: Question) -> str:
    return question.family or GENERIC_FAMILY


def similarity(a: str, b: str) -> float:
    """Word-set overlap (Jaccard) of two questions."""
    wa, wb = set(_WORD.findall(a.lower())), set(_WORD.findall(b.lower()))
    return len(wa & wb) / len(wa | wb) if wa and wb else 0.0


def record_id(kind: PriorKind, *parts: Any) -> str:
    """Content-hash id: the same lesson, evidence or correction always gets the same id."""
    text = json.dumps([kind.value, *parts], sort_keys=True, default=str)
    return f"{kind.value[:3]}-{hashlib.sha256(text.encode()).hexdigest()[:20]}"


def memory_uri(settings: Settings) -> str:
    return settings.memory.store or f"{settings.storage.out.rstrip('/')}/memory"


def open_store(settings: Settings) -> MemoryStore:
    return MemoryStore(memory_uri(settings), s3_endpoint_url=settings.storage.s3_endpoint_url)


# --------------------------------------------------------------------------- reading


@dataclass
class PriorContext:
    """What the store holds for one task: lessons to show, evidence to re-verify, what was left out and why."""

    lessons: list[PriorRecord] = field(default_factory=list)
    candidates: list[PriorRecord] = field(default_factory=list)
    expired: list[PriorRecord] = field(default_factory=list)
    superseded: list[PriorRecord] = field(default_factory=list)


def resolve(records: list[PriorRecord]) -> list[PriorRecord]:
    """Apply corrections: a record a correction names is superseded, linked to that correction."""
    by_target = {r.supersedes: r.id for r in records if r.kind is PriorKind.correction and r.supersedes}
    out = []
    for r in records:
        if r.id in by_target and r.kind is PriorKind.evidence:
            r = r.model_copy(update={"status": MemoryStatus.superseded, "superseded_by": by_target[r.id]})
        out.append(r)
    return out


def load_context(store: MemoryStore, question: Question, settings: Settings, now: datetime) -> PriorContext:
    """The records of this task and of similar tasks of its family, sorted into what a run may use."""
    cfg = settings.memory
    key, fam = task_key(question.question), task_family(question)
    records = resolve([PriorRecord.model_validate(r) for r in store.read(task_key=key, family=fam)])
    ctx = PriorContext()
    relevant = [r for r in records if r.task_key == key or similarity(r.question, question.question) >= cfg.similar_min]
    for r in relevant:
        if not r.is_live(now):
            ctx.expired.append(r)
        elif r.status is MemoryStatus.superseded:
            ctx.superseded.append(r)
        elif r.kind is PriorKind.evidence:
            ctx.candidates.append(r)
        else:
            ctx.lessons.append(r)
    newest = lambda r: (r.task_key == key, r.created_at)  # noqa: E731  the task's own first, then newest
    ctx.lessons = sorted(ctx.lessons, key=newest, reverse=True)[: cfg.lessons_max]
    ctx.candidates = sorted(ctx.candidates, key=newest, reverse=True)[: cfg.reverify_max]
    return ctx


# --------------------------------------------------------------------------- re-verification


def recheck_plan(record: PriorRecord, step_id: int) -> Plan:
    """The prior record's tool call, to be run again now. Its text is the original step's (no ids or other
    numbers of ours: the Verifier grounds a program's operands in the plan's text)."""
    return Plan(step_id=step_id, sub_goal=record.sub_goal or "re-verify earlier evidence", tool=record.tool,
                args=record.args, expected_evidence="what the earlier record states",
                success_criterion="the current source still states it",
                justification="re-verify an earlier run's evidence under this run's checks")


def claimed(record: PriorRecord, fresh: Result) -> Result:
    """The fresh result carrying the prior record's claim, so the Verifier checks that claim against it."""
    prior = record.content if isinstance(record.content, dict) else {}
    if isinstance(fresh.data, dict) and prior.get("claim") and fresh.status.value == "ok":
        return fresh.model_copy(update={"data": {**fresh.data, "claim": prior["claim"]}})
    return fresh


def _norm(text: Any) -> str:
    return " ".join(str(text or "").split())


def consistency(record: PriorRecord, fresh: Result, verdict: Verdict | None = None) -> Check:
    """The source still says what the prior record says: same passage text, same program output. The fresh result is
    compared as evidence, as the record was kept (memory.as_evidence: quarantined passages and superseded sentences cut)."""
    prior = record.content if isinstance(record.content, dict) else {}
    kept = as_evidence(fresh, verdict) if verdict is not None else fresh
    now = kept.data if isinstance(kept.data, dict) else {}
    problems = []
    fresh_text = {str(p.get("doc_id")): _norm(p.get("text")) for p in now.get("passages") or [] if isinstance(p, dict)}
    for p in prior.get("passages") or []:
        if not isinstance(p, dict):
            continue
        doc = str(p.get("doc_id"))
        if doc not in fresh_text:
            problems.append(f"{doc} is no longer returned")
        elif fresh_text[doc] != _norm(p.get("text")):
            problems.append(f"{doc} now reads differently")
    if "stdout" in prior and _norm(prior.get("stdout")) != _norm(now.get("stdout")):
        problems.append("the program now prints something else")
    if problems:
        return Check(name="prior_consistency", passed=False, detail="; ".join(problems)[:500])
    return Check(name="prior_consistency", passed=True, detail="the source still states the prior record")


def judge(record: PriorRecord, fresh: Result, verdict: Verdict, now: datetime) -> Verdict:
    """This run's verdict on a prior record: the Verifier's, and the consistency check on top."""
    check = consistency(record, fresh, verdict)
    where = f"prior record {record.id} (run {record.run_id or '?'}, {record.age_days(now):.1f} days old)"
    checks = [*verdict.checks, check]
    if not verdict.accepted:
        return verdict.model_copy(update={"checks": checks, "reason": f"{where} failed re-verification: {verdict.reason}"[:600],
                                          "next_action": NextAction.replan})
    if not check.passed:
        return verdict.model_copy(update={
            "accepted": False, "checks": checks, "failure_type": FailureType.citation_mismatch, "evidence": "",
            "reason": f"{where} failed re-verification: {check.detail}; search again", "next_action": NextAction.replan,
            "supersedes": None})
    return verdict.model_copy(update={"checks": checks, "reason": f"{where} re-verified: {verdict.reason}"[:600]})


# --------------------------------------------------------------------------- one run's view and writes


@dataclass
class Recheck:
    record: PriorRecord
    step_id: int
    accepted: bool
    failure_type: str | None
    reason: str
    correction_id: str | None = None


class PriorMemory:
    """The persistent memory as one run of one task sees it: read once at the start, written once at the end."""

    def __init__(self, store: MemoryStore, question: Question, settings: Settings, run_id: str,
                 clock: Callable[[], datetime] = utcnow, log: Any = None):
        self.log = log.bind(task_id=question.id) if log is not None else None
        self.store = store
        self.question = question
        self.settings = settings
        self.run_id = run_id
        self.clock = clock
        self.key = task_key(question.question)
        self.family = task_family(question)
        self.rechecks: list[Recheck] = []
        self.errors: list[str] = []
        try:
            self.context = load_context(store, question, settings, clock())
        except Exception as exc:  # an unreadable store costs this run its prior memory, not the run
            self.context = PriorContext()
            self.errors.append(f"memory store read failed: {type(exc).__name__}: {exc}")

    @classmethod
    def open(cls, settings: Settings, question: Question, run_id: str, log: Any = None) -> "PriorMemory | None":
        """None unless memory.mode is persistent. `log`: a RunLog for the prior_memory event."""
        if settings.memory.mode != "persistent":
            return None
        return cls(open_store(settings), question, settings, run_id, log=log)  # StorageError: the store cannot be opened

    @property
    def lessons(self) -> list[PriorRecord]:
        return self.context.lessons

    @property
    def candidates(self) -> list[PriorRecord]:
        return self.context.candidates

    def recheck_plan(self, record: PriorRecord, step_id: int) -> Plan:
        return recheck_plan(record, step_id)

    def claimed(self, record: PriorRecord, fresh: Result) -> Result:
        return claimed(record, fresh)

    def judge(self, record: PriorRecord, fresh: Result, verdict: Verdict) -> Verdict:
        return judge(record, fresh, verdict, self.clock())

    def note(self, record: PriorRecord, verdict: Verdict) -> Verdict | None:
        """Remember the outcome of one re-verification (a rejection becomes a correction at the end);
        returns the verdict when it rejects the record (the Planner's feedback), else None."""
        corr = None if verdict.accepted else record_id(PriorKind.correction, record.id)
        self.rechecks.append(Recheck(record, verdict.step_id, verdict.accepted,
                                     verdict.failure_type.value if verdict.failure_type else None, verdict.reason, corr))
        return None if verdict.accepted else verdict

    # ------------------------------------------------------------------ writing

    def _base(self, now: datetime) -> dict[str, Any]:
        ttl = self.settings.memory.prior_ttl_s
        return dict(task_key=self.key, family=self.family, question=self.question.question, run_id=self.run_id,
                    task_id=self.question.id, created_at=now, expires_at=now + timedelta(seconds=ttl) if ttl else None)

    def records_of(self, items: list[MemoryItem], debug: list[MemoryItem]) -> list[PriorRecord]:
        """The lessons, evidence and corrections this run leaves for later runs."""
        now = self.clock()
        base = self._base(now)
        out: list[PriorRecord] = []
        for item in items:  # accepted facts only: a model's estimate is not a fact to keep
            if item.status is not MemoryStatus.accepted or item.provenance.tool == REVIEW_TOOL or item.args is None:
                continue
            sig = plan_signature(item.provenance.tool, item.args)
            out.append(PriorRecord(id=record_id(PriorKind.evidence, self.key, sig, item.content), kind=PriorKind.evidence,
                                   status=MemoryStatus.accepted, tool=item.provenance.tool, args=item.args,
                                   sub_goal=item.sub_goal, content=item.content, source=item.provenance.source,
                                   reason=item.reason, **base))
        for item in debug:  # judged tool calls and refused repeats; not invalid planner output
            if item.failure_type is None or item.args is None or item.provenance.tool in ("planner", REVIEW_TOOL) \
                    or item.provenance.prior_id:  # a failed re-verification is a correction, not a lesson about the tool
                continue
            sig = plan_signature(item.provenance.tool, item.args)
            out.append(PriorRecord(id=record_id(PriorKind.lesson, self.key, sig, item.failure_type.value),
                                   kind=PriorKind.lesson, status=MemoryStatus.rejected, tool=item.provenance.tool,
                                   args=item.args, sub_goal=item.sub_goal, failure_type=item.failure_type,
                                   reason=item.reason[:600], **base))
        for rc in self.rechecks:
            if rc.accepted:
                continue
            target = rc.record
            claim = target.content.get("claim") if isinstance(target.content, dict) else None
            out.append(PriorRecord(id=rc.correction_id, kind=PriorKind.correction, status=MemoryStatus.rejected,
                                   tool=target.tool, args=target.args, sub_goal=target.sub_goal,
                                   failure_type=FailureType(rc.failure_type) if rc.failure_type else None,
                                   reason=rc.reason[:600], supersedes=target.id,
                                   content={"rejected": target.id, "rejected_run": target.run_id, "step_id": rc.step_id,
                                            "claim": claim},
                                   **{**base, "task_key": target.task_key, "family": target.family}))
        return out

    def remember(self, items: list[MemoryItem], debug: list[MemoryItem]) -> int:
        """Write this run's records (its own part: idempotent on re-run). Storage trouble is reported, never raised."""
        records = self.records_of(items, debug)
        try:
            self.store.write(f"{self.run_id}.{self.question.id}", [r.model_dump(mode="json") for r in records])
        except Exception as exc:
            self.errors.append(f"memory store write failed: {type(exc).__name__}: {exc}")
            records = []
        if self.log is not None:  # rechecks, expired records (ignored), lessons shown, what was written
            self.log.event("prior_memory", written=len(records), **self.report())
        return len(records)

    def report(self) -> dict[str, Any]:
        """What the prior memory did in this run: for the trace, the evaluation and people."""
        now = self.clock()
        return {
            "store": self.store.uri,
            "lessons_shown": [r.id for r in self.lessons],
            "rechecked": [{"id": rc.record.id, "step_id": rc.step_id, "accepted": rc.accepted, "failure_type": rc.failure_type,
                           "planted": rc.record.planted, "correction": rc.correction_id, "reason": rc.reason}
                          for rc in self.rechecks],
            "expired": [{"id": r.id, "kind": r.kind.value, "expired_at": r.expires_at.isoformat() if r.expires_at else None,
                         "age_days": round(r.age_days(now), 2)} for r in self.context.expired],
            "superseded_ignored": [r.id for r in self.context.superseded],
            "errors": list(self.errors),
        }


# --------------------------------------------------------------------------- people and planted records


def decision_record(decision: ReviewDecision, answer: Answer, question: Question, settings: Settings,
                    run_id: str, now: datetime | None = None) -> PriorRecord:
    """A reviewer's decision as a persistent record with origin human (a lesson for later runs, never evidence)."""
    now = now or utcnow()
    ttl = settings.memory.prior_ttl_s
    accepted = decision.action in (ReviewAction.accept, ReviewAction.answer)
    content = {"action": decision.action.value if decision.action else None, "answer": decision.answer or
               (answer.text if decision.action is ReviewAction.accept else ""), "reviewer": decision.reviewer,
               "note": decision.note, "run_answer": answer.text}
    return PriorRecord(id=record_id(PriorKind.human, task_key(question.question), run_id, content), kind=PriorKind.human,
                       task_key=task_key(question.question), family=task_family(question), question=question.question,
                       status=MemoryStatus.accepted if accepted else MemoryStatus.rejected, tool=REVIEW_TOOL,
                       content=content, origin=Origin.human, run_id=run_id, task_id=question.id, created_at=now,
                       expires_at=now + timedelta(seconds=ttl) if ttl else None,
                       reason=f"reviewer {decision.reviewer or '(unnamed)'}: {content['action'] or 'none'}")


def planted_record(question: Question, tool: str, args: dict, passages: list[dict], claim: dict, *, run_id: str = "planted",
                   created_at: datetime | None = None, ttl_s: float | None = None) -> PriorRecord:
    """A wrong 'accepted' evidence record, as a past false accept would have left it (tests and evaluations)."""
    now = created_at or utcnow()
    content = {"passages": passages, "claim": claim}
    key = task_key(question.question)
    return PriorRecord(id=record_id(PriorKind.evidence, key, plan_signature(tool, args), content), kind=PriorKind.evidence,
                       task_key=key, family=task_family(question), question=question.question, status=MemoryStatus.accepted,
                       tool=tool, args=args, sub_goal=f"find {claim.get('subject', '')} {claim.get('attribute', '')}".strip(),
                       content=content, run_id=run_id, task_id=question.id, created_at=now,
                       expires_at=now + timedelta(seconds=ttl_s) if ttl_s else None, planted=True)
