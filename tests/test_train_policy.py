"""The hf_policy backend in the real Planner, adapters saved and loaded (modular-trained), checkpoints on disk and S3.

A tiny random model with a byte-level tokenizer stands in for SmolLM2 (tests/tiny_policy.py); the
real GGUF runs in the marked end-to-end test (tests/test_train_e2e.py).
"""

from __future__ import annotations

import json

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("peft")

from infra.models import build_backend, clear_backend_cache  # noqa: E402
from infra.models.base import PromptTooLong  # noqa: E402
from infra.models.hf_policy import PolicyModel, forget_policies, json_string_value, schema_choices  # noqa: E402
from infra.runtime.settings import LoraSettings, ModelConfig  # noqa: E402
from tasks.contracts import ANSWER_TOOL, Question, plan_draft_schema  # noqa: E402
from tests.scripted import answer, plan, scripted_settings  # noqa: E402
from tests.test_storage import s3_endpoint  # noqa: E402,F401  (the moto S3 endpoint fixture)
from tests.tiny_policy import write_tiny_model  # noqa: E402

FIELDS = ["tool", "tool_input", "sub_goal"]


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory):
    return write_tiny_model(tmp_path_factory.mktemp("tiny") / "model")


@pytest.fixture(autouse=True)
def _fresh_backends():
    clear_backend_cache()
    forget_policies()
    yield
    clear_backend_cache()
    forget_policies()


def _policy_settings(tiny_dir, **cfg):
    s = scripted_settings([plan("answer")], generator=[answer("391", 1)])
    s.models.planner = ModelConfig(backend="hf_policy", model="tiny", model_path=str(tiny_dir), max_tokens=48,
                                   max_input_tokens=8192, temperature=1.0, template_fields=FIELDS, **cfg)
    return s


def test_a_free_form_call_on_a_templated_policy_is_not_forced_into_the_template(tiny_dir):
    """The program call (tasks/modules/programs.py) asks for a fenced program with no schema."""
    backend = build_backend(_policy_settings(tiny_dir).models.planner)
    templated = backend.complete([{"role": "user", "content": "plan"}], json_schema={"type": "object"}, seed=0)
    free = backend.complete([{"role": "user", "content": "program"}], json_schema=None, seed=0, max_tokens=8)
    assert templated.text.startswith('{"') and not free.text.startswith('{"' + FIELDS[0])


def test_planner_on_hf_policy_gets_valid_plans_and_turns_are_recorded(tiny_dir):
    from tasks.modules.planner import build_planner

    settings = _policy_settings(tiny_dir)
    planner = build_planner(settings)
    backend = build_backend(settings.models.planner)
    assert backend.policy.recording is False  # inference keeps nothing; rollout workers switch recording on
    assert backend.reply_fields == FIELDS  # the Planner shows its worked examples in this template
    backend.policy.recording = True
    tools = set(planner.cards) | {ANSWER_TOOL}
    outcomes = [planner.plan("What is 17 * 23?", [], None, step_id=i + 1) for i in range(3)]
    turns = backend.drain_turns()
    assert len(turns) == 3
    for outcome, turn in zip(outcomes, turns):
        chosen = json.loads(turn.text)["tool"]
        assert chosen in tools  # sampled among the schema's enum only
        assert outcome.plan is None or outcome.plan.tool == chosen  # the Planner validated the same text
        assert len(turn.completion_ids) == len(turn.logprobs) == len(turn.mask) == len(turn.allowed)
        assert outcome.usage.tokens_in == len(turn.prompt_ids)
        # logprobs of sampled tokens: recomputed from the token ids (never from text), same values
        again, _ = backend.policy.token_logprobs(turn.prompt_ids, turn.completion_ids, turn.temperature,
                                                 allowed=turn.allowed)
        m = torch.tensor(turn.mask, dtype=torch.bool)
        assert again[m].tolist() == pytest.approx(torch.tensor(turn.logprobs)[m].tolist(), abs=1e-4)
        assert all(lp == 0.0 for lp, k in zip(turn.logprobs, turn.mask) if k == 0)  # forced template tokens


def test_tool_choice_is_a_distribution_over_the_enum(tiny_dir):
    policy = PolicyModel(str(tiny_dir))
    choices = schema_choices(plan_draft_schema(["python", "search", "answer"]))
    assert choices == {"tool": ["python", "search", "answer"]}
    prompt = policy.encode_chat([{"role": "user", "content": "q"}])
    seen = {policy.sample_choice(prompt, choices["tool"], 1.0, seed=i)[3] for i in range(12)}
    assert len(seen) >= 2  # the untrained policy explores, so groups can disagree


def test_a_templated_turn_runs_its_prompt_once(tiny_dir):
    """The keys, the tool's tokens and each value are run on one KV cache: every token of the prompt and of the
    completion goes through the model once (before, each field and each choice token re-ran the whole prompt)."""
    policy = PolicyModel(str(tiny_dir))
    prompt = policy.encode_chat([{"role": "system", "content": "You plan research steps. " * 20},
                                 {"role": "user", "content": "What is 17 * 23?"}])
    seen: list[int] = []
    hook = policy.model.register_forward_pre_hook(lambda m, args, kw: seen.append(kw["input_ids"].shape[1]),
                                                  with_kwargs=True)
    try:
        turn = policy.sample_fields(prompt, FIELDS, max_new_tokens=24, temperature=1.0, seed=7,
                                    choices={"tool": ["python", "search", "answer"]})
    finally:
        hook.remove()
    assert seen[0] == len(prompt) + len(policy.tokenizer.encode('{"tool": "', add_special_tokens=False))
    assert sum(seen) <= len(prompt) + len(turn.completion_ids)  # each token once (the closing '"}' is never run)
    again, _ = policy.token_logprobs(turn.prompt_ids, turn.completion_ids, turn.temperature, allowed=turn.allowed)
    m = torch.tensor(turn.mask, dtype=torch.bool)
    assert again[m].tolist() == pytest.approx(torch.tensor(turn.logprobs)[m].tolist(), abs=1e-4)


def _input_lengths(policy):
    seen: list[int] = []
    hook = policy.model.register_forward_pre_hook(lambda m, args, kw: seen.append(kw["input_ids"].shape[1]),
                                                  with_kwargs=True)
    return seen, hook


def test_a_prompt_resumes_from_the_part_it_shares_with_the_last_one(tiny_dir):
    """Planner prompts share a long system prompt: the second turn runs only its own tail on the first turn's keys
    and values, and samples what a policy running the whole prompt samples, with the same logprobs."""
    system = {"role": "system", "content": "You plan research steps. " * 20}
    policy = PolicyModel(str(tiny_dir))
    first = policy.encode_chat([system, {"role": "user", "content": "What is 17 * 23?"}])
    second = policy.encode_chat([system, {"role": "user", "content": "Who wrote the ledger?"}])
    shared = next(i for i, (a, b) in enumerate(zip(first, second)) if a != b)
    kw = dict(max_new_tokens=24, temperature=1.0, seed=11, choices={"tool": ["python", "search", "answer"]})
    policy.sample_fields(first, FIELDS, **kw)
    seen, hook = _input_lengths(policy)
    try:
        turn = policy.sample_fields(second, FIELDS, **kw)
    finally:
        hook.remove()
    key = len(policy.tokenizer.encode('{"tool": "', add_special_tokens=False))
    assert seen[0] == len(second) + key - shared  # only the tail after the shared system prompt
    whole = PolicyModel(str(tiny_dir)).sample_fields(second, FIELDS, **kw)
    assert turn.completion_ids == whole.completion_ids
    assert turn.logprobs == pytest.approx(whole.logprobs, abs=1e-5)
    again, _ = policy.token_logprobs(turn.prompt_ids, turn.completion_ids, turn.temperature, allowed=turn.allowed)
    m = torch.tensor(turn.mask, dtype=torch.bool)
    assert again[m].tolist() == pytest.approx(torch.tensor(turn.logprobs)[m].tolist(), abs=1e-4)


@pytest.mark.parametrize("change", ["load_lora_state", "learner_update"])
def test_new_weights_forget_the_cached_prompt(tiny_dir, change):
    """Keys and values cached under the old adapter are never reused after the weights change."""
    from tasks.learn.grpo import Learner

    system = {"role": "system", "content": "You plan research steps. " * 20}
    policy = PolicyModel(str(tiny_dir), trainable=change == "learner_update")
    prompt = policy.encode_chat([system, {"role": "user", "content": "What is 17 * 23?"}])
    kw = dict(max_new_tokens=8, temperature=1.0, seed=3, choices={"tool": ["python", "search", "answer"]})
    turn = policy.sample_fields(prompt, FIELDS, **kw)
    if change == "load_lora_state":
        policy.load_lora_state({k: v + 0.5 for k, v in policy.lora_state().items()})
    else:
        from tasks.learn.grpo import TurnSample

        Learner(policy, learning_rate=1e-1).update([TurnSample(
            prompt_ids=turn.prompt_ids, completion_ids=turn.completion_ids, logprobs=turn.logprobs,
            mask=turn.mask, advantage=1.0, temperature=turn.temperature, allowed=turn.allowed)])
    seen, hook = _input_lengths(policy)
    try:
        policy.sample_fields(prompt, FIELDS, **kw)
    finally:
        hook.remove()
    assert seen[0] == len(prompt) + len(policy.tokenizer.encode('{"tool": "', add_special_tokens=False))


def test_prompt_over_the_limit_is_refused(tiny_dir):
    settings = _policy_settings(tiny_dir)
    settings.models.planner.max_input_tokens = 16
    with pytest.raises(PromptTooLong):
        build_backend(settings.models.planner).complete([{"role": "user", "content": "x" * 200}])


def test_saved_adapter_loads_with_its_weights_and_template(tiny_dir, tmp_path):
    trained = PolicyModel(str(tiny_dir), lora=LoraSettings(r=4, alpha=8), trainable=True, template_fields=FIELDS)
    with torch.no_grad():
        for name, p in trained.model.named_parameters():
            if "lora_B" in name:
                p.add_(0.01)
    trained.save_adapter(tmp_path / "adapter")
    loaded = PolicyModel(str(tiny_dir), adapter=str(tmp_path / "adapter"))
    a, b = trained.lora_state(), loaded.lora_state()
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    assert loaded.template_fields == FIELDS and not loaded.trainable_parameters()  # frozen for inference
    # and weights ship between copies (learner -> rollout worker)
    fresh = PolicyModel(str(tiny_dir), lora=LoraSettings(r=4, alpha=8))
    fresh.load_lora_state(trained.lora_state(), version=3)
    assert fresh.version == 3 and all(torch.equal(fresh.lora_state()[k], a[k]) for k in a)


def test_modular_trained_runs_the_loop_on_the_adapter(tiny_dir, tmp_path):
    from flows.systems import SYSTEMS, SystemOptions, trained_settings

    PolicyModel(str(tiny_dir), trainable=True, template_fields=FIELDS).save_adapter(tmp_path / "ckpt" / "adapter")
    settings = scripted_settings([plan("answer")], generator=[answer("391", 1)])
    settings.train.base_model = str(tiny_dir)
    settings.models.planner.max_input_tokens = 8192
    settings.models.planner.max_tokens = 48
    adapter = str(tmp_path / "ckpt" / "adapter")
    ts = trained_settings(settings, adapter)
    assert ts.models.planner.backend == "hf_policy" and ts.models.planner.adapter.endswith("adapter")
    assert ts.models.generator == settings.models.generator  # only the Planner changes
    out = SYSTEMS["modular-trained"](Question(id="q", question="What is 17 * 23?"), settings, run_id="t",
                                     options=SystemOptions(prefect_tasks=False, adapter=adapter))
    planner_records = [r for r in out.records if r.role.value == "planner"]
    assert planner_records and all(r.model == ts.models.planner.model for r in planner_records)
    assert out.answer.text


def test_modular_base_is_the_same_backend_and_template_with_the_adapter_off(tiny_dir, tmp_path):
    from flows.systems import SYSTEMS, SystemOptions, base_policy_settings, trained_settings
    from infra.models.hf_policy import policy_model

    PolicyModel(str(tiny_dir), trainable=True, template_fields=["tool", "tool_input"]).save_adapter(tmp_path / "adapter")
    settings = scripted_settings([plan("answer")], generator=[answer("391", 1)])
    settings.train.base_model = str(tiny_dir)
    settings.models.planner.max_input_tokens = 8192
    settings.models.planner.max_tokens = 48
    adapter = str(tmp_path / "adapter")
    base, trained = base_policy_settings(settings, adapter), trained_settings(settings, adapter)
    assert base.models.planner.backend == trained.models.planner.backend == "hf_policy"
    assert base.models.planner.adapter is None and base.models.planner.model_path == trained.models.planner.model_path
    assert base.models.planner.template_fields == ["tool", "tool_input"]  # the adapter's own template
    assert base_policy_settings(settings).models.planner.template_fields == settings.train.template_fields
    assert base.models.generator == settings.models.generator  # only the Planner changes
    # adapter off = the base model: the fresh LoRA's B matrices are zero, so its logprobs are the reference's
    policy = policy_model(base.models.planner)
    p = policy.encode_chat([{"role": "user", "content": "hi"}])
    ids = policy.tokenizer.encode(" hello there", add_special_tokens=False)
    import torch

    with torch.no_grad():
        lp_adapter, _ = policy.token_logprobs(p, ids)
        lp_reference, _ = policy.token_logprobs(p, ids, reference=True)
    assert torch.allclose(lp_adapter, lp_reference)
    out = SYSTEMS["modular-base"](Question(id="q", question="What is 17 * 23?"), settings, run_id="t",
                                  options=SystemOptions(prefect_tasks=False, adapter=adapter))
    planner_records = [r for r in out.records if r.role.value == "planner"]
    assert planner_records and all(r.model == base.models.planner.model for r in planner_records)


@pytest.mark.parametrize("where", ["local", "s3"])
def test_checkpoint_roundtrip(tiny_dir, tmp_path, where, request):
    from flows.train import Checkpoints
    from infra.runtime.settings import Settings
    from infra.runtime.storage import ResultStore
    from tasks.learn.grpo import Learner, TurnSample

    if where == "s3":  # the moto S3 endpoint of tests/test_storage.py, started by this module on first use
        store = ResultStore("s3://agentflow-test/ckpt-run1", s3_endpoint_url=request.getfixturevalue("s3_endpoint"))
    else:
        store = ResultStore(str(tmp_path / "run1"))
    policy = PolicyModel(str(tiny_dir), trainable=True, template_fields=FIELDS)
    learner = Learner(policy, learning_rate=1e-2)
    p = policy.encode_chat([{"role": "user", "content": "hi"}])
    t = policy.sample(p, max_new_tokens=4, temperature=1.0, seed=1)
    learner.update([TurnSample(p, t.completion_ids, t.logprobs, advantage=1.0)])
    ckpts = Checkpoints(store)
    assert ckpts.latest() is None
    ckpts.save(3, policy, learner, Settings(), version=1)
    assert ckpts.latest() == {"step": 3, "path": "checkpoints/step-000003"}
    local = ckpts.download("checkpoints/step-000003", tmp_path / "dl")
    assert json.loads((local / "state.json").read_text())["step"] == 3
    back = PolicyModel(str(tiny_dir), adapter=str(local / "adapter"), trainable=True)
    assert all(torch.equal(back.lora_state()[k], v) for k, v in policy.lora_state().items())
    opt = torch.load(local / "optimizer.pt", weights_only=False)
    Learner(back, learning_rate=1e-2).load_state_dict(opt)
    assert opt["state"]  # Adam moments were saved


def test_the_sampling_benchmark_times_whole_and_resumed_prompts(tiny_dir):
    from flows.bench.sampling import bench_policy_sampling

    fig = bench_policy_sampling(str(tiny_dir), questions=2, turns_per_question=2, rounds=1)
    assert fig["turns"] == 4 and min(fig["shared_with_previous_tokens"]) > 100
    assert set(fig["median_s_per_turn"]) == {"whole", "resume"} and fig["speedup_resume_vs_whole"] > 0
    assert fig["same_plans"]  # same seeds and weights: resuming changes the cost, not the plans


@pytest.mark.parametrize(("raw", "value"), [
    ("x = 1\\nprint(x * 2)", "x = 1\nprint(x * 2)"),  # a program sampled as a JSON string runs as lines
    ('say \\"hi\\"', 'say "hi"'),
    ("caf\\u00e9 \\\\ path", "café \\ path"),
    ("a\nb", "a\nb"),  # a raw newline the model wrote is kept
    ("cut mid-escape \\", "cut mid-escape \\"),  # a value cut by its token budget keeps its text
    ("bad \\q escape", "bad \\q escape"),
])
def test_a_sampled_string_value_is_decoded_as_json(raw, value):
    """The templated Planner's values are JSON string bodies: before this, "\\n" reached the sandbox as a backslash
    and an n (SyntaxError: unexpected character after line continuation character) on every multi-line program."""
    assert json_string_value(raw) == value


def test_a_sub_goal_is_capped_and_the_tool_input_may_use_what_the_reply_leaves():
    from infra.models.hf_policy import DEFAULT_FIELD_TOKENS, field_budget

    assert field_budget("sub_goal", 0, 256) == DEFAULT_FIELD_TOKENS
    assert field_budget("tool", 50, 256) == 8
    assert field_budget("tool_input", 60, 256) == 196  # a program: the rest of the reply, not 40
    assert field_budget("tool_input", 250, 256) == 6 and field_budget("sub_goal", 256, 256) == 0


def test_a_long_program_is_not_cut_at_the_sub_goals_cap(tiny_dir):
    """The tiny model rarely closes a quote, so its tool input runs to the reply's budget: past 40 tokens."""
    policy = PolicyModel(str(tiny_dir))
    prompt = policy.encode_chat([{"role": "user", "content": "What is 17 * 23?"}])
    turn = policy.sample_fields(prompt, ["tool", "tool_input"], max_new_tokens=90, temperature=1.0, seed=3,
                                choices={"tool": ["python", "search", "answer"]})
    key = policy.tokenizer.encode('", "tool_input": "', add_special_tokens=False)
    start = next(i for i in range(len(turn.completion_ids)) if turn.completion_ids[i:i + len(key)] == key) + len(key)
    value_tokens = sum(turn.mask[start:])
    assert turn.finish_reason == "length" and value_tokens > 40
    assert sum(turn.mask) <= 90  # the reply's budget still bounds it
