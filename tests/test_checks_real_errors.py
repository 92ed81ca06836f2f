"""The checks for errors real Planners make (tasks/checks/quantities.py, tasks/checks/attribute.py), on the
programs and claims a run of the embedded Qwen2.5-Coder-0.5B produced, each next to a correct counterpart."""

import pytest

from tasks.checks.quantities import stated_quantities
from tasks.contracts import FailureType
from tests.test_verifier import FakeRerun, claim, passage, python, rejected_by, search, verifier

KM = "Ann runs 27 km on Monday, twice as far on Tuesday, and 15 km less than Tuesday on Wednesday. How far in total?"
CHANGE = ("A family of 5 adults and 8 children visits a museum. Tickets cost $13 per adult and $7 per child. They pay "
          "with three $50 notes. How much change do they get?")
POETRY = ("A library has 1260 books. 35% of them are novels and three-quarters of the rest are poetry. How many poetry "
          "books are there?")
GROUPS = "A class of 30 students works in groups of 4, with one larger group. How many groups are there?"
SELLA = "What is the highest summit of the hills where the river Sella rises?"


def _run(code: str, stdout: str, question: str, **kw):
    p, r = python(code=code, stdout=stdout, sub_goal="compute the answer")
    return verifier(rerun=FakeRerun(stdout), **kw).verify(p, r, [], question)  # the sandbox re-run prints the same


def test_the_question_states_its_quantities_in_digits_percent_and_words():
    assert [raw for raw, _ in stated_quantities(KM)] == ["27", "15", "twice"]
    poetry = dict(stated_quantities(POETRY))
    assert poetry["three-quarters"] == [{"0.75"}, {"3", "4"}] and {"0.35"} in poetry["35"]


@pytest.mark.parametrize("code, stdout, question, ftype", [
    ("print((3 * 13) + (8 * 7) - (3 * 50) - (8 * 50))", "-455\n", CHANGE, FailureType.ignored_quantity),  # 5 adults
    ("print(5 * 13 + 8 * 7 - 150)", "-29\n", CHANGE, FailureType.implausible_value),  # all used, change < 0
    ("print(1260 * 0.35 / 3 - 1260)", "-1113.0\n", POETRY, FailureType.ignored_quantity),  # three-quarters unused
    ("print('Sella', '10000')", "Sella 10000\n", SELLA, FailureType.unsupported),  # a number from nowhere
    ("print(30 / 4)", "7.5\n", GROUPS, FailureType.implausible_value),  # half a group
])
def test_a_value_the_question_rules_out_is_rejected(code, stdout, question, ftype):
    v = _run(code, stdout, question)
    assert not v.accepted and v.failure_type is ftype, v.reason
    assert [c.name for c in v.checks][-1] in ("quantities", "recomputation")


@pytest.mark.parametrize("code, stdout, question", [
    ("print(150 - (5 * 13 + 8 * 7))", "29\n", CHANGE),
    ("print(1260 * (1 - 0.35) * 3 / 4)", "614.25\n", POETRY.replace("How many poetry books", "What share")),
    ("monday = 27\ntuesday = monday * 2\nwednesday = tuesday - 15\nprint(monday + tuesday + wednesday)", "120\n", KM),
    ("print(3 * 50 - 5 * 13 - 8 * 7)", "29\n", CHANGE),
    ("tunas = [56, 46, 26]\nprint(sum(tunas) * 0.50)", "64.0\n",  # '3 tunas' is the list's length
     "Deandre caught 3 tunas weighing 56, 46 and 26 kilograms. At $0.50 a kilogram, how much does he earn?"),
])
def test_the_correct_counterparts_pass(code, stdout, question):
    v = _run(code, stdout, question)
    assert v.accepted, v.reason
    assert next(c for c in v.checks if c.name == "quantities").passed


def test_a_quantity_an_accepted_earlier_step_used_counts_as_used():
    from tests.test_verifier import memory_item
    from tasks.contracts import MemoryItem

    first = MemoryItem(id="step-1", step_id=1, status="accepted", content={"stdout": "54\n"}, args={"code": "print(27 * 2)"},
                       provenance={"tool": "python", "step_id": 1})
    p, r = python(code="print(27 + 54 + 39)", stdout="120\n", sub_goal="add the three days", step_id=2)
    assert memory_item  # the search helper is imported for symmetry with the other tests
    v = verifier(rerun=FakeRerun("120\n")).verify(p, r, [first], KM.replace("15 km less", "39 km in all"))
    assert next(c for c in v.checks if c.name == "quantities").passed, v.reason


def test_a_claim_about_the_wrong_property_of_the_right_person_is_rejected():
    text = "Lionel Acre is the director of Vobryx Collective. Vobryx Collective employs 2,300 people."
    p, r = search(passages=[passage(text=text, title="Vobryx Collective")],
                  claim=claim(value="Lionel Acre", subject="Vobryx Collective", attribute="founder"))
    rejected_by(verifier().verify(p, r, []), "attribute", FailureType.wrong_attribute)
    # the same passage, the property it states: accepted
    p, r = search(passages=[passage(text=text, title="Vobryx Collective")],
                  claim=claim(value="Lionel Acre", subject="Vobryx Collective", attribute="director"))
    assert verifier().verify(p, r, []).accepted
    # a property no family names, or a sentence naming no property: left to the other checks
    p, r = search(passages=[passage(text="Lionel Acre is an American.", title="Lionel Acre")],
                  claim=claim(value="American", subject="Lionel Acre", attribute="nationality"))
    assert next(c for c in verifier().verify(p, r, []).checks if c.name == "attribute").passed


# --------------------------------------------------------------------------- independent recomputation


def _hybrid(reply: str | list[str], **values):
    """A hybrid Verifier whose model (scripted) writes `reply` as its own program (a list: one per program, in
    order); programs run in the real sandbox. One program, and it alone decides, unless `values` say otherwise."""
    from infra.runtime.settings import ModelConfig
    from tasks.modules import recompute
    from tasks.modules.verifier import Verifier
    from tests.test_verifier import settings

    recompute._CACHE.clear()
    script = [reply] if isinstance(reply, str) else reply
    judge = ModelConfig(backend="scripted", model="scripted-verifier", script=script).model_dump()
    values = {"verifier.independent_samples": 1, "verifier.independent_quorum": 1, **values}
    return Verifier(settings(**{"models.verifier": judge, **values}), mode="hybrid")


def _step(code: str, stdout: str):
    return python(code=code, stdout=stdout, sub_goal="compute the total distance")


OWN = "```python\nmonday = 27\ntuesday = 2 * monday\nwednesday = tuesday - 15\nprint(monday + tuesday + wednesday)\n```"


def test_an_independent_program_catches_the_operation_every_operand_check_lets_through():
    v = _hybrid(OWN)
    verdict = v.verify(*_step("print(27 + 2 * 15 - 15)", "42\n"), [], KM)
    assert not verdict.accepted and verdict.failure_type is FailureType.recomputation
    assert "120" in verdict.reason and "42" in verdict.reason  # both values go back to the Planner
    assert verdict.checks[-1].name == "independent" and verdict.usage is not None and verdict.usage.tokens_out > 0
    right = v.verify(*_step("t = 2 * 27\nprint(27 + t + t - 15)", "120\n"), [], KM)  # the same question: no second call
    assert right.accepted and right.checks[-1].name == "independent" and right.checks[-1].passed
    assert right.usage is None and v.recomputer.backend.calls == 1


@pytest.mark.parametrize("reply", ["I cannot solve this.", "```python\nprint(undefined_name)\n```", "```python\npass\n```"])
def test_an_independent_program_that_fails_decides_nothing(reply):
    verdict = _hybrid(reply).verify(*_step("print(27 + 2 * 15 - 15)", "42\n"), [], KM)
    assert verdict.accepted and next(c for c in verdict.checks if c.name == "independent").passed


def test_it_runs_only_for_word_problems_with_a_model_and_when_enabled():
    lookup = "What is the highest summit of the Sella hills?"
    verdict = _hybrid(OWN).verify(*_step("print(1 + 1)", "2\n"), [], lookup)
    assert "independent" not in [c.name for c in verdict.checks]
    assert _hybrid(OWN, **{"verifier.independent": False}).recomputer is None
    assert verifier().recomputer is None  # deterministic: no model, no recomputation


def _program(total: str) -> str:
    """An independent program for KM that uses every stated quantity and prints `total` of m (Monday) and t."""
    return f"```python\nm = 27\nt = 2 * m\nprint({total})\n```"


WRONG = "print(27 + 2 * 15 - 15)"  # 42; the answer is 120


def test_a_quorum_of_independent_programs_must_agree_on_another_value_to_reject():
    three = {"verifier.independent_samples": 3, "verifier.independent_quorum": 2}
    # 96, 120, 120: two agree on 120 -> the step's 42 is rejected after three programs
    v = _hybrid([_program("m + t + 15"), OWN, OWN], **three)
    verdict = v.verify(*_step(WRONG, "42\n"), [], KM)
    assert not verdict.accepted and verdict.failure_type is FailureType.recomputation and "120" in verdict.reason
    assert verdict.usage.calls == 3 and v.recomputer.backend.calls == 3
    # 96, 66, 84: no two agree -> nothing decided, the step passes
    v = _hybrid([_program("m + t + 15"), _program("m + t - 15"), _program("(m + 15) * 2")], **three)
    verdict = v.verify(*_step(WRONG, "42\n"), [], KM)
    assert verdict.accepted and "nothing decided" in verdict.checks[-1].detail


def test_a_program_that_reproduces_the_step_passes_it_and_no_more_are_drawn():
    v = _hybrid([OWN, _program("m + t + 15"), _program("m + t + 15")], **{"verifier.independent_samples": 3,
                                                           "verifier.independent_quorum": 2})
    right = v.verify(*_step("t = 2 * 27\nprint(27 + t + t - 15)", "120\n"), [], KM)
    assert right.accepted and right.usage.calls == 1 and v.recomputer.backend.calls == 1
    # a later wrong step of the same question reuses the first program and draws only what it still needs
    wrong = v.verify(*_step(WRONG, "42\n"), [], KM)
    assert not wrong.accepted and "96" in wrong.reason and wrong.usage.calls == 2 and v.recomputer.backend.calls == 3


def test_programs_that_cannot_make_a_quorum_are_not_drawn():
    # quorum 3 of 3: the first program fails, so the other two cannot make three -> one call, nothing decided
    v = _hybrid(["I cannot solve this.", OWN, OWN], **{"verifier.independent_samples": 3,
                                                       "verifier.independent_quorum": 3})
    verdict = v.verify(*_step(WRONG, "42\n"), [], KM)
    assert verdict.accepted and v.recomputer.backend.calls == 1


def test_a_quorum_above_the_samples_is_refused_with_the_fix():
    from infra.runtime.settings import ConfigError, load_settings

    with pytest.raises(ConfigError, match="independent_quorum .*raise the samples or lower the quorum"):
        load_settings(None, ["verifier.independent_samples=2", "verifier.independent_quorum=3"])


def test_an_independent_program_that_fails_the_step_checks_is_no_witness():
    negative = "```python\nadults = 5 * 13\nchildren = 8 * 7\nprint(adults + children - 3 * 50)\n```"  # change < 0
    verdict = _hybrid(negative).verify(*_step("print(3 * 50 - 5 * 13 - 8 * 7)", "29\n"), [], CHANGE)
    assert verdict.accepted, verdict.reason
    assert "fails its own checks" in next(c for c in verdict.checks if c.name == "independent").detail


def test_a_question_written_as_the_attribute_is_not_a_property():
    text = "Virginia Woolf, born Adeline Virginia Stephen, was an English author."
    p, r = search(passages=[passage(text=text, title="Virginia Woolf")],
                  claim=claim(value="Virginia Woolf", subject="Virginia Woolf",
                              attribute="Who was born earlier, Emma Bull or Virginia Woolf?"))
    assert next(c for c in verifier().verify(p, r, []).checks if c.name == "attribute").detail.startswith("n/a")


@pytest.mark.parametrize("code, stdout, question", [
    ("maker = 'Kiamishal Filter'\nprint(maker)", "Kiamishal Filter\n", "Find the maker of Kiamishal Filter."),
    ("revenue = 1000000 * 3 / 365\nprint(revenue / 365)", "22.51829611559392\n",
     "What is the annual revenue per employee of Babre Dynamics in dollars?"),
])
def test_a_program_cannot_look_a_fact_up(code, stdout, question):
    v = _run(code, stdout, question)
    assert not v.accepted and v.failure_type is FailureType.unsupported, v.reason


def test_a_program_may_restate_accepted_evidence():
    from tasks.contracts import MemoryItem

    found = MemoryItem(id="step-1", step_id=1, status="accepted", provenance={"tool": "search", "step_id": 1},
                       content={"passages": [{"doc_id": "d1", "title": "Babre", "text": "Babre Dynamics employs 1,200 people "
                                              "and reported revenue of 480 million dollars."}]})
    p, r = python(code="print(480 * 1000000 / 1200)", stdout="400000.0\n", step_id=2)
    assert verifier(rerun=FakeRerun("400000.0\n")).verify(p, r, [found], "What is the revenue per employee of Babre "
                                                          "Dynamics in dollars?").accepted
    p, r = python(code="print('1,200 people')", stdout="1,200 people\n", step_id=2)
    assert verifier(rerun=FakeRerun("1,200 people\n")).verify(p, r, [found], "How many people does Babre employ?").accepted


def test_how_to_round_is_not_a_quantity():
    q = "Find the average of 5077, 7903 and 9662, rounded to two decimal places."
    assert [raw for raw, _ in stated_quantities(q)] == ["5077", "7903", "9662"]
    v = _run("numbers = [5077, 7903, 9662]\naverage = sum(numbers) / len(numbers)\nprint(f'{average:.2f}')", "7547.33\n", q)
    assert v.accepted, v.reason


def test_a_question_that_states_only_zero_or_one_still_states_numbers():
    v = _run("print(1 * 1)", "1\n", "Run: print(1 * 1)")
    assert v.accepted, v.reason


# Programs from the tables' GSM8K runs (Qwen2.5-Coder-0.5B) that the checks let through before the printed value's
# dataflow was followed, each with a correct counterpart.
JILL = ("Jill gets paid $20 per hour to teach and $30 to be a cheerleading coach. If she works 50 weeks a year, 35 "
        "hours a week as a teacher and 15 hours a week as a coach, what's her annual salary?")
LEMON = ("Carlos is planting a lemon tree. The tree will cost $90 to plant. Each year it will grow 7 lemons, which he "
         "can sell for $1.5 each. It costs $3 a year to water and feed the tree. How many years will it take before he "
         "starts earning money on the lemon tree?")
DVDS = ("Billy sells DVDs. He has 8 customers on Tuesday. His first 3 customers buy one DVD each.  His next 2 customers "
        "buy 2 DVDs each.  His last 3 customers don't buy any DVDs. How many DVDs did Billy sell on Tuesday?")


def test_a_quantity_written_down_but_never_reaching_the_print_is_not_used():
    code = ("hourly_wage_teacher = 20\nhourly_wage_coach = 30\nweeks = 50\nhours_teacher = 35\nhours_coach = 15\n"
            "annual_salary = hourly_wage_teacher * weeks + hourly_wage_coach * weeks\nprint(annual_salary)")
    v = _run(code, "2500\n", JILL)
    assert not v.accepted and v.failure_type is FailureType.ignored_quantity, v.reason
    assert "never reaches what the program prints" in v.reason
    fixed = code.replace("hourly_wage_teacher * weeks + hourly_wage_coach * weeks",
                         "(hourly_wage_teacher * hours_teacher + hourly_wage_coach * hours_coach) * weeks")
    assert _run(fixed, "57500\n", JILL).accepted


def test_a_counter_starting_at_0_or_stepping_by_1_does_not_stand_for_every_quantity():
    # 0 and 1 are a - a and a / a for any stated a: they used to mark every quantity 'used already combined'
    code = "total_cost = 90\nyears = 0\nwhile total_cost > 0:\n    total_cost -= 7 * 1.5\n    years += 1\nprint(years)"
    v = _run(code, "9\n", LEMON)
    assert not v.accepted and v.failure_type is FailureType.ignored_quantity and "'3'" in v.reason, v.reason
    fixed = code.replace("7 * 1.5", "(7 * 1.5 - 3)")
    assert _run(fixed, "13\n", LEMON).accepted


def test_percent_more_or_less_and_a_total_of_its_parts_are_used():
    v = _run("print(3 * 1 + 2 * 2 + 3 * 0)", "7\n", DVDS)  # 8 customers = 3 + 2 + 3
    assert v.accepted, v.reason
    less = "A shop sold 60 cakes on Monday and 30% fewer on Tuesday. How many cakes did it sell in total?"
    assert _run("print(60 + 60 * 0.70)", "102.0\n", less).accepted
    pension = "A pension of $50,000 a year is cut by 5% a year for 2 years. What is it after the cuts?"
    assert _run("print(50000 * 0.95 ** 2)", "45125.0\n", pension).accepted  # the 5 in 50,000 is not the 5%


def test_a_dollar_amount_grouped_with_spaces_is_one_quantity():
    q = "Her budget is $400 000. A house sells for $350 000 plus a 5% fee. By how much is she over or under budget?"
    assert [raw for raw, _ in stated_quantities(q)] == ["400000", "350000", "5"]
    assert _run("print(400000 - 350000 * 1.05)", "32500.0\n", q).accepted


HENRY = ("Henry made two stops during his 60-mile bike trip. He first stopped after 20 miles. His second stop was 15 "
         "miles before the end of the trip. How many miles did he travel between his first and second stops?")


def test_a_count_the_question_spells_out_item_by_item_is_not_an_operand():
    assert _run("distance = 60 - 20 - 15\nprint(distance)", "25\n", HENRY).accepted  # two stops: first, second
    flowers = ("Artie sells three kinds of flowers: marigolds, petunias and begonias. He sells 12 marigolds at $2.74 "
               "each and 9 petunias at $1.87 each. How much does he earn from them?")
    assert _run("print(12 * 2.74 + 9 * 1.87)", "49.71\n", flowers).accepted
    # a count that is an operand stays one: nothing lists the four weeks
    weeks = "Ann saves $12 a week for four weeks and then spends $10. How much is left?"
    v = _run("print(12 - 10)", "2\n", weeks)
    assert not v.accepted and v.failure_type is FailureType.ignored_quantity, v.reason
