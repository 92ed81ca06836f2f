"""Flow-GRPO math: group advantages and the clipped loss against hand-computed values; LoRA-only gradients; KL at step 0."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("peft")

from tasks.learn.grpo import Learner, TurnSample, group_advantages, group_samples, token_loss  # noqa: E402
from tests.tiny_policy import write_tiny_model  # noqa: E402


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory):
    return write_tiny_model(tmp_path_factory.mktemp("tiny") / "model")


def _policy(tiny_dir, **kw):
    from infra.models.hf_policy import PolicyModel

    return PolicyModel(str(tiny_dir), trainable=True, **kw)


# --------------------------------------------------------------------------- advantages


def test_group_advantages_by_hand():
    # rewards 1,0,0,1: mean 0.5, sample std sqrt(4 * 0.25 / 3) = sqrt(1/3)
    g = group_advantages([1.0, 0.0, 0.0, 1.0])
    s = math.sqrt(1 / 3)
    assert not g.zero_signal and g.mean == 0.5 and g.std == pytest.approx(s)
    assert g.advantages == pytest.approx([0.5 / (s + 1e-6), -0.5 / (s + 1e-6), -0.5 / (s + 1e-6), 0.5 / (s + 1e-6)])
    # 1,0,0: mean 1/3, std sqrt(((2/3)^2 + 2 (1/3)^2) / 2) = sqrt(1/3)
    g = group_advantages([1.0, 0.0, 0.0])
    assert g.advantages == pytest.approx([(2 / 3) / s, -(1 / 3) / s, -(1 / 3) / s], rel=1e-5)


def test_all_equal_group_carries_no_signal():
    for rewards in ([0.0, 0.0, 0.0, 0.0], [0.75, 0.75], [1.0]):
        g = group_advantages(rewards)
        assert g.zero_signal and g.advantages == [0.0] * len(rewards)


@dataclass
class _Traj:
    reward: float
    turns: list = field(default_factory=list)


def _turn(n: int) -> dict:
    return {"prompt_ids": [1, 2], "completion_ids": list(range(3, 3 + n)), "logprobs": [-1.0] * n, "temperature": 1.0}


def test_reward_broadcast_to_every_turn_and_normalised_over_trajectories_not_turns():
    # A: 3 turns, reward 1; B: 1 turn, reward 0. Over trajectories: mean 0.5, std sqrt(0.5): +-0.7071.
    # (Over turns it would be mean 0.75 and four values: not what we want.)
    long_, short = _Traj(1.0, [_turn(2), _turn(1), _turn(4)]), _Traj(0.0, [_turn(3)])
    flat = _Traj(0.5, [_turn(1)])
    samples, stats = group_samples([[long_, short], [flat, _Traj(0.5, [_turn(2)])]])
    assert [s.zero_signal for s in stats] == [False, True]
    a = 0.5 / (math.sqrt(0.5) + 1e-6)
    assert [s.advantage for s in samples] == pytest.approx([a, a, a, -a])  # zero-signal group: no samples
    assert [len(s.completion_ids) for s in samples] == [2, 1, 4, 3]


# --------------------------------------------------------------------------- loss


def test_token_loss_by_hand():
    new = torch.log(torch.tensor([0.5, 0.9, 0.3]))
    old = torch.log(torch.tensor([0.4, 0.6, 0.5]))  # ratios 1.25, 1.5, 0.6
    ref = torch.log(torch.tensor([0.5, 0.9, 0.4]))
    adv = torch.tensor([1.0, 1.0, -1.0])
    loss, kl, clipped = token_loss(new, old, ref, adv, clip_low=0.2, clip_high=0.3, kl_coef=0.1)
    # token 1: inside [0.8, 1.3]: -1.25; token 2: clipped at 1.3: -1.3; token 3 (A<0): min(-0.6, -0.8) = -0.8 -> +0.8
    k3 = (0.4 / 0.3) - math.log(0.4 / 0.3) - 1  # token 3: ref 0.4, new 0.3; tokens 1-2: ref = new
    assert kl.tolist() == pytest.approx([0.0, 0.0, k3], abs=1e-6)
    assert loss.tolist() == pytest.approx([-1.25, -1.3, 0.8 + 0.1 * k3], abs=1e-6)
    assert clipped.tolist() == [False, True, True]


def test_learner_loss_is_token_mean_by_hand(tiny_dir):
    """At step 0 (policy = sampler = reference) the ratio is 1 and KL 0: loss = -sum(A * n_tokens) / tokens."""
    policy = _policy(tiny_dir)
    p = policy.encode_chat([{"role": "user", "content": "What is 2+2?"}])
    t1 = policy.sample(p, max_new_tokens=3, temperature=1.0, seed=1)
    t2 = policy.sample(p, max_new_tokens=5, temperature=1.0, seed=2)
    samples = [TurnSample(p, t1.completion_ids, t1.logprobs, advantage=1.0),
               TurnSample(p, t2.completion_ids, t2.logprobs, advantage=-0.5)]
    learner = Learner(policy, learning_rate=1e-3, kl_coef=0.001)
    stats = learner.update(samples)
    n1, n2 = len(t1.completion_ids), len(t2.completion_ids)
    assert stats.tokens == n1 + n2
    assert stats.loss == pytest.approx(-(1.0 * n1 - 0.5 * n2) / (n1 + n2), abs=1e-5)
    assert stats.kl == pytest.approx(0.0, abs=1e-7)
    assert stats.ratio == pytest.approx(1.0, abs=1e-5) and stats.clip_frac == 0.0
    assert stats.updated and stats.entropy > 0


# --------------------------------------------------------------------------- gradients and KL


def test_gradients_reach_only_lora_parameters(tiny_dir):
    policy = _policy(tiny_dir)
    p = policy.encode_chat([{"role": "user", "content": "hello"}])
    turn = policy.sample(p, max_new_tokens=4, temperature=1.0, seed=3)
    before = {n: v.detach().clone() for n, v in policy.model.named_parameters()}
    learner = Learner(policy, learning_rate=1e-2)
    learner.optimizer.step = lambda: None  # keep the gradients to inspect them
    learner.update([TurnSample(p, turn.completion_ids, turn.logprobs, advantage=1.0)])
    with_grad = {n for n, v in policy.model.named_parameters() if v.grad is not None and v.grad.abs().sum() > 0}
    assert with_grad and all("lora_" in n for n in with_grad)
    assert any("lora_B" in n for n in with_grad)
    assert all(not v.requires_grad for n, v in policy.model.named_parameters() if "lora_" not in n)
    # and a real step changes LoRA weights only
    learner2 = Learner(policy, learning_rate=1e-2)
    learner2.update([TurnSample(p, turn.completion_ids, turn.logprobs, advantage=1.0)])
    changed = {n for n, v in policy.model.named_parameters() if not torch.equal(v.detach(), before[n])}
    assert changed and all("lora_" in n for n in changed)


def test_kl_is_zero_at_step_zero_and_positive_after_an_update(tiny_dir):
    policy = _policy(tiny_dir)
    p = policy.encode_chat([{"role": "user", "content": "which tool?"}])
    turn = policy.sample(p, max_new_tokens=6, temperature=1.0, seed=4)
    new, _ = policy.token_logprobs(p, turn.completion_ids)
    ref, _ = policy.token_logprobs(p, turn.completion_ids, reference=True)
    assert torch.allclose(new, ref)  # LoRA B starts at zero: the adapter is the identity
    learner = Learner(policy, learning_rate=5e-2, kl_coef=0.001)
    s0 = learner.update([TurnSample(p, turn.completion_ids, turn.logprobs, advantage=1.0)])
    assert s0.kl == pytest.approx(0.0, abs=1e-7)
    s1 = learner.update([TurnSample(p, turn.completion_ids, turn.logprobs, advantage=1.0)])
    assert s1.kl > 0 and s1.ratio != pytest.approx(1.0, abs=1e-6)


def test_sampled_logprobs_match_the_policy_without_retokenising(tiny_dir):
    policy = _policy(tiny_dir)
    msgs = [{"role": "system", "content": "Reply with JSON."}, {"role": "user", "content": "Lake depth?"}]
    p = policy.encode_chat(msgs)
    for temp in (1.0, 0.7):
        turn = policy.sample(p, max_new_tokens=8, temperature=temp, seed=5)
        assert turn.prompt_ids == p and len(turn.logprobs) == len(turn.completion_ids) > 0
        again, _ = policy.token_logprobs(p, turn.completion_ids, temp)
        assert again.tolist() == pytest.approx(turn.logprobs, abs=1e-4)
