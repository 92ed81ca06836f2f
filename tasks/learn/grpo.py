"""Flow-GRPO: group-normalised trajectory advantages and the token-level clipped objective with a KL penalty.

- A trajectory's reward is broadcast to every Planner turn it contains; advantages are normalised
  within the group of G trajectories of one question, over trajectories, not turns (a trajectory's
  advantage does not depend on how many turns it took): ``r - mean`` (``scale="none"``, Dr. GRPO) or
  ``(r - mean) / std`` with the sample standard deviation (``scale="std"``, GRPO). Dividing by the
  std makes every group's advantages unit-sized, so a group whose trajectories differ only by the
  small cost terms (none answered right) pushes as hard as one that differs in being right: on the
  0.5B that taught the Planner to stop early (docs/training.md). Centring alone keeps a cost a cost.
- A group whose rewards are all equal carries no signal: its advantages are zero, it is counted
  (``zero_signal``) and its turns are left out of the update.
- Per token: ``-min(r A, clip(r, 1 - clip_low, 1 + clip_high) A) + kl_coef * k3``, with
  ``r = exp(logp - logp_old)`` and the k3 estimator ``exp(ref - logp) - (ref - logp) - 1`` of
  KL(pi || pi_ref), pi_ref being the base model (adapter disabled). The loss is the mean over
  all completion tokens of the batch.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, get_args

from infra.runtime.settings import AdvantageScale


@dataclass(frozen=True)
class GroupAdvantages:
    advantages: list[float]
    zero_signal: bool
    mean: float
    std: float


ADVANTAGE_SCALES = get_args(AdvantageScale)


def group_advantages(rewards: Sequence[float], eps: float = 1e-6, scale: AdvantageScale = "none") -> GroupAdvantages:
    """r - mean (scale "none") or (r - mean) / (std + eps) (scale "std") over the trajectories of one group;
    all-equal rewards: zeros, zero_signal."""
    if scale not in ADVANTAGE_SCALES:
        raise ValueError(f"advantage scale {scale!r}: use one of {', '.join(ADVANTAGE_SCALES)}")
    n = len(rewards)
    if n == 0:
        return GroupAdvantages([], True, 0.0, 0.0)
    mean = sum(rewards) / n
    if max(rewards) - min(rewards) <= 1e-12:
        return GroupAdvantages([0.0] * n, True, mean, 0.0)
    std = math.sqrt(sum((r - mean) ** 2 for r in rewards) / (n - 1))
    divisor = std + eps if scale == "std" else 1.0
    return GroupAdvantages([(r - mean) / divisor for r in rewards], False, mean, std)


def token_loss(new_logp, old_logp, ref_logp, advantage, *, clip_low: float, clip_high: float, kl_coef: float):
    """Per-token loss, k3 KL and clipped mask (tensors shaped like new_logp); `advantage` broadcasts."""
    import torch

    ratio = torch.exp(new_logp - old_logp)
    unclipped = ratio * advantage
    clipped = torch.clamp(ratio, 1.0 - clip_low, 1.0 + clip_high) * advantage
    pg = -torch.minimum(unclipped, clipped)
    log_ref_ratio = ref_logp - new_logp
    kl = torch.exp(log_ref_ratio) - log_ref_ratio - 1.0
    return pg + kl_coef * kl, kl, (clipped < unclipped)


@dataclass
class TurnSample:
    """One Planner turn with its trajectory's advantage: a unit of the update."""

    prompt_ids: list[int]
    completion_ids: list[int]
    logprobs: list[float]
    advantage: float
    temperature: float = 1.0
    mask: list[int] | None = None
    """1: a sampled token (trained on); 0: forced by the template. None: all sampled."""
    allowed: list[list[int] | None] | None = None
    """Per token, the ids it was sampled among (enum fields), else None."""

    def n_tokens(self) -> int:
        return len(self.completion_ids) if self.mask is None else int(sum(self.mask))


@dataclass
class UpdateStats:
    loss: float = 0.0
    kl: float = 0.0
    clip_frac: float = 0.0
    entropy: float = 0.0
    ratio: float = 1.0
    grad_norm: float = 0.0
    tokens: int = 0
    turns: int = 0
    updated: bool = False
    extra: dict[str, Any] = field(default_factory=dict)


class Learner:
    """Owns the trainable policy and its optimizer; `update` is one Flow-GRPO step over a batch of turns."""

    def __init__(self, policy, *, learning_rate: float, weight_decay: float = 0.0, max_grad_norm: float = 1.0,
                 clip_low: float = 0.2, clip_high: float = 0.3, kl_coef: float = 0.001, epochs: int = 1,
                 share_prefix: int = 64):
        import torch

        self.policy = policy
        self.share_prefix = share_prefix  # turns sharing this many prompt tokens or more run the prefix once; 0: never
        self.params = policy.trainable_parameters()
        if not self.params:
            raise ValueError("the policy has no trainable parameters (load it with trainable=True)")
        self.optimizer = torch.optim.AdamW(self.params, lr=learning_rate, weight_decay=weight_decay)
        self.max_grad_norm = max_grad_norm
        self.clip_low, self.clip_high, self.kl_coef, self.epochs = clip_low, clip_high, kl_coef, epochs

    def update(self, samples: list[TurnSample]) -> UpdateStats:
        """Token-mean loss over all turns (gradient accumulated one turn at a time, a shared prompt prefix run once per
        group of turns), then one optimizer step per epoch."""
        import torch

        samples = [s for s in samples if s.n_tokens() > 0]
        total = sum(s.n_tokens() for s in samples)
        stats = UpdateStats(tokens=total, turns=len(samples))
        if not samples:
            return stats
        self.policy.model.train()
        try:
            for _ in range(self.epochs):
                self.optimizer.zero_grad(set_to_none=True)
                sums = dict(loss=0.0, kl=0.0, clip=0.0, ent=0.0, ratio=0.0)
                for shared, group in shared_prefixes(samples, self.share_prefix):
                    self._accumulate(group, shared, total, sums)
                norm = torch.nn.utils.clip_grad_norm_(self.params, self.max_grad_norm)
                self.optimizer.step()
        finally:
            self.policy.model.eval()
            self.policy.weights_changed()  # keys and values cached for sampling belong to the old weights
        stats.loss, stats.kl, stats.clip_frac = sums["loss"] / total, sums["kl"] / total, sums["clip"] / total
        stats.entropy, stats.ratio, stats.grad_norm = sums["ent"] / total, sums["ratio"] / total, float(norm)
        stats.updated = True
        return stats

    def _accumulate(self, group: list[TurnSample], shared: int, total: int, sums: dict[str, float]) -> None:
        """Backpropagate the group's token-mean loss. With a shared prefix of `shared` tokens, the prefix runs once
        under the adapter and once under the reference; its keys and values enter each turn as detached leaves,
        and their gradients, summed over the turns, go back through the prefix in one backward pass: the same
        gradient as running every turn whole, for one prefix's forward and backward instead of one per turn."""
        import torch

        live, leaves, ref_kv = None, None, None
        if shared:
            live = self.policy.prefix_cache(group[0].prompt_ids[:shared])
            leaves = [(k.detach().requires_grad_(k.requires_grad), v.detach().requires_grad_(v.requires_grad))
                      for k, v in live]
            ref_kv = self.policy.prefix_cache(group[0].prompt_ids[:shared], reference=True)
        for s in group:
            new, ent = self.policy.token_logprobs(s.prompt_ids, s.completion_ids, s.temperature, with_entropy=True,
                                                  allowed=s.allowed, prefix=(shared, leaves) if shared else None)
            ref, _ = self.policy.token_logprobs(s.prompt_ids, s.completion_ids, s.temperature, reference=True,
                                                allowed=s.allowed, prefix=(shared, ref_kv) if shared else None)
            old = torch.tensor(s.logprobs, dtype=new.dtype, device=new.device)
            m = (torch.ones_like(new) if s.mask is None
                 else torch.tensor(s.mask, dtype=new.dtype, device=new.device))
            loss_tok, kl, clipped = token_loss(new, old, ref, s.advantage, clip_low=self.clip_low,
                                               clip_high=self.clip_high, kl_coef=self.kl_coef)
            ((loss_tok * m).sum() / total).backward()
            sums["loss"] += float((loss_tok.detach() * m).sum())
            sums["kl"] += float((kl.detach() * m).sum())
            sums["clip"] += float((clipped * m).sum())
            sums["ent"] += float((ent.detach() * m).sum())
            sums["ratio"] += float((torch.exp(new.detach() - old) * m).sum())
        if shared:
            outs = [(t, leaf.grad) for pair, lpair in zip(live, leaves) for t, leaf in zip(pair, lpair)
                    if leaf.grad is not None]
            if outs:
                torch.autograd.backward([t for t, _ in outs], [g for _, g in outs])

    def state_dict(self) -> dict[str, Any]:
        return self.optimizer.state_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.optimizer.load_state_dict(state)


def shared_prefixes(samples: list[TurnSample], min_shared: int) -> list[tuple[int, list[TurnSample]]]:
    """The turns in groups that share a prompt prefix of at least `min_shared` tokens: (prefix length, turns);
    0 for a turn that shares none. Every prompt starts with the role's fixed part (system prompt, worked
    examples), so most turns of a batch share hundreds of tokens. The prefix stops one token short of the
    shortest prompt of its group, so each turn still runs the position that predicts its first token."""
    from infra.models.hf_policy import shared_length

    if min_shared <= 0:
        return [(0, [s]) for s in samples]
    groups: list[tuple[int, list[TurnSample]]] = []
    for s in sorted(samples, key=lambda t: t.prompt_ids):  # sorted: turns with a common prefix are neighbours
        if groups:
            shared, group = groups[-1]
            head = group[0].prompt_ids
            n = shared_length(head, s.prompt_ids, min(len(head) - 1 if shared == 0 else shared, len(s.prompt_ids) - 1))
            if n >= min_shared:
                groups[-1] = (n, [*group, s])
                continue
        groups.append((0, [s]))
    return [(shared if len(group) > 1 else 0, group) for shared, group in groups]


def group_samples(groups: list[list[Any]], eps: float = 1e-6, scale: AdvantageScale = "none"
                  ) -> tuple[list[TurnSample], list[GroupAdvantages]]:
    """Turn samples of a batch: each group's trajectories (objects with .reward and .turns as dicts) get their
    group-normalised advantage (`group_advantages`), broadcast to every turn; zero-signal groups contribute no
    samples."""
    samples: list[TurnSample] = []
    stats: list[GroupAdvantages] = []
    for group in groups:
        adv = group_advantages([t.reward for t in group], eps, scale)
        stats.append(adv)
        if adv.zero_signal:
            continue
        for traj, a in zip(group, adv.advantages):
            for turn in traj.turns:
                samples.append(TurnSample(prompt_ids=turn["prompt_ids"], completion_ids=turn["completion_ids"],
                                          logprobs=turn["logprobs"], advantage=a, temperature=turn.get("temperature", 1.0),
                                          mask=turn.get("mask"), allowed=turn.get("allowed")))
    return samples, stats
