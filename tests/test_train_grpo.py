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
    g = group_advantages([1.0, 0.0, 0.0, 1.0], scale="std")
    s = math.sqrt(1 / 3)
    assert not g.zero_signal and g.mean == 0.5 and g.std == pytest.approx(s)
    assert g.advantages == pytest.approx([0.5 / (s + 1e-6), -0.5 / (s + 1e-6), -0.5 / (s + 1e-6), 0.5 / (s + 1e-6)])
    # 1,0,0: mean 1/3, std sqrt(((2/3)^2 + 2 (1/3)^2) / 2) = sqrt(1/3)
    g = group_advantages([1.0, 0.0, 0.0], scale="std")
    assert g.advantages == pytest.approx([(2 / 3) / s, -(1 / 3) / s, -(1 / 3) / s], rel=1e-5)
    # centred only (the default): the same groups, r - mean
    assert group_advantages([1.0, 0.0, 0.0, 1.0]).advantages == pytest.approx([0.5, -0.5, -0.5, 0.5])
    assert group_advantages([1.0, 0.0, 0.0]).advantages == pytest.approx([2 / 3, -1 / 3, -1 / 3])


def test_a_group_differing_only_in_tool_cost_stays_small_unless_scaled_by_its_std():
    # Seed 0 of the 0.5B claim, step 16: nobody right, rewards are minus the tool cost. Divided by the group's
    # std they become as large as a right-vs-wrong group's: the update taught the Planner to stop early.
    cost_only, right_wrong = [0.0, -0.02, -0.06, -0.02], [0.98, -0.02, -0.04, -0.02]
    assert max(map(abs, group_advantages(cost_only).advantages)) == pytest.approx(0.035)
    assert max(map(abs, group_advantages(right_wrong).advantages)) == pytest.approx(0.755)
    scaled = [max(map(abs, group_advantages(g, scale="std").advantages)) for g in (cost_only, right_wrong)]
    assert scaled[0] > 1.2 and scaled[1] < 1.6  # about the same size: 1.39 and 1.50


def test_an_unknown_advantage_scale_is_refused():
    with pytest.raises(ValueError, match="advantage scale 'z'"):
        group_advantages([1.0, 0.0], scale="z")


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
    samples, stats = group_samples([[long_, short], [flat, _Traj(0.5, [_turn(2)])]], scale="std")
    assert [s.zero_signal for s in stats] == [False, True]
    a = 0.5 / (math.sqrt(0.5) + 1e-6)
    assert [s.advantage for s in samples] == pytest.approx([a, a, a, -a])  # zero-signal group: no samples
    assert [len(s.completion_ids) for s in samples] == [2, 1, 4, 3]
    centred, _ = group_samples([[long_, short]])
    assert [s.advantage for s in centred] == pytest.approx([0.5, 0.5, 0.5, -0.5])


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


# --------------------------------------------------------------------------- a shared prompt prefix runs once


def test_turns_are_grouped_by_a_shared_prompt_prefix():
    from tasks.learn.grpo import shared_prefixes

    def t(ids):
        return TurnSample(list(ids), [1], [0.0], 1.0)

    a, b, c, d = t(range(10)), t([*range(8), 99, 98]), t([50, 51, 52]), t(range(6))
    groups = shared_prefixes([a, c, b, d], min_shared=4)
    assert [(n, sorted(len(s.prompt_ids) for s in g)) for n, g in groups] == [(5, [6, 10, 10]), (0, [3])]
    assert all(n < len(s.prompt_ids) for n, g in groups for s in g)  # each turn keeps a token to run
    assert shared_prefixes([a, b], min_shared=9) == [(0, [a]), (0, [b])]  # they share 8
    assert shared_prefixes([a, b], min_shared=0) == [(0, [a]), (0, [b])]


def test_a_shared_prefix_gives_the_same_logprobs_loss_and_gradients(tiny_dir):
    """Running the common system prompt once (its keys and values as leaves, their gradients sent back through it
    once) must be the same update as running every turn whole."""
    policy = _policy(tiny_dir)
    system = {"role": "system", "content": "You are the planner of a research agent. Tools: python, search. " * 4}
    samples = []
    for k, q in enumerate(["What is 2+2?", "Who founded Vobryx?", "What is 17 * 23?"]):
        p = policy.encode_chat([system, {"role": "user", "content": q}])
        turn = policy.sample(p, max_new_tokens=4, temperature=1.0, seed=10 + k)
        samples.append(TurnSample(p, turn.completion_ids, turn.logprobs, advantage=[1.0, -0.5, 0.25][k]))
    from tasks.learn.grpo import shared_prefixes

    (shared, group), = shared_prefixes(samples, 16)
    assert shared >= 16 and len(group) == 3
    kv = policy.prefix_cache(samples[0].prompt_ids[:shared])
    whole, _ = policy.token_logprobs(samples[1].prompt_ids, samples[1].completion_ids)
    cut, _ = policy.token_logprobs(samples[1].prompt_ids, samples[1].completion_ids, prefix=(shared, kv))
    assert torch.allclose(whole, cut, atol=1e-5)

    grads, stats = [], []
    for share in (0, 16):
        learner = Learner(policy, learning_rate=1e-3, share_prefix=share)
        learner.optimizer.step = lambda: None  # keep the weights: both runs see the same policy
        stats.append(learner.update(samples))
        grads.append({n: v.grad.detach().clone() for n, v in policy.model.named_parameters() if v.grad is not None})
    assert grads[0].keys() == grads[1].keys() and grads[0]
    for name in grads[0]:
        assert torch.allclose(grads[0][name], grads[1][name], atol=1e-6, rtol=1e-4), name
    assert stats[0].loss == pytest.approx(stats[1].loss, abs=1e-6)
    assert stats[0].grad_norm == pytest.approx(stats[1].grad_norm, rel=1e-4)


def test_the_update_benchmark_times_three_variants_of_one_update(tiny_dir):
    from flows.bench.update import bench_policy_update

    fig = bench_policy_update(str(tiny_dir), questions=2, turns_per_question=2, rounds=1)
    assert fig["turns"] == 4 and fig["shared_prefix_tokens"] and fig["shared_prefix_tokens"][0] > 100
    assert set(fig["median_s"]) == {"whole", "shared", "shared_all_cores"} and fig["speedup_shared_vs_whole"] > 0
    norms = {v["grad_norm"] for v in fig["same_update"].values()}
    assert max(norms) - min(norms) < 1e-4 * max(norms)  # the same gradient, whichever way it was computed
