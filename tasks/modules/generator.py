"""Generator: write the answer from accepted evidence only, citing step and source for each claim."""

from __future__ import annotations

from prefect import task
from prefect.cache_policies import NO_CACHE

from infra.models import build_backend
from infra.models.base import ModelBackend, ModelError
from infra.runtime.settings import ModelConfig, Settings
from tasks.contracts import (
    AnswerDraft,
    Citation,
    FailureType,
    GenerationOutcome,
    MemoryItem,
    ModelUsage,
    answer_draft_schema,
)
from tasks.modules.prompts import ParseError, generator_messages, parse_json_reply, render_evidence
from tasks.modules.spans import answer_spans, polar_question

NO_EVIDENCE = "I could not establish a verified answer: no evidence passed verification."


class Generator:
    def __init__(self, backend: ModelBackend, config: ModelConfig, view_chars: int, answer: str = "free", max_spans: int = 80,
                 claims_first: bool = False):
        self.backend = backend
        self.config = config
        self.view_chars = view_chars
        self.answer_mode = answer  # span: pick among the evidence's values (tasks/modules/spans.py); free: write it
        self.max_spans = max_spans
        self.claims_first = claims_first  # quote the evidence, then answer (GeneratorConfig.claims_first)

    def answer(self, question: str, view: list[MemoryItem], deadline_s: float | None = None) -> GenerationOutcome:
        if not view:
            return GenerationOutcome(text=NO_EVIDENCE)
        by_step = {item.step_id: item for item in view}
        spans = self.spans(question, view)
        try:
            # a yes/no answer comes first: a quoted claim reads as support, and the model then says yes
            # (claims first on the tables' yes/no questions: 2 better, 5 worse; docs/results-v2.md)
            claims_first = self.claims_first and not polar_question(question)
            c = self.backend.complete(generator_messages(question, view, self.view_chars, self.config.demos, claims_first),
                                      json_schema=answer_draft_schema(sorted(by_step), spans, claims_first),
                                      max_tokens=self.config.max_tokens,
                                      temperature=self.config.temperature, seed=self.config.seed, deadline_s=deadline_s)
        except ModelError as exc:
            return self._extractive(view, FailureType.model_error, str(exc), None)
        usage = ModelUsage(model=c.model, tokens_in=c.tokens_in, tokens_out=c.tokens_out, latency_ms=c.latency_ms)
        try:
            draft = parse_json_reply(c.text, AnswerDraft)
        except ParseError as exc:
            return self._extractive(view, FailureType.schema, str(exc), usage)
        # A claim may only cite evidence the Generator was shown; anything else is dropped.
        citations = [Citation(claim=cl.claim, step_id=cl.step_id, source=by_step[cl.step_id].provenance.source)
                     for cl in draft.claims if cl.step_id in by_step]
        if not citations:
            return self._extractive(view, FailureType.unsupported, "the draft cited no accepted step", usage)
        return GenerationOutcome(text=draft.answer.strip(), citations=citations, usage=usage)

    def spans(self, question: str, view: list[MemoryItem]) -> list[str] | None:
        """The values the answer may be (span mode), or None (free mode)."""
        return answer_spans(view, self.max_spans, question) if self.answer_mode == "span" else None

    def _extractive(self, view: list[MemoryItem], ftype: FailureType, error: str, usage: ModelUsage | None) -> GenerationOutcome:
        """Fallback when the model fails: show the latest verified evidence verbatim, cited."""
        item = view[-1]
        text = "No generated answer; latest verified evidence: " + render_evidence([item], 600)
        return GenerationOutcome(text=text, citations=[Citation(claim=text, step_id=item.step_id, source=item.provenance.source)],
                                 usage=usage, failure_type=ftype, error=error)


def build_generator(settings: Settings) -> Generator:
    cfg = settings.models.generator
    g = settings.generator
    return Generator(build_backend(cfg), cfg, settings.memory.view_chars, g.answer, g.max_spans, g.claims_first)


@task(name="generate_answer", retries=0, cache_policy=NO_CACHE, task_run_name="answer-{task_id}")
def generate_answer(question: str, view: list[MemoryItem], task_id: str, settings: Settings,
                    deadline_s: float | None = None) -> GenerationOutcome:
    """Write the final answer from accepted evidence."""
    return build_generator(settings).answer(question, view, deadline_s)
