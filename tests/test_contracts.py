import json
from datetime import datetime, timezone

import pytest
from hypothesis import given, settings as hsettings, strategies as st
from pydantic import ValidationError

from tasks.contracts import (
    CONTRACTS,
    Answer,
    AnswerDraft,
    MemoryItem,
    Plan,
    PlanDraft,
    Result,
    Verdict,
    answer_draft_schema,
    json_schemas,
    plan_draft_schema,
    plan_signature,
)


def test_valid_records_round_trip():
    plan = Plan(step_id=1, sub_goal="find depth", tool="search", args={"query": "Lake Orvanne depth"})
    result = Result(step_id=1, tool="search", status="ok", data={"passages": []},
                    source={"uri": "corpus://d1", "published_at": "2024-03-01"})
    verdict = Verdict(step_id=1, accepted=True, checks=[{"name": "schema", "passed": True}], confidence=0.6)
    item = MemoryItem(id="step-1", step_id=1, status="accepted", provenance={"tool": "search", "step_id": 1})
    answer = Answer(text="212 m", status="answered", stop_reason="answered")
    for record in (plan, result, verdict, item, answer):
        again = type(record).model_validate_json(record.model_dump_json())
        assert again == record
    assert result.source.published_at == datetime(2024, 3, 1, tzinfo=None) or result.source.published_at.date().isoformat() == "2024-03-01"


@pytest.mark.parametrize(
    "model, payload, fragment",
    [
        (Plan, {"step_id": 1, "tool": "search"}, "sub_goal"),
        (Plan, {"step_id": -1, "sub_goal": "x", "tool": "search"}, "step_id"),
        (Plan, {"step_id": 1, "sub_goal": "x", "tool": "search", "bogus": 1}, "bogus"),
        (Result, {"step_id": 1, "tool": "python", "status": "exploded"}, "status"),
        (Verdict, {"step_id": 1, "accepted": True, "confidence": 1.5}, "confidence"),
        (MemoryItem, {"id": "a", "step_id": 1, "status": "maybe", "provenance": {"tool": "t", "step_id": 1}}, "status"),
        (Answer, {"text": "x", "status": "answered", "stop_reason": "gave_up"}, "stop_reason"),
    ],
)
def test_invalid_records_are_rejected_with_the_field_named(model, payload, fragment):
    with pytest.raises(ValidationError) as info:
        model.model_validate(payload)
    assert fragment in str(info.value)


def test_plan_signature_ignores_case_and_whitespace_but_not_content():
    a = plan_signature("search", {"query": "Lake  Orvanne depth"})
    b = plan_signature("SEARCH", {"query": " lake orvanne DEPTH "})
    c = plan_signature("search", {"query": "Lake Orvanne height"})
    assert a == b != c


def test_exported_schemas_cover_every_contract_and_bound_model_outputs():
    schemas = json_schemas()
    assert set(schemas) == set(CONTRACTS)
    plan_schema = plan_draft_schema(["search", "python", "answer"])
    assert plan_schema["properties"]["tool"]["enum"] == ["search", "python", "answer"]
    assert plan_schema["properties"]["tool_input"]["maxLength"] == 600
    ans = answer_draft_schema([1, 3])
    assert ans["properties"]["claims"]["items"]["properties"]["step_id"]["enum"] == [1, 3]
    assert ans["properties"]["claims"]["maxItems"] == 4


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-5, 5) | st.floats(allow_nan=False, width=16) | st.text(max_size=8),
    lambda children: st.lists(children, max_size=3) | st.dictionaries(st.sampled_from(
        ["step_id", "sub_goal", "tool", "args", "status", "accepted", "text", "stop_reason", "id", "provenance", "x"]),
        children, max_size=6),
    max_leaves=12,
)


@hsettings(max_examples=300, deadline=None)
@given(payload=json_values, name=st.sampled_from(sorted(CONTRACTS)))
def test_random_json_is_a_valid_record_or_a_clean_validation_error(payload, name):
    model = CONTRACTS[name]
    try:
        record = model.model_validate(payload)
    except ValidationError as exc:
        assert exc.errors(), "a validation error must say what is wrong"
        return
    # Whatever validates must serialise and validate again to the same record.
    assert model.model_validate(json.loads(record.model_dump_json())) == record


def test_drafts_enforce_bounds():
    with pytest.raises(ValidationError):
        PlanDraft(sub_goal="x" * 201, tool="search")
    with pytest.raises(ValidationError):
        AnswerDraft(answer="a", claims=[{"claim": "c", "step_id": 1}] * 5)
