"""The answer gate (tasks/checks/coverage.py): an answer step waits until the accepted search evidence states
every property and name the question asks about; the loop refuses at most verifier.answer_gate times."""

import json

import pytest

import infra.models as models
from flows.research import DIRECT_STEPS, research
from infra.models import clear_backend_cache
from tasks.checks.attribute import families
from tasks.checks.coverage import check_answer_coverage, names_in, question_names, statements
from infra.runtime.settings import load_settings
from tasks.contracts import AnswerStatus, FailureType, MemoryItem, MemoryStatus, Provenance, Question, Role, StopReason
from tasks.modules.demos import GATED
from tasks.modules.prompts import planner_messages
from tasks.modules.tools import tool_cards
from tests.scripted import answer, plan, scripted_settings

TWO_HOP = "I need the number of people living in the home city of Velt Corporation. What is it?"
CORPUS = [
    {"id": "c1", "title": "Velt Corporation", "text": "Velt Corporation has 5,210 employees. "
     "The headquarters of Velt Corporation are in Dydan.", "published_at": "2024-01-10"},
    {"id": "c2", "title": "Dydan", "text": "Dydan has a population of 48,200.", "published_at": "2024-02-01"},
]


def _search_item(step_id: int, *texts: str) -> MemoryItem:
    return MemoryItem(id=f"step-{step_id}", step_id=step_id, status=MemoryStatus.accepted,
                      provenance=Provenance(tool="search", step_id=step_id),
                      content={"passages": [{"doc_id": f"d{i}", "title": "", "text": t} for i, t in enumerate(texts)]})


def _python_item(step_id: int) -> MemoryItem:
    return MemoryItem(id=f"step-{step_id}", step_id=step_id, status=MemoryStatus.accepted,
                      provenance=Provenance(tool="python", step_id=step_id), content={"stdout": "96\n", "exit_code": 0})


def test_names_are_the_capitalised_phrases_without_the_question_grammar():
    assert names_in("Could you tell me whether Zymawond Partners or Lequon Systems has the higher revenue?") == [
        "Zymawond Partners", "Lequon Systems"]
    assert names_in("Is Sethux Glider made by Trendpon Collective? Please answer yes or no.") == [
        "Sethux Glider", "Trendpon Collective"]
    assert names_in("Janet's ducks lay 16 eggs per day. She eats three.") == ["Janet's"]
    assert names_in("what is the population of the town?") == []


def test_a_lone_capitalised_word_opening_a_question_is_not_a_name():
    # seen in a real run: "According to ..." was asked for as a name, and the gate refused a right answer
    assert question_names("According to the records, in which year was the employer of Drathim Wojepex founded?") == [
        "Drathim Wojepex"]
    assert question_names("Lequon Systems: how many employees? Answer with a number.") == ["Lequon Systems"]


def test_employees_and_employer_are_different_properties():
    # they share a five-letter stem; the listed words decide first
    assert families("The number of employees at Velt is 5,210.") == {"employees"}
    assert families("the organisation that employs Ama Osei") == {"employer"}
    assert families("the headcount of Velt") == {"employees"}


def test_the_first_hop_alone_does_not_cover_the_population_of_the_home_city():
    first = _search_item(1, CORPUS[0]["text"])
    gap = check_answer_coverage(TWO_HOP, [first])
    assert gap.failure is not None and gap.failure.type is FailureType.incomplete_evidence
    assert "population" in gap.failure.reason
    assert check_answer_coverage(TWO_HOP, [first, _search_item(2, CORPUS[1]["text"])]).failure is None


def test_the_gap_comes_with_the_search_that_closes_it():
    gap = check_answer_coverage(TWO_HOP, [_search_item(1, CORPUS[0]["text"])])
    assert 'next step: search "Dydan population"' in gap.failure.reason  # Velt's home city, from its passage


LEADS = "Could you tell me the city in which the person who leads the company that produces Sethux Glider was born?"
MAKER = "Sethux Glider is a handheld scanner. Sethux Glider is made by Velt Corporation."
VELT = "Velt Corporation is led by chief executive Ama Osei. Velt Corporation has 5,210 employees."
COLLEAGUE = "Kofi Mensah works for Velt Corporation. Kofi Mensah was born in the city of Benoul."


def test_a_chain_property_counts_only_for_a_name_on_the_chain():
    # another person's birthplace in the same search result is not the chief executive's
    gap = check_answer_coverage(LEADS, [_search_item(1, MAKER, VELT, COLLEAGUE)])
    assert gap.failure is not None and "the birthplace" in gap.failure.reason
    assert 'search "Ama Osei birthplace"' in gap.failure.reason
    found = _search_item(2, "Ama Osei was born in the city of Dydan.")
    assert check_answer_coverage(LEADS, [_search_item(1, MAKER, VELT, COLLEAGUE), found]).failure is None


def test_the_chain_starts_at_the_first_hop():
    gap = check_answer_coverage(LEADS, [_search_item(1, MAKER)])
    assert 'search "Velt Corporation chief executive"' in gap.failure.reason


def test_a_passage_title_names_what_its_sentences_are_about():
    said = statements([_search_item(1, "He was born in the city of Dydan.")])
    assert said is not None and said[0].names == frozenset({"Dydan"})
    titled = MemoryItem(id="step-1", step_id=1, status=MemoryStatus.accepted, provenance=Provenance(tool="search", step_id=1),
                        content={"passages": [{"doc_id": "p", "title": "Ama Osei", "text": "He was born in Dydan."}]})
    assert statements([titled])[0].names == frozenset({"Ama Osei", "Dydan"})
    assert statements([titled])[0].families == frozenset({"birthplace"})


def test_a_comparison_needs_both_names_in_the_evidence():
    q = "Between Velt Corporation and Orlan Works, which has the higher headcount?"
    one = _search_item(1, "Velt Corporation has 5,210 employees.")
    gap = check_answer_coverage(q, [one])
    assert gap.failure is not None and "Orlan Works" in gap.failure.reason and "the employees" not in gap.failure.reason
    assert 'search "Orlan Works employees"' in gap.failure.reason
    assert check_answer_coverage(q, [one, _search_item(2, "Orlan Works has 800 employees.")]).failure is None


@pytest.mark.parametrize("view", [[], [_python_item(1)], [_search_item(1, "Velt Corporation has 5,210 employees."),
                                                          _python_item(2)]])
def test_the_gate_stays_out_without_evidence_or_with_program_evidence(view):
    assert check_answer_coverage(TWO_HOP, view).failure is None


@pytest.fixture
def two_hop_corpus(tmp_path):
    path = tmp_path / "corpus.jsonl"
    path.write_text("".join(json.dumps(d) + "\n" for d in CORPUS))
    return path


def _run(settings):
    clear_backend_cache()
    return research(Question(id="q", question=TWO_HOP), settings, run_id="test", steps=DIRECT_STEPS)


def test_the_gate_sends_an_early_answer_back_with_what_is_missing(two_hop_corpus):
    script = [plan("search", "Velt Corporation headquarters"), plan("answer"), plan("search", "Dydan population"),
              plan("answer")]
    s = scripted_settings(script, [answer("48,200", 3)], corpus=two_hop_corpus, **{"verifier.answer_gate": 2})
    out = _run(s)
    assert out.answer.stop_reason is StopReason.answered and out.answer.status is AnswerStatus.answered
    assert [i.step_id for i in out.memory.accepted_view()] == [1, 3]  # both hops are evidence; step 2 was refused
    planner = [r for r in out.records if r.role is Role.planner]
    assert [r.failure_type for r in planner] == [None, FailureType.incomplete_evidence, None, None]
    assert out.answer.cost[Role.planner].rejections == 1
    requests = models.build_backend(s.models.planner).requests
    third_prompt = requests[2]["messages"][-1]["content"]
    assert "rejected (incomplete_evidence)" in third_prompt and "population" in third_prompt
    tools = [r["json_schema"]["properties"]["tool"]["enum"] for r in requests]
    assert "answer" in tools[1] and "answer" not in tools[2] and "answer" in tools[3]  # the turn after a refusal looks up


def test_the_turn_after_a_refusal_is_shown_a_refusal_followed_by_its_named_search():
    view = [_search_item(1, CORPUS[0]["text"])]
    cards = tool_cards(load_settings(None, None))

    def demos(allow_answer):
        messages = planner_messages(TWO_HOP, cards, view, None, 2400, demos=True, allow_answer=allow_answer)
        return messages[1:-1]

    assert {json.loads(m["content"])["tool"] for m in demos(True) if m["role"] == "assistant"} == {"answer"}
    user, reply = demos(False)
    assert "rejected (incomplete_evidence)" in user["content"] and 'search "Lune Harbour population"' in user["content"]
    assert json.loads(reply["content"])["tool"] == "search"
    assert json.loads(reply["content"])["tool_input"] == "Lune Harbour population"


def test_the_worked_refusal_is_what_the_gate_says_for_its_evidence():
    case, step = GATED.case, GATED.step
    gap = check_answer_coverage(case.question, case.view(step))
    assert gap.failure is not None and gap.failure.type is FailureType.incomplete_evidence
    assert gap.failure.reason == GATED.reason
    assert check_answer_coverage(case.question, case.view(step + 1)).failure is None  # the named search closes the gap


def test_without_the_gate_the_planner_answers_after_the_first_hop(two_hop_corpus):
    script = [plan("search", "Velt Corporation headquarters"), plan("answer")]
    out = _run(scripted_settings(script, [answer("5,210", 1)], corpus=two_hop_corpus))  # answer_gate defaults to 0
    assert out.answer.stop_reason is StopReason.answered
    assert out.answer.cost[Role.planner].calls == 2 and out.answer.cost[Role.planner].rejections == 0


def test_the_gate_refuses_at_most_its_setting_then_lets_the_planner_answer(two_hop_corpus):
    script = [plan("search", "Velt Corporation headquarters"), plan("answer"), plan("answer")]
    s = scripted_settings(script, [answer("5,210", 1)], corpus=two_hop_corpus, **{"verifier.answer_gate": 1})
    out = _run(s)
    assert out.answer.stop_reason is StopReason.answered
    assert out.answer.cost[Role.planner].calls == 3 and out.answer.cost[Role.planner].rejections == 1
