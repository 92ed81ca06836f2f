"""The Flow-GRPO update's cost (`python -m flows.bench run --only policy_update`): one Learner.update over a batch of
real Planner prompts, timed side by side in one process, interleaved round by round:

- ``whole``: every turn runs its whole prompt (train.share_prefix=0), one thread;
- ``shared``: turns that share a prompt prefix (the Planner's system prompt and worked examples) run it once
  (the default, train.share_prefix=64), one thread;
- ``shared_all_cores``: the same on every core the process may use (train.update_threads=0, the default).

The weights do not change between the timed updates (the optimizer step is skipped), so every variant computes
the same gradient on the same policy; the ratios are the figures, each variant's seconds are printed beside them.
"""

from __future__ import annotations

import os
import statistics
import time
from typing import Any


def planner_turns(policy, questions: int, turns_per_question: int) -> list:
    """TurnSamples as a rollout records them: the Planner's real prompt (system prompt, worked examples, question,
    evidence), a JSON plan as the completion; later turns carry a rejected step's feedback, as in a run."""
    import json

    from infra.data.world.generate import generate_world
    from infra.runtime.settings import load_settings
    from tasks.contracts import FailureType, Verdict
    from tasks.learn.grpo import TurnSample
    from tasks.modules.prompts import planner_messages
    from tasks.modules.tools import tool_cards

    settings = load_settings(None)
    settings.tools.allow = ["python", "search"]
    settings.tools.search.corpus = settings.tools.search.corpus or "bench-corpus.jsonl"  # the card only names it
    cards = tool_cards(settings)
    world = generate_world(seed=0, n_questions=questions, split="train")
    samples = []
    for q in world.questions[:questions]:
        for t in range(turns_per_question):
            feedback = None if t == 0 else Verdict(step_id=t, accepted=False, failure_type=FailureType.unsupported,
                                                   reason="the claim's value is not in the cited passage")
            messages = planner_messages(q["question"], cards, [], feedback, 1200, demos=True,
                                        reply_fields=list(policy.template_fields or []) or None)
            prompt = policy.encode_chat(messages)
            plan = {"tool": "search", "tool_input": q["question"][:60], "sub_goal": f"find the fact, attempt {t + 1}"}
            completion = policy.tokenizer.encode(json.dumps(plan), add_special_tokens=False)
            samples.append(TurnSample(prompt, completion, [0.0] * len(completion), advantage=(-1.0) ** t))
    return samples


def bench_policy_update(model: str | None = None, questions: int = 2, turns_per_question: int = 2,
                        rounds: int = 2) -> dict[str, Any]:
    import torch

    from flows.train import torch_threads
    from infra.models.hf_policy import PolicyModel
    from tasks.learn.grpo import Learner, shared_prefixes

    t0 = time.perf_counter()
    policy = PolicyModel(model, trainable=True)
    load_s = time.perf_counter() - t0
    samples = planner_turns(policy, questions, turns_per_question)
    with torch.no_grad():  # the sampler's logprobs: the policy's own, so the ratios are 1 as at a real step's start
        for s in samples:
            s.logprobs = [float(x) for x in policy.token_logprobs(s.prompt_ids, s.completion_ids)[0]]
    cores = len(os.sched_getaffinity(0))
    variants = {"whole": (0, 1), "shared": (64, 1), "shared_all_cores": (64, cores)}
    times: dict[str, list[float]] = {k: [] for k in variants}
    stats: dict[str, Any] = {}
    for _ in range(rounds):
        for name, (share, threads) in variants.items():
            learner = Learner(policy, learning_rate=1e-4, share_prefix=share)
            learner.optimizer.step = lambda: None  # same weights for every variant and round
            with torch_threads(threads):
                t = time.perf_counter()
                st = learner.update(samples)
                times[name].append(time.perf_counter() - t)
            stats[name] = {"loss": round(st.loss, 6), "grad_norm": round(st.grad_norm, 6)}
    med = {k: statistics.median(v) for k, v in times.items()}
    groups = shared_prefixes(samples, 64)
    return {
        "model": model or "registry default", "load_s": round(load_s, 1), "cores": cores,
        "turns": len(samples), "completion_tokens": sum(len(s.completion_ids) for s in samples),
        "prompt_tokens_mean": round(statistics.mean(len(s.prompt_ids) for s in samples)),
        "shared_prefix_tokens": [n for n, _ in groups], "rounds": rounds,
        "seconds": {k: [round(x, 2) for x in v] for k, v in times.items()},
        "median_s": {k: round(v, 2) for k, v in med.items()},
        "speedup_shared_vs_whole": round(med["whole"] / med["shared"], 2),
        "speedup_all_cores_vs_one": round(med["shared"] / med["shared_all_cores"], 2),
        "speedup_total": round(med["whole"] / med["shared_all_cores"], 2),
        "same_update": stats,  # loss and gradient norm per variant: equal up to float summation order
    }
