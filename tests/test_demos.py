"""Worked examples: shown in each role's own format, matched to the situation, filtered by the allowed tools."""

from __future__ import annotations

import json

import jsonschema
import pytest

from infra.runtime.settings import Settings
from tasks.baselines.direct import run_direct
from tasks.contracts import ANSWER_TOOL, AnswerDraft, PlanDraft, Question, answer_draft_schema, plan_draft_schema
from tasks.modules import demos
from tasks.modules.prompts import direct_messages, generator_messages, monolithic_messages, planner_messages
from tasks.modules.tools import tool_cards
from tests.scripted import scripted_settings


def _cards(*allow: str):
    return tool_cards(Settings(tools={"allow": list(allow)}))


def _replies(messages):
    return [json.loads(m["content"]) for m in messages if m["role"] == "assistant"]


def test_no_demos_when_switched_off():
    msgs = planner_messages("Q?", _cards("search", "python"), [], None, 2400, demos=False)
    assert [m["role"] for m in msgs] == ["system", "user"]


def test_first_planner_turn_sees_only_first_steps_lookup_last():
    cards = _cards("search", "python", "generalist")
    msgs = planner_messages("What is the area of Zent?", cards, [], None, 2400, demos=True)
    replies = _replies(msgs)
    assert [r["tool"] for r in replies] == ["python", "search"]  # no 'answer' example before any evidence
    assert msgs[-1]["role"] == "user" and "What is the area of Zent?" in msgs[-1]["content"]
    schema = plan_draft_schema([*cards, ANSWER_TOOL])
    for r in replies:  # every example is a reply the constrained decoder could produce
        jsonschema.validate(r, schema)
        PlanDraft.model_validate(r)
    # the example prompts have the real prompt's form
    assert all(m["content"].endswith("Next step as JSON:") for m in msgs if m["role"] == "user")


def test_later_planner_turn_sees_examples_with_evidence():
    cards = _cards("search", "python")
    view = demos.LOOKUP.view(2)  # any accepted evidence
    msgs = planner_messages("What is the area of Zent?", cards, view, None, 2400, demos=True)
    replies = _replies(msgs)
    assert {r["tool"] for r in replies} == {ANSWER_TOOL}
    assert sum("<evidence" in m["content"] for m in msgs if m["role"] == "user") == 3  # two examples + the real turn


def test_examples_need_their_tools_allowed():
    assert [c.tools for c in demos.cases_for({"python"})] == [{"python"}]
    assert demos.cases_for({"generalist"}) == []
    msgs = planner_messages("Q?", _cards("python"), [], None, 2400, demos=True)
    assert [r["tool"] for r in _replies(msgs)] == ["python"]
    assert "search" not in json.dumps(_replies(msgs))


def test_generator_examples_cite_their_evidence_and_fit_the_schema():
    msgs = generator_messages("Q?", demos.LOOKUP.view(2), 2400, demos=True)
    replies = _replies(msgs)
    assert len(replies) == len(demos.CASES)
    for case, reply in zip(demos.CASES, replies):
        jsonschema.validate(reply, answer_draft_schema([case.claim_step]))
        AnswerDraft.model_validate(reply)
        # the cited step's evidence really states the claim's value
        shown = case.view(len(case.steps))[case.claim_step - 1]
        assert case.answer.replace(",", "") in json.dumps(shown.content).replace(",", "")


def test_monolithic_examples_are_transcripts():
    cards = _cards("search", "python")
    first = monolithic_messages("Q?", cards, [], 2400, demos=True)
    assert [r["tool"] for r in _replies(first)] == ["python", "search"]
    later = monolithic_messages("Q?", cards, ['<evidence step="1">x</evidence>'], 2400, demos=True)
    replies = _replies(later)
    assert [r["tool"] for r in replies] == [ANSWER_TOOL, ANSWER_TOOL]
    assert [r["tool_input"] for r in replies] == [demos.CALC.answer, demos.LOOKUP.answer]
    assert 'tool="search" input="Port Elmsby population" status="ok"' in later[3]["content"]


def test_direct_example_and_its_use():
    msgs = direct_messages("Q?", demos=True)
    assert msgs[2]["content"].endswith("Answer: 96") and msgs[-1]["content"] == "Question: Q?"
    assert "step by step" in msgs[0]["content"]


def test_direct_reasons_with_its_own_token_cap():
    from infra.models import build_backend, clear_backend_cache

    clear_backend_cache()
    s = scripted_settings(["x"], ["3 * 4 = 12\nAnswer: 12"], **{"generator.direct_max_tokens": 300})
    out = run_direct(Question(id="q", question="Tom has 3 bags of 4 apples. How many apples?"), s, run_id="r")
    [request] = build_backend(s.models.generator).requests
    assert request["max_tokens"] == 300 != s.models.generator.max_tokens and out.answer.text.endswith("Answer: 12")
    clear_backend_cache()


@pytest.mark.parametrize("on", [True, False])
def test_each_system_sends_the_examples_by_configuration(on, monkeypatch):
    """models.<role>.demos reaches the Planner, the Generator and the direct baseline."""
    import tasks.baselines.direct as direct
    from infra.models.scripted import ScriptedBackend
    from tasks.contracts import Question
    from tasks.modules.generator import Generator
    from tasks.modules.planner import Planner

    settings = scripted_settings(planner=["{}"])
    for role in ("planner", "generator"):
        getattr(settings.models, role).demos = on
    backend = ScriptedBackend(['{"sub_goal": "s", "tool": "python", "tool_input": "print(1)", "justification": "j"}'])
    Planner(backend, settings.models.planner, tool_cards(settings), 2400).plan("Q?", [], None, 1)
    Generator(backend, settings.models.generator, 2400).answer("Q?", demos.CALC.view(2))
    monkeypatch.setattr(direct, "build_backend", lambda cfg: backend)
    run_direct(Question(id="q", question="2+2?"), settings, run_id="r")
    sizes = [len(r["messages"]) for r in backend.requests]
    assert sizes == ([4, 6, 4] if on else [2, 2, 2])


def test_planner_examples_follow_the_backends_reply_template():
    """A trained policy replies in its template's field order; its examples are shown in that form."""
    fields = ["tool", "tool_input", "sub_goal"]
    msgs = planner_messages("Q?", _cards("search", "python"), [], None, 2400, demos=True, reply_fields=fields)
    for m in msgs:
        if m["role"] == "assistant":
            assert list(json.loads(m["content"])) == fields
            assert m["content"].startswith('{"tool": "')  # the exact prefix the template forces

    class TemplateBackend:
        reply_fields = fields

        def __init__(self):
            self.seen = []

        def complete(self, messages, **kw):
            from infra.models.base import Completion
            self.seen.append(messages)
            return Completion(text='{"tool": "python", "tool_input": "print(1)", "sub_goal": "s"}', tokens_in=1,
                              tokens_out=1, latency_ms=1.0, model="t")

    from tasks.modules.planner import Planner

    settings = scripted_settings(planner=["{}"])
    backend = TemplateBackend()
    outcome = Planner(backend, settings.models.planner, tool_cards(settings), 2400).plan("Q?", [], None, 1)
    assert outcome.plan is not None and outcome.plan.tool == "python"
    assert list(json.loads(backend.seen[0][2]["content"])) == fields


def _chatml(messages: list[dict[str, str]]) -> str:
    return "".join(f"<|im_start|>{m['role']}\n{m['content']}<|im_end|>\n" for m in messages)


def _fixed_prefix(a: list[dict[str, str]], b: list[dict[str, str]]) -> int:
    x, y = _chatml(a), _chatml(b)
    n = 0
    while n < min(len(x), len(y)) and x[n] == y[n]:
        n += 1
    return n


@pytest.mark.parametrize("started", [False, True])
def test_every_roles_prompt_puts_its_fixed_part_first(started):
    """The prompt cache reuses the longest shared prefix: the role's instructions and worked examples come before
    anything that differs between questions, so two questions share all of the prompt but the last message."""
    cards = _cards("search", "python")
    view = [demos.LOOKUP.view(2)[0]] if started else []
    builders = {
        "planner": lambda q: planner_messages(q, cards, view, None, 2400, demos=True),
        "generator": lambda q: generator_messages(q, view, 2400, demos=True),
        "monolithic": lambda q: monolithic_messages(q, cards, ["obs"] if started else [], 2400, demos=True),
        "direct": lambda q: direct_messages(q, demos=True),
    }
    for role, build in builders.items():
        a, b = build("How deep is Lake Orvanne?"), build("Who founded Velt Corporation?")
        fixed = len(_chatml(a[:-1]))
        assert _fixed_prefix(a, b) >= fixed, role  # everything before the last message is shared
        assert fixed > 0.5 * len(_chatml(a)), role  # and it is most of the prompt
