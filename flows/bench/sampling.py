"""The rollout Planner's sampling cost (`python -m flows.bench run --only policy_sampling`): templated Planner turns on
real Planner prompts, timed side by side in one process, interleaved round by round:

- ``whole``: every turn runs its whole prompt (the cached prompt is forgotten before each turn);
- ``resume``: a turn resumes from the keys and values of the prompt before it and runs only the tokens after the part
  they share (the Planner's system prompt and worked examples), the default.

Same seeds and weights in both, so they sample the same plans; the ratio is the figure.
"""

from __future__ import annotations

import statistics
import time
from typing import Any


def bench_policy_sampling(model: str | None = None, questions: int = 3, turns_per_question: int = 2,
                          rounds: int = 2) -> dict[str, Any]:
    from flows.bench.update import planner_turns
    from flows.train import torch_threads
    from infra.models.hf_policy import PolicyModel, schema_choices, shared_length
    from infra.runtime.settings import TrainConfig
    from tasks.contracts import plan_draft_schema

    t0 = time.perf_counter()
    policy = PolicyModel(model, template_fields=TrainConfig().template_fields)
    load_s = time.perf_counter() - t0
    prompts = [s.prompt_ids for s in planner_turns(policy, questions, turns_per_question)]
    choices = schema_choices(plan_draft_schema(["python", "search", "answer"]))
    times: dict[str, list[float]] = {"whole": [], "resume": []}
    plans: dict[str, list[list[int]]] = {}
    with torch_threads(1):  # as a rollout worker samples: one thread each
        for _ in range(rounds):
            for name in times:
                policy.weights_changed()  # no carry-over between variants or rounds
                t = time.perf_counter()
                turns = []
                for i, prompt in enumerate(prompts):
                    if name == "whole":
                        policy.weights_changed()
                    turns.append(policy.sample_fields(prompt, policy.template_fields, max_new_tokens=96,
                                                      temperature=1.0, seed=i, choices=choices))
                times[name].append(time.perf_counter() - t)
                plans[name] = [turn.completion_ids for turn in turns]
    med = {k: statistics.median(v) for k, v in times.items()}
    shared = [shared_length(prompts[i - 1], prompts[i]) for i in range(1, len(prompts))]
    return {
        "model": model or "registry default", "load_s": round(load_s, 1), "turns": len(prompts),
        "prompt_tokens_mean": round(statistics.mean(len(p) for p in prompts)),
        "shared_with_previous_tokens": shared, "rounds": rounds,
        "completion_tokens": sum(len(c) for c in plans["resume"]),
        "seconds": {k: [round(x, 2) for x in v] for k, v in times.items()},
        "median_s_per_turn": {k: round(v / len(prompts), 2) for k, v in med.items()},
        "speedup_resume_vs_whole": round(med["whole"] / med["resume"], 2),
        "same_plans": plans["whole"] == plans["resume"],
    }
