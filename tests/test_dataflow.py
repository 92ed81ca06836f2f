"""printed_slice (tasks/checks/dataflow.py): the statements a program's printed value depends on."""

from tasks.checks.dataflow import printed_slice


def test_an_assignment_the_print_never_reads_is_cut():
    code = "a = 20\nb = 35\nc = 50\nprint(a * c)"
    assert printed_slice(code) == "a = 20\nc = 50\nprint(a * c)"


def test_loops_augmented_assignments_and_in_place_changes_are_followed():
    code = "total = 0\nfor i in range(3):\n    total += 2\nxs = [1]\nxs.append(7)\nunused = 9\nprint(total, sum(xs))"
    kept = printed_slice(code)
    assert "range(3)" in kept and "xs.append(7)" in kept and "unused" not in kept


def test_a_name_needed_by_a_later_loop_keeps_its_definition():
    code = "rate = 4\nn = 0\nwhile n < 10:\n    n += rate\nprint(n)"
    assert "rate = 4" in printed_slice(code)


def test_a_program_that_prints_nothing_is_sliced_from_its_last_statement():
    assert printed_slice("a = 3\nb = 4\nc = a * 5") == "a = 3\nc = a * 5"


def test_what_cannot_be_followed_safely_is_not_sliced():
    assert printed_slice("def f(x):\n    return x * 2\nprint(f(3))") is None
    assert printed_slice("import math\nprint(math.sqrt(16))") is None
    assert printed_slice("print(") is None
    assert printed_slice("for i in range(3):\n    pass") is None
