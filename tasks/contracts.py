"""The spine: every hand-off between AgentFlow modules is one of these validated records.

Flows, tasks and storage speak these models; this module imports nothing of ours. Model outputs
are parsed into the *Draft models (what a model may emit, bounded for constrained decoding) and
then promoted to the full records by the module that owns them.
"""

from __future__ import annotations

import json
import re
from datetime import date, datetime, timezone
from enum import Enum
from functools import lru_cache
from typing import Any, Literal

import jsonschema
from pydantic import BaseModel, ConfigDict, Field, field_validator

SCHEMA_VERSION = 1
"""Version stamped on every persisted record and event; bump when a field changes meaning."""

ANSWER_TOOL = "answer"
"""The Planner's way to say 'enough evidence: write the answer'. Not a real tool."""


def utcnow() -> datetime:
    """Timezone-aware now; every timestamp in a record is UTC."""
    return datetime.now(timezone.utc)


class _Record(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=False, use_enum_values=False)


# --------------------------------------------------------------------------- enums


class Role(str, Enum):
    """The four modules; every cost and event is attributed to one of them."""

    planner = "planner"
    executor = "executor"
    verifier = "verifier"
    generator = "generator"


class ResultStatus(str, Enum):
    ok = "ok"
    error = "error"
    timeout = "timeout"
    denied = "denied"


class FailureType(str, Enum):
    """Why a step failed; specific enough that the Planner can act on it."""

    schema = "schema"
    tool_error = "tool_error"
    timeout = "timeout"
    denied = "denied"
    empty_evidence = "empty_evidence"
    wrong_type = "wrong_type"
    recomputation = "recomputation"
    assertion = "assertion"
    stale_source = "stale_source"
    citation_mismatch = "citation_mismatch"
    conflict = "conflict"
    injection = "injection"
    unsupported = "unsupported"
    ignored_quantity = "ignored_quantity"  # a program leaves out a quantity the question states
    implausible_value = "implausible_value"  # a value the question rules out: a negative amount, half a person
    wrong_attribute = "wrong_attribute"  # the cited passage states the value for another property than the claim's
    incomplete_evidence = "incomplete_evidence"  # an answer step before the evidence states what the question names
    repeated_plan = "repeated_plan"
    model_error = "model_error"
    budget = "budget"


class NextAction(str, Enum):
    continue_ = "continue"
    replan = "replan"
    answer = "answer"
    stop_uncertain = "stop_uncertain"
    human_review = "human_review"


class MemoryStatus(str, Enum):
    accepted = "accepted"
    rejected = "rejected"
    superseded = "superseded"
    expired = "expired"
    estimate = "estimate"


class AnswerStatus(str, Enum):
    answered = "answered"
    uncertain = "uncertain"
    needs_review = "needs_review"
    budget_exhausted = "budget_exhausted"
    failed = "failed"


class StopReason(str, Enum):
    answered = "answered"
    budget_exhausted = "budget_exhausted"
    repeated_plan = "repeated_plan"
    no_progress = "no_progress"
    conflicting_evidence = "conflicting_evidence"
    error = "error"


class BudgetLimit(str, Enum):
    """Which limit ended a run with stop_reason=budget_exhausted."""

    calls = "calls"
    role_calls = "role_calls"
    tokens = "tokens"
    wall_clock = "wall_clock"
    tool_cost = "tool_cost"
    steps = "steps"


# --------------------------------------------------------------------------- tools


class ToolCard(_Record):
    """What the Planner is told about a tool and what the Executor enforces."""

    name: str = Field(description="Tool name the Planner uses.")
    description: str = Field(description="One paragraph shown to the Planner.")
    input_schema: dict[str, Any] = Field(description="JSON schema of Plan.args.")
    output_schema: dict[str, Any] = Field(description="JSON schema of Result.data when status is ok.")
    primary_arg: str = Field(description="The argument a Planner's single tool_input string fills.")
    program_call: bool = Field(default=False, description="python: tool_input says what to compute; a second call of "
                               "the Planner's model writes the program that fills primary_arg.")
    cost: float = Field(ge=0, description="Cost units charged per call against the tool budget.")
    timeout_s: float = Field(gt=0, description="Longest a call may run; also its wall-clock reservation.")

    def validate_args(self, args: Any) -> None:
        """jsonschema.ValidationError (the best match) when Plan.args do not fit input_schema."""
        _validate(args, self.input_schema)

    def validate_data(self, data: Any) -> None:
        """jsonschema.ValidationError (the best match) when Result.data does not fit output_schema."""
        _validate(data, self.output_schema)


@lru_cache(maxsize=256)
def _validator(schema_json: str) -> Any:
    schema = json.loads(schema_json)
    cls = jsonschema.validators.validator_for(schema)
    cls.check_schema(schema)
    return cls(schema)


def _validate(instance: Any, schema: dict[str, Any]) -> None:
    # as jsonschema.validate, but the schema is checked once, not on every call (it was ~5 ms a step)
    error = jsonschema.exceptions.best_match(_validator(json.dumps(schema, sort_keys=True)).iter_errors(instance))
    if error is not None:
        raise error


# --------------------------------------------------------------------------- plan / result / verdict


class Plan(_Record):
    """One Planner decision: the next sub-goal and the tool call that should serve it."""

    step_id: int = Field(ge=0, description="Position of this step in the run, from 1.")
    sub_goal: str = Field(min_length=1, description="What this step should establish.")
    tool: str = Field(min_length=1, description="Tool name from the allow-list, or 'answer'.")
    args: dict[str, Any] = Field(default_factory=dict, description="Tool arguments (validated by the tool card).")
    expected_evidence: str = Field(default="", description="What a useful result would contain.")
    success_criterion: str = Field(default="", description="How the Verifier can tell it worked.")
    max_cost: float = Field(default=0.0, ge=0, description="Declared tool cost units for this step.")
    justification: str = Field(default="", description="Why this step, in one sentence.")

    def signature(self) -> str:
        """Normalised tool+args, used to detect repeated plans."""
        return plan_signature(self.tool, self.args)


def _normalise(value: Any) -> Any:
    if isinstance(value, str):
        return re.sub(r"\s+", " ", value.strip().lower())
    if isinstance(value, dict):
        return {k: _normalise(v) for k, v in sorted(value.items())}
    if isinstance(value, list):
        return [_normalise(v) for v in value]
    return value


def plan_signature(tool: str, args: dict[str, Any]) -> str:
    """Case- and whitespace-insensitive identity of a tool call."""
    return json.dumps([tool.strip().lower(), _normalise(args)], sort_keys=True)


class Source(_Record):
    """Where a piece of evidence came from."""

    uri: str = Field(description="Stable locator: corpus://doc-id, sandbox://python, model://name.")
    title: str = Field(default="", description="Human-readable title.")
    retrieved_at: datetime = Field(default_factory=utcnow, description="When the tool fetched it.")
    published_at: datetime | None = Field(default=None, description="When the source says it was published.")

    @classmethod
    def of_passage(cls, passage: dict) -> "Source":
        """A search passage's source: its corpus document."""
        return cls(uri=f"corpus://{passage.get('doc_id')}", title=str(passage.get("title") or ""),
                   published_at=passage.get("published_at"))


class Result(_Record):
    """What the Executor got back from one tool call. Its data is data, never instructions."""

    step_id: int = Field(ge=0, description="The Plan this result answers.")
    tool: str = Field(description="Tool that ran (or was refused).")
    status: ResultStatus = Field(description="ok, error, timeout or denied.")
    data: Any = Field(default=None, description="Tool payload, validated by the tool card's output schema.")
    error: str | None = Field(default=None, description="Error text when status is not ok.")
    source: Source | None = Field(default=None, description="Primary source of the payload.")
    elapsed_ms: float = Field(default=0.0, ge=0, description="Tool wall time.")
    cost: float = Field(default=0.0, ge=0, description="Tool cost units charged.")
    tokens_in: int = Field(default=0, ge=0, description="Model tokens a model-backed tool consumed.")
    tokens_out: int = Field(default=0, ge=0, description="Model tokens a model-backed tool produced.")
    model: str | None = Field(default=None, description="Model behind a model-backed tool.")


class Check(_Record):
    """One named Verifier check."""

    name: str
    passed: bool
    detail: str = ""


class Claim(_Record):
    """What a step asserts beyond its raw evidence: a value about a subject, and where it comes from.

    Carried, when a step states one, as `Result.data["claim"]` (so accepted memory keeps it); the
    Verifier derives one for python (stdout) and generalist (text) results that carry none.
    """

    subject: str = Field(min_length=1, max_length=300, description="Who or what the value is about: 'Lake Orvanne'.")
    attribute: str = Field(default="", max_length=200, description="Which property: 'depth'. With subject, the key conflicts compare.")
    value: str = Field(min_length=1, max_length=300, description="The claimed value as text, with its unit: '212 metres'.")
    cites: list[str] = Field(default_factory=list, description="Passage doc_ids of this result, or memory ids ('step-2') "
                             "whose values a derived claim uses.")


class SupersededSentence(_Record):
    """A sentence of an older passage that a newer passage of the same search result contradicts
    (tasks/checks/supersession.py): kept out of the evidence, recorded with the passage that replaces it."""

    doc_id: str
    sentence: str = Field(description="The older passage's sentence, as written.")
    published_at: date
    by_doc_id: str = Field(description="The newer passage whose sentence states the current value.")
    by_published_at: date


class QuarantinedPassage(_Record):
    """A passage of a search result with instruction-like text (tasks/checks/injection.py): left out of the evidence,
    so no role ever reads it; recorded by its doc id and the phrase that flagged it, never its text."""

    doc_id: str
    phrase: str = Field(max_length=120, description="The instruction-like phrase found in it.")


class Verdict(_Record):
    """The Verifier's judgement of one step; its failure_type and reason feed the next plan."""

    step_id: int = Field(ge=0)
    accepted: bool
    checks: list[Check] = Field(default_factory=list, description="Checks run, in order.")
    failure_type: FailureType | None = Field(default=None, description="Set when not accepted.")
    reason: str = Field(default="", description="One sentence a Planner can act on.")
    evidence: str = Field(default="", description="The accepted evidence, summarised.")
    confidence: float = Field(default=0.0, ge=0.0, le=1.0)
    next_action: NextAction = NextAction.continue_
    supersedes: str | None = Field(default=None, description="Accepted memory item this step's newer source replaces.")
    superseded: list[SupersededSentence] = Field(default_factory=list, description="Sentences of this result's older "
                                                 "passages that a newer passage of the same result contradicts.")
    quarantined: list[QuarantinedPassage] = Field(default_factory=list, description="Passages of this result left out "
                                                  "of the evidence for instruction-like text; the rest was judged.")
    judge_independent: bool | None = Field(default=None, description="None: no LLM judge was asked; False: the judge shares "
                                           "a model with the Planner or Executor, so its confidence is capped.")
    usage: ModelUsage | None = Field(default=None, description="What the LLM judge cost, when one was asked.")


# --------------------------------------------------------------------------- memory


class Origin(str, Enum):
    """Where a memory item came from: this run's own step, an earlier run (prior), or a person."""

    run = "run"
    prior = "prior"
    human = "human"


class Provenance(_Record):
    tool: str
    source: Source | None = None
    step_id: int
    model: str | None = None
    origin: Origin = Field(default=Origin.run, description="run: this run's step; prior: an earlier run's item "
                           "re-verified in this run; human: a reviewer's decision.")
    prior_id: str | None = Field(default=None, description="The persistent memory record this item came from.")
    run_id: str | None = Field(default=None, description="The run that produced the item (for prior and human items).")


class MemoryItem(_Record):
    """A unit of evidence (or a rejected attempt) carried between steps."""

    id: str = Field(description="Unique within a run: 'step-3'.")
    step_id: int
    status: MemoryStatus
    provenance: Provenance
    created_at: datetime = Field(default_factory=utcnow)
    expires_at: datetime | None = None
    supersedes: str | None = Field(default=None, description="Id of the item this one replaces.")
    superseded_by: str | None = Field(default=None, description="Id of the item that replaced this one.")
    sub_goal: str = Field(default="", description="What the step was for.")
    content: Any = Field(default=None, description="The evidence payload (Result.data).")
    failure_type: FailureType | None = None
    reason: str = ""
    args: dict[str, Any] | None = Field(default=None, description="The tool call's arguments (lessons name them).")

    def is_live(self, now: datetime) -> bool:
        return self.expires_at is None or self.expires_at > now


# --------------------------------------------------------------------------- memory across runs


class PriorKind(str, Enum):
    """What a persistent memory record holds."""

    lesson = "lesson"          # a plan or tool call that failed, with its failure type and arguments
    evidence = "evidence"      # evidence a run accepted (never evidence in a later run until re-verified)
    correction = "correction"  # a later run's re-verification rejected an evidence record (it supersedes it)
    human = "human"            # a reviewer's decision on a run's answer


class PriorRecord(_Record):
    """One row of the persistent memory store, keyed by task and task family; immutable once written.

    Ids are content hashes, so writing the same record twice (a resumed run, a repeated lesson) is a
    no-op; status changes are new records (a correction supersedes an evidence record), never edits.
    """

    id: str = Field(description="Content hash: the same lesson or evidence always gets the same id.")
    kind: PriorKind
    task_key: str = Field(description="Normalised-question hash: the same task in any run.")
    family: str = Field(default="", description="Task family (a benchmark's family field, else the question's shape).")
    question: str = Field(default="", description="The question, for similarity and for people.")
    status: MemoryStatus = Field(description="accepted (evidence, human), rejected (lesson, correction); "
                                 "superseded is computed on read from corrections.")
    tool: str = Field(default="", description="Tool of the step (lesson, evidence), 'human_review' for decisions.")
    args: dict[str, Any] = Field(default_factory=dict, description="The tool call's arguments.")
    sub_goal: str = ""
    failure_type: FailureType | None = None
    reason: str = ""
    content: Any = Field(default=None, description="Evidence payload (with its claim), or a decision.")
    source: Source | None = None
    origin: Origin = Field(default=Origin.run, description="run: written by a run; human: a reviewer's decision.")
    run_id: str = ""
    task_id: str = ""
    created_at: datetime = Field(default_factory=utcnow)
    expires_at: datetime | None = None
    supersedes: str | None = Field(default=None, description="correction: the record it rejects.")
    superseded_by: str | None = Field(default=None, description="Computed on read: the correction that rejected it.")
    planted: bool = Field(default=False, description="A deliberately wrong record (contamination tests and evals).")
    schema_version: int = SCHEMA_VERSION

    def age_days(self, now: datetime) -> float:
        return max(0.0, (now - self.created_at).total_seconds() / 86400)

    def is_live(self, now: datetime) -> bool:
        return self.expires_at is None or self.expires_at > now


class ReviewAction(str, Enum):
    accept = "accept"   # the answer as written is right
    answer = "answer"   # the reviewer gives the answer
    reject = "reject"   # the answer is wrong; no answer


class ReviewDecision(_Record):
    """What a person decided about a needs_review answer (or that nobody did before the timeout)."""

    action: ReviewAction | None = Field(default=None, description="None: the review timed out.")
    answer: str = Field(default="", max_length=2000, description="The reviewer's answer, for action=answer.")
    reviewer: str = Field(default="", max_length=200)
    note: str = Field(default="", max_length=2000)
    decided_at: datetime = Field(default_factory=utcnow)
    timed_out: bool = False


# --------------------------------------------------------------------------- answer


class Citation(_Record):
    claim: str = Field(description="The sentence of the answer this citation supports.")
    step_id: int = Field(description="Step whose accepted evidence supports the claim.")
    source: Source | None = Field(default=None, description="The evidence's source.")


class RoleCost(_Record):
    """Per-role totals for one run."""

    calls: int = 0
    tokens_in: int = 0
    tokens_out: int = 0
    latency_ms: float = 0.0
    tool_ms: float = 0.0
    rejections: int = 0


class Answer(_Record):
    """The run's outcome: text grounded in accepted evidence, or an honest non-answer."""

    question_id: str = ""
    question: str = ""
    text: str = Field(description="The answer, or why there is none.")
    citations: list[Citation] = Field(default_factory=list)
    status: AnswerStatus
    stop_reason: StopReason
    budget_limit: BudgetLimit | None = Field(default=None, description="Which limit, when budget_exhausted.")
    iterations: int = Field(default=0, ge=0, description="Planner turns taken.")
    cost: dict[Role, RoleCost] = Field(default_factory=dict, description="Per-role cost summary.")
    run_id: str = ""
    review: ReviewDecision | None = Field(default=None, description="A person's decision, when the run paused for review.")
    schema_version: int = SCHEMA_VERSION


# --------------------------------------------------------------------------- trace


class StepRecord(_Record):
    """One module call; the steps table and every cost figure are computed from these."""

    run_id: str
    task_id: str
    step_id: int
    role: Role
    model: str | None = None
    tokens_in: int = 0
    tokens_out: int = 0
    latency_ms: float = 0.0
    tool: str | None = None
    tool_ms: float = 0.0
    accepted: bool | None = None
    failure_type: FailureType | None = None
    detail: str = ""
    ts: datetime = Field(default_factory=utcnow)
    schema_version: int = SCHEMA_VERSION
    model_calls: int | None = Field(default=None, ge=0, description="Model calls this module call made (a Planner turn "
                                    "with its program call: 2; the Verifier's independent programs: one each); None in "
                                    "records written before it was kept: one if `model` is set.")

    def calls_made(self) -> int:
        return self.model_calls if self.model_calls is not None else int(bool(self.model))


class ModelUsage(_Record):
    """What a model call cost (or several of one role's calls for one decision, summed: `calls` counts them)."""

    model: str
    tokens_in: int = Field(default=0, ge=0)
    tokens_out: int = Field(default=0, ge=0)
    latency_ms: float = Field(default=0.0, ge=0)
    calls: int = Field(default=1, ge=1)


class JudgedStep(_Record):
    """One step as the Verifier judged it: the plan, the raw result, the accepted evidence it was shown and the
    verdict. Runs keep these so that labeled verification cases can be harvested from real errors."""

    step_id: int = Field(ge=0)
    plan: Plan
    result: Result
    view: list[MemoryItem] = Field(default_factory=list, description="The accepted evidence shown to the Verifier.")
    verdict: Verdict


class PlanOutcome(_Record):
    """The Planner task's hand-off: a valid Plan, or why there is none (never enters memory)."""

    plan: Plan | None = None
    usage: ModelUsage | None = None
    failure_type: FailureType | None = None
    error: str | None = None
    raw: str = Field(default="", description="The model's raw text, kept for the debug trace.")


class GenerationOutcome(_Record):
    """The Generator task's hand-off: answer text with checked citations."""

    text: str
    citations: list[Citation] = Field(default_factory=list)
    usage: ModelUsage | None = None
    failure_type: FailureType | None = None
    error: str | None = None


class Question(_Record):
    """One line of a batch input file."""

    model_config = ConfigDict(extra="ignore")
    id: str = Field(min_length=1)
    question: str = Field(min_length=1)
    answer: str | None = None
    family: str | None = Field(default=None, description="Task family (benchmark field), used to find similar past tasks.")

    @field_validator("id", mode="before")
    @classmethod
    def _id_as_str(cls, v: Any) -> Any:
        return str(v) if isinstance(v, int) else v


# --------------------------------------------------------------------------- model drafts
# What a model is allowed to emit. Bounded lengths keep constrained decoding from running to
# max_tokens (ENVIRONMENT.md: unbounded strings broke 1-2 outputs in 10).


class PlanDraft(BaseModel):
    """The Planner model's output; promoted to a Plan by the Planner module."""

    model_config = ConfigDict(extra="forbid")
    sub_goal: str = Field(min_length=1, max_length=200)
    tool: str = Field(min_length=1, max_length=40)
    tool_input: str = Field(default="", max_length=600)
    expected_evidence: str = Field(default="", max_length=200)
    success_criterion: str = Field(default="", max_length=200)
    justification: str = Field(default="", max_length=200)


class ClaimDraft(BaseModel):
    model_config = ConfigDict(extra="forbid")
    claim: str = Field(min_length=1, max_length=300)
    step_id: int


class JudgeDraft(BaseModel):
    """The LLM judge's output for a step the Verifier's checks could not decide."""

    model_config = ConfigDict(extra="forbid")
    verdict: Literal["accept", "reject"]
    failure_type: Literal["none", "unsupported", "citation_mismatch", "stale_source", "conflict", "injection",
                          "wrong_type", "recomputation"] = "none"
    reason: str = Field(default="", max_length=200)


class AnswerDraft(BaseModel):
    """The Generator model's output; citations are checked against accepted memory."""

    model_config = ConfigDict(extra="forbid")
    answer: str = Field(min_length=1, max_length=400)
    claims: list[ClaimDraft] = Field(default_factory=list, max_length=4)


def plan_draft_schema(tools: list[str]) -> dict[str, Any]:
    """JSON schema for constrained Planner decoding, with the tool name as an enum."""
    schema = PlanDraft.model_json_schema()
    schema["properties"]["tool"] = {"type": "string", "enum": list(tools)}
    schema["required"] = ["sub_goal", "tool", "tool_input", "justification"]
    return schema


def answer_draft_schema(step_ids: list[int], answers: list[str] | None = None, claims_first: bool = False) -> dict[str, Any]:
    """JSON schema for constrained Generator decoding; citations may only name accepted steps, and the answer may
    only be one of `answers` when they are given (the evidence's spans). `claims_first` orders the claims before
    the answer, so a model that decodes in field order quotes its evidence before it picks the value."""
    claim = {
        "type": "object",
        "properties": {
            "claim": {"type": "string", "minLength": 1, "maxLength": 300},
            "step_id": {"type": "integer", "enum": list(step_ids)},
        },
        "required": ["claim", "step_id"],
        "additionalProperties": False,
    }
    fields = {
        "answer": {"type": "string", "enum": list(answers)} if answers else {"type": "string", "minLength": 1, "maxLength": 400},
        "claims": {"type": "array", "items": claim, "minItems": 1, "maxItems": 4},
    }
    order = ["claims", "answer"] if claims_first else ["answer", "claims"]
    return {"type": "object", "properties": {k: fields[k] for k in order}, "required": order, "additionalProperties": False}


CONTRACTS: dict[str, type[BaseModel]] = {
    "Plan": Plan,
    "Result": Result,
    "Verdict": Verdict,
    "MemoryItem": MemoryItem,
    "Answer": Answer,
    "StepRecord": StepRecord,
    "ToolCard": ToolCard,
    "Question": Question,
    "ModelUsage": ModelUsage,
    "PlanOutcome": PlanOutcome,
    "GenerationOutcome": GenerationOutcome,
    "PlanDraft": PlanDraft,
    "AnswerDraft": AnswerDraft,
    "Claim": Claim,
    "JudgeDraft": JudgeDraft,
    "PriorRecord": PriorRecord,
    "ReviewDecision": ReviewDecision,
}


def json_schemas() -> dict[str, dict[str, Any]]:
    """Every contract's JSON schema, by name (exported by `agentflow schemas`)."""
    return {name: model.model_json_schema() for name, model in CONTRACTS.items()}
