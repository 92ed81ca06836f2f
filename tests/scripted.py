"""Helpers to build scripted-model settings for loop tests (the scripted backend is a test double)."""

from __future__ import annotations

import json

from infra.runtime.settings import ModelConfig, load_settings


def plan(tool: str, tool_input: str = "", sub_goal: str = "find it") -> str:
    return json.dumps({"sub_goal": sub_goal, "tool": tool, "tool_input": tool_input, "justification": "because"})


def answer(text: str, *step_ids: int) -> str:
    return json.dumps({"answer": text, "claims": [{"claim": text, "step_id": s} for s in step_ids]})


def scripted_settings(planner: list[str], generator: list[str] | None = None, corpus=None, generalist: list[str] | None = None,
                      **overrides):
    values = {
        "models.planner": ModelConfig(backend="scripted", model="scripted-planner", script=planner).model_dump(),
        "models.generator": ModelConfig(backend="scripted", model="scripted-generator",
                                        script=generator or [answer("no idea", 1)]).model_dump(),
        "models.generalist": ModelConfig(backend="scripted", model="scripted-generalist",
                                         script=generalist or ["391"]).model_dump(),
        "tools.python.sandbox": "auto",
    }
    if corpus is not None:
        values["tools.search.corpus"] = str(corpus)
    else:
        values["tools.allow"] = ["python", "generalist"]
    values.update(overrides)
    return load_settings(None, None, **values)
