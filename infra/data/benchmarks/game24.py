"""Game of 24: AgentFlow's 300-puzzle test set (with reference solutions), the 1362 ranked Tree-of-Thoughts
puzzles, and the exact solver that computes their reference solutions."""

from __future__ import annotations

import csv
import functools
import io
import re
from fractions import Fraction
from typing import Any, Sequence

from infra.data.benchmarks.core import (
    DatasetError,
    _Ctx,
    _decode,
    _json_items,
    _question,
    _read_bytes,
    _Rec,
    _rel,
    _take,
)

GAME24_PROMPT = ("Using the numbers [{numbers}], create an expression that equals 24. You must use basic arithmetic "
                 "operations (+, -, ×, /) and parentheses. **Each number can only be used once.**  Example: for "
                 "[1, 2, 3, 4], one solution is (1+2+3)×4.")


def _read_game24_json(ctx: _Ctx) -> tuple[list[dict], None]:
    path = _rel(ctx, "game24/data.json")
    items = _json_items(path)
    ctx.source_questions = len(items)
    out = []
    for line, value in _take(items, ctx.limit):
        r = _Rec(path, line, value)
        pid = r.get("pid", (str, int))
        nums = r.get("question", list)
        if len(nums) != 4 or not all(isinstance(n, int) and not isinstance(n, bool) for n in nums):
            raise r.fail(f"field 'question' must be a list of 4 integers, got {nums!r}")
        sols = r.get("answer", list, required=False) or []
        if not all(isinstance(s, str) for s in sols):
            raise r.fail("field 'answer' must be a list of strings")
        out.append(_game24_question(ctx.name, str(pid), nums, sols))
    return out, None


def _game24_question(bench: str, source_id: str, nums: list[int], solutions: list[str], **extra: Any) -> dict:
    return _question(bench, source_id, GAME24_PROMPT.format(numbers=", ".join(map(str, nums))),
                     " ".join(map(str, nums)), "game24", numbers=list(nums), solutions=list(solutions), **extra)


def _read_game24_csv(ctx: _Ctx) -> tuple[list[dict], None]:
    path = _rel(ctx, "game24/24.csv")
    text = _decode(path, _read_bytes(path))
    reader = csv.DictReader(io.StringIO(text, newline=""))
    if not reader.fieldnames or "Puzzles" not in reader.fieldnames or "Rank" not in reader.fieldnames:
        raise DatasetError(f"{path}: line 1: expected a header with 'Rank' and 'Puzzles', got {reader.fieldnames}")
    rows = []
    for row in reader:
        rows.append((reader.line_num, row))
    if not rows:
        raise DatasetError(f"{path}: no records")
    ctx.source_questions = len(rows)
    out = []
    for line, row in _take(rows, ctx.limit):
        where = f"{path}: line {line}"
        try:
            rank = int(row["Rank"])
            nums = [int(x) for x in (row["Puzzles"] or "").split()]
        except (TypeError, ValueError):
            raise DatasetError(f"{where}: 'Rank' must be an integer and 'Puzzles' four integers, "
                               f"got {row.get('Rank')!r}, {row.get('Puzzles')!r}") from None
        if len(nums) != 4:
            raise DatasetError(f"{where}: 'Puzzles' must hold four integers, got {row['Puzzles']!r}")
        solved = row.get("Solved rate") or ""
        rate = float(solved.rstrip("%")) / 100 if re.fullmatch(r"\d+(?:\.\d+)?%", solved.strip()) else None
        sol = solve_game24(nums)
        out.append(_game24_question(ctx.name, f"{rank:04d}", nums, [sol] if sol else [], rank=rank,
                                    human_solved_rate=rate))
        if sol is None:
            ctx.notes.append(f"rank {rank} ({row['Puzzles']}) has no solution")
    return out, None


@functools.lru_cache(maxsize=4096)
def _solve(key: tuple[int, ...]) -> str | None:
    seen: set[tuple[Fraction, ...]] = set()

    def go(items: list[tuple[Fraction, str]]) -> str | None:
        if len(items) == 1:
            return items[0][1] if items[0][0] == 24 else None
        state = tuple(sorted(v for v, _ in items))
        if state in seen:
            return None
        seen.add(state)
        for i in range(len(items)):
            for j in range(len(items)):
                if i == j:
                    continue
                (a, ea), (b, eb) = items[i], items[j]
                rest = [items[k] for k in range(len(items)) if k not in (i, j)]
                options = []
                if i < j:
                    options += [(a + b, f"({ea} + {eb})"), (a * b, f"({ea} * {eb})")]
                options.append((a - b, f"({ea} - {eb})"))
                if b != 0:
                    options.append((a / b, f"({ea} / {eb})"))
                for v, e in options:
                    got = go(rest + [(v, e)])
                    if got is not None:
                        return got
        return None

    found = go([(Fraction(n), str(n)) for n in key])
    if found is None:
        return None
    return found[1:-1] if found.startswith("(") and found.endswith(")") else found


def solve_game24(numbers: Sequence[int]) -> str | None:
    """One expression over ``numbers`` (each used once, + - * /) equal to 24 exactly, or None. Deterministic."""
    return _solve(tuple(int(n) for n in numbers))
