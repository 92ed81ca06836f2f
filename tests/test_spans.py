"""Answer spans: the Generator (span mode) may only answer with a value the verified evidence states."""

from __future__ import annotations

import json

import jsonschema
import pytest

from infra.models.scripted import ScriptedBackend
from infra.runtime.settings import ModelConfig, Settings
from tasks.contracts import MemoryItem, MemoryStatus, Provenance, answer_draft_schema
from tasks.modules.generator import Generator
from tasks.modules.spans import answer_spans, polar_question


def _search_item(step_id: int, *texts: str) -> MemoryItem:
    passages = [{"doc_id": f"d{i}", "title": "t", "text": t, "url": None, "published_at": "2024-01-01", "score": 1.0}
                for i, t in enumerate(texts)]
    return MemoryItem(id=f"step-{step_id}", step_id=step_id, status=MemoryStatus.accepted, content={"passages": passages},
                      provenance=Provenance(tool="search", step_id=step_id))


def _python_item(step_id: int, stdout: str) -> MemoryItem:
    return MemoryItem(id=f"step-{step_id}", step_id=step_id, status=MemoryStatus.accepted,
                      content={"stdout": stdout, "stderr": "", "exit_code": 0, "truncated": False},
                      provenance=Provenance(tool="python", step_id=step_id))


ORG = ("Shequipar Foundry is an optics company. Shequipar Foundry is led by chief executive Quaquux Troudyl. "
       "The annual revenue of Shequipar Foundry is 1,796.7 million dollars. It was founded in 1984 and listed on 2001-05-17. "
       "The Bank of England holds -3 shares.")


def test_spans_are_the_values_the_evidence_states():
    spans = answer_spans([_search_item(1, ORG)])
    for value in ["Shequipar Foundry", "Quaquux Troudyl", "1,796.7", "1984", "2001-05-17", "Bank of England", "-3", "yes", "no"]:
        assert value in spans, value
    assert len(spans) == len(set(spans))
    assert "The" not in spans and "It" not in spans  # a sentence's first word is not a name
    assert "2001" not in spans and "05" not in spans  # a date is one value, not three numbers


def test_names_inside_a_run_and_numbers_before_a_comma():
    # the three span losses read off HotpotQA runs (flows.bench.failures): a possessive and a title inside a run, a
    # middle initial; and a clause's comma that stuck to a number ("66,900,")
    spans = answer_spans([_search_item(1, "He was secretary of New York Governor Nelson Rockefeller's Committee. "
                                          "Henry J. Kaiser built ships. It seats 66,900, of whom 1,000 stand, since 1974, "
                                          "beside the U.S. Army. McDonald's sells food.")])
    for value in ["New York Governor Nelson Rockefeller's Committee", "Nelson Rockefeller", "Henry J. Kaiser", "66,900",
                  "1,000", "1974", "U.S. Army", "McDonald's"]:
        assert value in spans, value
    assert spans.index("New York Governor Nelson Rockefeller's Committee") < spans.index("Nelson Rockefeller")
    assert not any(s.endswith(",") for s in spans) and "McDonald" not in spans  # a name ending in 's stays whole


def test_newest_evidence_first_and_a_programs_result_is_its_last_line():
    spans = answer_spans([_search_item(1, "Velt has 12,400 employees."), _python_item(2, "working\n15500\n")])
    assert spans[0] == "15500" and "working" not in spans
    assert spans.index("15500") < spans.index("12,400")


def test_the_limit_keeps_yes_and_no():
    text = " ".join(f"Item {i} costs {1000 + i} dollars." for i in range(100))
    spans = answer_spans([_search_item(1, text)], limit=10)
    assert len(spans) == 10 and spans[-2:] == ["yes", "no"]


def test_the_answer_schema_allows_only_the_spans():
    schema = answer_draft_schema([1], ["1,796.7", "Quaquux Troudyl", "yes", "no"])
    jsonschema.validate({"answer": "Quaquux Troudyl", "claims": [{"claim": "x", "step_id": 1}]}, schema)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({"answer": "Troudyl Quaquux", "claims": [{"claim": "x", "step_id": 1}]}, schema)
    free = answer_draft_schema([1])
    jsonschema.validate({"answer": "anything at all", "claims": [{"claim": "x", "step_id": 1}]}, free)


@pytest.mark.parametrize("mode", ["span", "free"])
def test_the_generator_sends_the_spans_in_span_mode(mode):
    reply = json.dumps({"answer": "1,796.7", "claims": [{"claim": "The annual revenue is 1,796.7 million dollars.", "step_id": 1}]})
    backend = ScriptedBackend([reply])
    view = [_search_item(1, ORG)]
    out = Generator(backend, ModelConfig(backend="scripted"), 2400, answer=mode).answer("What is the revenue?", view)
    assert out.text == "1,796.7" and out.citations[0].step_id == 1
    answer_schema = backend.requests[0]["json_schema"]["properties"]["answer"]
    if mode == "span":
        assert answer_schema["enum"] == answer_spans(view)
    else:
        assert "enum" not in answer_schema


def test_span_is_the_default_and_free_is_configurable():
    assert Settings().generator.answer == "span"
    assert Settings(generator={"answer": "free"}).generator.answer == "free"
    with pytest.raises(ValueError):
        Settings(generator={"answer": "poem"})


@pytest.mark.parametrize("question, polar", [
    ("Is Lake Orvanne deeper than 200 metres?", True),
    ("For my briefing, is it the case that Brefem Grabran is employed by Gamaslairk Systems?", True),
    ("Could you confirm whether Vucourer Industries is led by Kurerk Liakepux? Please answer yes or no.", True),
    ("Were Thomas H. Ince and Joseph McGrath of the same nationality?", True),  # an initial is not a sentence end
    ("Is the founding year of the city in which Nequias Capox was born before 1900?", True),  # a relative 'which'
    ("Could you tell me the founding year of Shoziam?", False),  # a request, not a yes/no question
    ("Could you tell me whether Shecu Dynamics or Stouza Logistics has the higher headcount?", False),  # alternative
    ("For my briefing, between Queniatail Drone and Trodrin Harvester, which one has the higher retail price?", False),
    ("A series is written by someone born in what year?", False),
    ("Kim has 3 clients, but is talking to 5 more. How many clients will he have?", False),
])
def test_polar_questions(question, polar):
    assert polar_question(question) is polar


def test_a_yes_no_question_is_answered_yes_or_no():
    view = [_search_item(1, ORG)]
    assert answer_spans(view, question="Is Shequipar Foundry led by Quaquux Troudyl?") == ["yes", "no"]
    assert "Quaquux Troudyl" in answer_spans(view, question="Who leads Shequipar Foundry?")


def test_claims_first_quotes_the_evidence_before_the_answer():
    schema = answer_draft_schema([1], ["1,796.7", "yes", "no"], claims_first=True)
    assert list(schema["properties"]) == schema["required"] == ["claims", "answer"]
    assert list(answer_draft_schema([1])["properties"]) == ["answer", "claims"]  # the default order
    reply = json.dumps({"claims": [{"claim": "The annual revenue is 1,796.7 million dollars.", "step_id": 1}], "answer": "1,796.7"})
    backend = ScriptedBackend([reply])
    config = ModelConfig(backend="scripted", demos=True)
    out = Generator(backend, config, 2400, answer="span", claims_first=True).answer("What is the revenue?", [_search_item(1, ORG)])
    assert out.text == "1,796.7" and out.citations[0].step_id == 1
    request = backend.requests[0]
    assert list(request["json_schema"]["properties"]) == ["claims", "answer"]
    worked = [m["content"] for m in request["messages"] if m["role"] == "assistant"]
    assert worked and all(w.startswith('{"claims"') for w in worked)  # the worked replies in the same order
    assert "quote the evidence sentence" in request["messages"][0]["content"]
    assert Settings().generator.claims_first is True  # the default since the replay measured it
    # a yes/no question keeps the answer first
    polar = ScriptedBackend([json.dumps({"answer": "yes", "claims": [{"claim": "It was founded in 1984.", "step_id": 1}]})])
    out = Generator(polar, config, 2400, answer="span", claims_first=True).answer("Was it founded in 1984?", [_search_item(1, ORG)])
    assert out.text == "yes" and list(polar.requests[0]["json_schema"]["properties"]) == ["answer", "claims"]
