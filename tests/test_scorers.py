"""Scorers: each one's right and wrong cases, the tricky forms, and hostile input that must be refused safely."""

from __future__ import annotations

import time

import pytest

from tasks.eval.scorers import (
    BENCHMARK_ANSWER_TYPES,
    Score,
    accuracy,
    check_game24,
    exact_match,
    extract_final_number,
    math_equivalent,
    mean_f1,
    normalize_answer,
    numeric_match,
    score,
    score_question,
    token_f1,
    yes_no_match,
)

# ------------------------------------------------------------------------------- text QA


def test_squad_normalisation():
    assert normalize_answer("The  Eiffel-Tower!") == "eiffeltower"
    assert normalize_answer("An Apple, a day") == "apple day"
    assert exact_match("the Chief of Protocol.", "Chief of Protocol")
    assert not exact_match("Chief", "Chief of Protocol")


def test_token_f1_partial_and_zero():
    # 6 tokens after normalisation ("the" dropped), 3 shared: P = 1/2, R = 1
    assert token_f1("Chief of Protocol of the United States", "Chief of Protocol") == pytest.approx(2 / 3)
    assert token_f1("Paris", "London") == 0.0
    # HotpotQA's rule: yes/no answers get no partial credit
    assert token_f1("no", "yes") == 0.0 and token_f1("yes", "yes") == 1.0


def test_text_best_over_aliases():
    target = {"answer": "G. Stanley Hall", "aliases": ["Stanley Hall"]}
    s = score("musique", "Stanley Hall", target)
    assert s.correct and s.value == 1.0
    s = score("musique", "Hall", target)
    assert not s.correct and 0 < s.value < 1
    assert score("hotpotqa", "The answer is Paris.", "paris").correct
    assert not score("bamboogle", "James Monroe", "james madison").correct


# ------------------------------------------------------------------------------- numbers


@pytest.mark.parametrize("prediction, target", [
    ("The total is 1,000 dollars.", "1000"),
    ("1000", "1,000"),
    ("She makes $18 every day.", "18"),
    ("18.0", "18"),
    ("18.00", 18),
    ("The answer is 18 apples, not 20.", "18"),
    ("It goes up by 50%.", "50"),
    (r"\boxed{\frac{1}{2}}", "0.5"),
    ("x = 3/4", "0.75"),
    ("She makes 9 * 2 = $18.\n#### 18", "18"),
    ("It drops to -5 degrees.", "-5"),
    ("Then 5-3 = 2", "2"),
    ("025", "25"),
    ("27", 27.0),
    ("1,234,567.5", "1234567.5"),
])
def test_numeric_equivalence_true(prediction, target):
    s = score("gsm8k", prediction, target)
    assert s.correct, s.detail
    assert s.value == 1.0


@pytest.mark.parametrize("prediction, target", [
    ("I think it is 17", "18"),
    ("no idea", "18"),
    ("18.5", "18"),
    ("1/0", "0"),
    ("-18", "18"),
    ("The answer is 20, not 18", "18"),
])
def test_numeric_equivalence_false(prediction, target):
    s = score("aime24", prediction, target)
    assert not s.correct, s.detail
    assert s.value == 0.0


def test_final_number_extraction_prefers_marked_answer():
    assert extract_final_number("Step 1: 4+5=9. Final answer: 12. Check: 3")[0] == 12
    assert extract_final_number("4 + 5 = 9 and 9 + 3 = 12")[0] == 12
    assert extract_final_number("nothing here") is None


def test_numeric_tolerance_helper():
    assert numeric_match("about 3.14159", "3.1416", rel_tol=1e-4)
    assert not numeric_match("about 3.14159", "3.1416")
    assert numeric_match("12.34 million", {"answer": "12.3", "decimals": 1})
    assert numeric_match("0.3334", "1/3", abs_tol=1e-3)


def test_yes_no_helper():
    assert yes_no_match("Yes, it does.", "yes")
    assert yes_no_match("That is false.", "no")
    assert not yes_no_match("No.", "yes")
    assert not yes_no_match("maybe", "yes")


# ------------------------------------------------------------------------------- game of 24


@pytest.mark.parametrize("expr, numbers", [
    ("(1+1+1)×8", [1, 1, 1, 8]),
    ("(1 + 1 + 1) * 8", [8, 1, 1, 1]),
    ("8/(3-8/3)", [3, 3, 8, 8]),  # exact: in floats this is 23.999999999999996
    ("6 ÷ (1 − 3÷4)", [6, 1, 3, 4]),
    ("4/(1-5/6)", [4, 1, 5, 6]),
])
def test_game24_valid(expr, numbers):
    ok, why = check_game24(expr, numbers)
    assert ok, why


@pytest.mark.parametrize("expr, numbers, reason", [
    ("(1+1)*(1+8)", [1, 1, 1, 8], "equals 18"),
    ("8*3", [1, 1, 1, 8], "exactly once"),  # uses 3, leaves numbers out
    ("(4+4)*(10-4)/2", [4, 4, 10, 2], "exactly once"),  # uses 4 three times
    ("6*4*1", [6, 4, 1, 1], "exactly once"),  # leaves a 1 out
    ("(1-1)/(1-1)*24", [1, 1, 1, 24], "division by zero"),
    ("3**3-3", [3, 3, 3, 3], "only"),
    ("8//3*9", [8, 3, 9, 1], "only"),
    ("1+1+1+8", [1, 1, 1, 8], "equals 11"),
    ("2.5*8+4", [2, 8, 4, 1], "only"),
    ("", [1, 2, 3, 4], "empty"),
])
def test_game24_invalid(expr, numbers, reason):
    ok, why = check_game24(expr, numbers)
    assert not ok
    assert reason in why


def test_game24_injection_is_refused_without_running(tmp_path):
    marker = tmp_path / "pwned"
    for payload in (f"__import__('pathlib').Path('{marker}').touch()",
                    "__import__('os').system('touch " + str(marker) + "')",
                    "(lambda: 24)()", "[24][0]", "1+1+1+8 if True else 0"):
        ok, why = check_game24(payload, [1, 1, 1, 8])
        assert not ok and why
        s = score("game24", payload, [1, 1, 1, 8])
        assert not s.correct
    assert not marker.exists()


def test_game24_extracts_expression_from_free_text():
    assert score("game24", "Steps: 1+1=2 (left 1 2 8)...\nAnswer: (1 + 1 + 1) * 8 = 24", "1 1 1 8").correct
    assert score("game24", r"So \boxed{(1+1+1)\times 8}", {"numbers": [1, 1, 1, 8]}).correct
    assert not score("game24", "I cannot find one.", "1 1 1 8").correct
    assert not score("game24", "(1+1+1)×8", "1 1 8").correct  # a target that is not four numbers
    assert score("game24", "x" * 10_000, "1 1 1 8").correct is False


def test_game24_huge_input_is_cheap():
    t = time.perf_counter()
    ok, _ = check_game24("(" * 5000 + "1" + ")" * 5000, [1, 1, 1, 8])
    assert not ok and time.perf_counter() - t < 1.0


# ------------------------------------------------------------------------------- MATH


@pytest.mark.parametrize("prediction, gold", [
    (r"\boxed{\frac{1}{2}}", "0.5"),
    ("So the answer is $\\boxed{0.5}$.", r"\frac{1}{2}"),
    ("1/2", r"\frac12"),
    (r"\dfrac{14}{3}", r"\frac{14}{3}"),
    (r"3\sqrt{13}", r"\sqrt{117}"),
    ("11*sqrt(2)", r"11\sqrt2"),
    ("(3, pi/2)", r"\left( 3, \frac{\pi}{2} \right)"),
    ("90", r"90^\circ"),
    ("32348", r"\$32,\!348"),
    ("Evelyn", r"\text{Evelyn}"),
    ("C", r"\text{(C)}"),
    ("5", "x=5"),
    ("2x+3", "y = 2x + 3"),
    ("10x - 14y + 22z + 8 = 0", "5x - 7y + 11z + 4 = 0"),
    ("-2, 1", "1,-2"),
    (r"1+\sqrt{19}, 1-\sqrt{19}", r"1 \pm \sqrt{19}"),
    ("ab+2a+5b+10", "(a+5)(b+2)"),
    ("[-2,7]", r"x \in [-2,7]"),
    (r"(-\infty,0]", r"(-\infty, 0]"),
    ("6-5i", "6 - 5i"),
    (r"\begin{pmatrix} -\frac13 \\ \frac23 \end{pmatrix}", r"\begin{pmatrix} -1/3 \\ 2/3 \end{pmatrix}"),
    ("9/5", r"1\frac{4}{5}"),
    ("0.0000672", ".0000672"),
    ("10080", r"10,\!080"),
    ("4210_5", "4210_{5}"),
    ("5.4", r"5.4 \text{ cents}"),
    (r"\cot(x)", r"\cot x"),
    (r"(0,9)\cup(9,36)", r"(0,9) \cup (9,36)"),
])
def test_math_equivalent(prediction, gold):
    ok, how = math_equivalent(prediction, gold)
    assert ok, how


@pytest.mark.parametrize("prediction, gold", [
    ("4.6667", r"\frac{14}{3}"),
    ("(3, pi)", r"\left( 3, \frac{\pi}{2} \right)"),
    ("Bob", r"\text{Evelyn}"),
    ("6", "x=5"),
    ("1,2", "1,-2"),
    (r"1+\sqrt{19}", r"1 \pm \sqrt{19}"),
    ("ab+2a+5b+11", "(a+5)(b+2)"),
    ("(-2,7)", r"x \in [-2,7]"),
    ("6+5i", "6 - 5i"),
    ("10x - 14y + 22z + 9 = 0", "5x - 7y + 11z + 4 = 0"),
    ("52", "52_8"),
])
def test_math_not_equivalent(prediction, gold):
    ok, how = math_equivalent(prediction, gold)
    assert not ok, how


@pytest.mark.parametrize("hostile", [
    "2**(10**9)",
    "9**999**999",
    "__import__('os').system('echo hi')",
    "x" * 1000,
    "(" * 300 + "1" + ")" * 300,
    r"\frac{1}{0}",
    "().__class__.__bases__",
])
def test_math_hostile_input_refused_quickly(hostile):
    t = time.perf_counter()
    s = score("math500", hostile, "2")
    assert not s.correct
    assert time.perf_counter() - t < 2.0


# ------------------------------------------------------------------------------- the synthetic world


WORLD_Q = {
    "number": {"question": "What is the headcount of Velt?", "answer": "4210", "answer_number": 4210, "decimals": 0,
               "answer_type": "number", "expected_status": "answered", "options": None},
    "entity": {"question": "Who leads Velt?", "answer": "Ama Osei", "answer_number": None, "decimals": None,
               "answer_type": "entity", "expected_status": "answered", "options": None},
    "yes_no": {"question": "Is Velt older than Quorin?", "answer": "yes", "answer_number": None, "decimals": None,
               "answer_type": "yes_no", "expected_status": "answered", "options": None},
    "uncertain": {"question": "What is the headcount of Velt?", "answer": None, "answer_number": None,
                  "decimals": 0, "answer_type": "number", "expected_status": "uncertain", "options": None},
}


def test_world_scorer():
    assert score("world", "Velt has 4,210 employees.", WORLD_Q["number"]).correct
    assert not score("world", "Velt has 4,211 employees.", WORLD_Q["number"]).correct
    assert score("world", "It is led by Ama Osei.", WORLD_Q["entity"]).correct
    assert not score("world", "It is led by Ama.", WORLD_Q["entity"]).correct
    assert score("world", "Yes.", WORLD_Q["yes_no"]).correct
    assert not score("world", "No.", WORLD_Q["yes_no"]).correct
    assert score("world", "", WORLD_Q["uncertain"], status="uncertain").correct
    assert not score("world", "4210", WORLD_Q["uncertain"]).correct
    # generic answer types on the same records
    assert score("number", "4,210", WORLD_Q["number"]).correct
    assert score("yes_no", "yes", WORLD_Q["yes_no"]).correct


# ------------------------------------------------------------------------------- dispatch and metrics


def test_dispatch():
    assert set(BENCHMARK_ANSWER_TYPES) >= {"gsm8k", "game24", "hotpotqa", "musique", "bamboogle", "aime24", "amc23",
                                          "math500", "world"}
    with pytest.raises(KeyError, match="unknown benchmark"):
        score("no-such-benchmark", "1", "1")
    assert not score("gsm8k", None, "1").correct
    assert not score("hotpotqa", "   ", "x").correct
    q = {"benchmark": "gsm8k", "answer": "18", "answer_type": "number"}
    assert score_question(q, "#### 18").correct
    assert score_question({"answer": "Paris", "answer_type": "text"}, "paris").correct


def test_metrics():
    scores = [Score(True, 1.0, ""), Score(False, 0.5, ""), Score(False, 0.0, ""), Score(True, 1.0, "")]
    assert accuracy(scores) == 0.5
    assert mean_f1(scores) == pytest.approx(0.625)
    assert accuracy([]) == 0.0 and mean_f1([]) == 0.0
    assert accuracy([True, False]) == 0.5
