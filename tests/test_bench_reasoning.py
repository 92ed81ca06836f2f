"""The direct prompt vs step-by-step probe (flows/bench/reasoning.py): both prompts per question, scored like the tables."""

from __future__ import annotations

import json

from flows.bench import reasoning
from infra.models import build_backend, clear_backend_cache
from tests.scripted import scripted_settings

Q = {"id": "g1", "question": "Tom has 3 bags of 4 apples. How many apples?", "answer": "12"}


def test_both_prompts_run_and_are_scored_with_the_benchmark_scorer(tmp_path):
    clear_backend_cache()
    s = scripted_settings(["x"], ["Answer: 7", "3 bags of 4 apples are 3 * 4 = 12 apples.\nAnswer: 12"])
    counts = reasoning.compare([Q], s, "gsm8k", tmp_path / "out.jsonl")
    assert counts["questions"] == 1 and counts["direct"] == 0 and counts["step_by_step"] == 1
    row = json.loads((tmp_path / "out.jsonl").read_text())
    assert row["direct_right"] is False and row["step_by_step_right"] is True
    first, second = build_backend(s.models.generator).requests
    assert first["messages"][0]["content"] == reasoning.BRIEF and second["messages"][0]["content"] == reasoning.STEP_BY_STEP
    assert first["max_tokens"] == reasoning.BRIEF_TOKENS and second["max_tokens"] == reasoning.STEP_BY_STEP_TOKENS
    clear_backend_cache()


def test_bad_input_fails_before_any_model_call(tmp_path, capsys):
    (tmp_path / "bad.jsonl").write_text('{"id": "a"}\n')
    assert reasoning.main([str(tmp_path / "bad.jsonl"), "--out", str(tmp_path / "o.jsonl")]) == 2
    (tmp_path / "q.jsonl").write_text(json.dumps(Q) + "\n")
    assert reasoning.main([str(tmp_path / "q.jsonl"), "--benchmark", "nope", "--out", str(tmp_path / "o.jsonl")]) == 2
    assert "error:" in capsys.readouterr().err
