"""Typed run configuration: one YAML/JSON file per run, overridable by AGENTFLOW_* env vars and CLI.

Precedence (highest first): CLI overrides (`--set a.b=c`), environment (AGENTFLOW_BUDGET__MAX_TOKENS=...),
the config file, defaults. The resolved config is stored with every run's results.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict


class ConfigError(ValueError):
    """A configuration that cannot be used; the message says which field and why."""


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ModelConfig(_Section):
    """Which model a role talks to. Each role can point at a different backend."""

    backend: Literal["embedded", "openai", "scripted", "hf_policy", "vllm_policy"] = Field(
        default="embedded", description="embedded (llama.cpp), openai (any OpenAI-compatible endpoint), scripted (test "
        "double), hf_policy (a transformers causal LM with a LoRA adapter; records token ids and logprobs for training), "
        "vllm_policy (an OpenAI-compatible vLLM server with LoRA: the same records, from the server).")
    model: str = Field(default="qwen2.5-coder-0.5b", description="Model name sent to the backend / shown in traces; "
                       "embedded: a registered model (qwen2.5-coder-0.5b, qwen2.5-coder-1.5b, smollm2-135m; "
                       "`agentflow models list`) unless model_path is set.")
    model_path: str | None = Field(default=None, description="embedded: any GGUF file (overrides the registry's file "
                                   "for `model`).")
    base_url: str | None = Field(default=None, description="openai: e.g. http://127.0.0.1:8000/v1 (vLLM, Ollama, llama.cpp server).")
    api_key_env: str = Field(default="OPENAI_API_KEY", description="openai: name of the env var holding the key (never the key).")
    api_key_secret_block: str | None = Field(
        default=None, description="openai: name of a Prefect Secret block holding the key; when set it is used "
        "instead of api_key_env (never the key itself).")
    temperature: float = Field(default=0.0, ge=0.0, le=2.0)
    max_tokens: int = Field(default=256, ge=1, description="Most output tokens per call.")
    max_input_tokens: int = Field(default=1536, ge=16, description="Most prompt tokens per call; longer prompts are refused.")
    n_ctx: int = Field(default=2048, ge=256, description="embedded: context window.")
    n_threads: int | None = Field(default=None, description="embedded: CPU threads (default: half the cores, at most 8).")
    prompt_cache_slots: int = Field(default=4, ge=1, le=16, description="embedded: llama.cpp contexts kept per loaded "
                                    "model (about 50-100 MB each, weights shared); a call goes to the one holding the "
                                    "longest prefix of its prompt, so each role's system prompt is read once. 1: one "
                                    "context, every call re-reads the prefix the previous role's call evicted.")
    seed: int | None = Field(default=None)
    timeout_s: float = Field(default=120.0, gt=0, description="Longest one call may take.")
    max_transport_retries: int = Field(default=1, ge=0, le=5, description="openai: bounded, logged retries on 429/5xx.")
    script: list[str] = Field(default_factory=list, description="scripted: replies returned in order (test double).")
    extra_body: dict[str, Any] = Field(
        default_factory=dict, description="openai: extra request fields the server understands, sent as they are "
        "(llama.cpp server: repeat_penalty, top_k; vLLM: repetition_penalty, top_k). A hosted API may refuse unknown fields.")
    adapter: str | None = Field(default=None, description="hf_policy/vllm_policy: a saved PEFT LoRA adapter directory "
                                "(a trained Planner); None: a fresh adapter (hf_policy) or the base model (vllm_policy).")
    device: str = Field(default="cpu", description="hf_policy: torch device (cpu, cuda, cuda:1).")
    demos: bool = Field(default=True, description="Show this role's worked examples (tasks/modules/demos.py: one invented lookup and "
                        "one calculation, in the role's own reply format) before the real prompt. Small models need them; "
                        "a strong model can go without.")
    template_fields: list[str] = Field(default_factory=list, description="hf_policy/vllm_policy: reply as a JSON object "
                                       "of these string fields, keys and quotes forced, values sampled (a field with a "
                                       "JSON-schema enum, like the tool, is sampled among its values); empty: free text.")


class RoleModels(_Section):
    planner: ModelConfig = Field(default_factory=lambda: ModelConfig(temperature=0.7))
    generator: ModelConfig = Field(default_factory=ModelConfig)
    verifier: ModelConfig | None = Field(default=None, description="LLM judge; None: deterministic checks only.")
    generalist: ModelConfig = Field(default_factory=ModelConfig, description="Model behind the 'generalist' tool.")


class BudgetConfig(_Section):
    """Hard limits on one research run. Checked before every model or tool call."""

    max_model_calls: int = Field(default=16, ge=1)
    max_calls_per_role: dict[str, int] = Field(
        default_factory=lambda: {"planner": 8, "executor": 8, "verifier": 8, "generator": 1}
    )
    max_tokens: int = Field(default=16000, ge=1, description="Tokens in+out over all model calls.")
    max_wall_s: float = Field(default=180.0, gt=0)
    max_tool_cost: float = Field(default=10.0, ge=0)
    max_steps: int = Field(default=6, ge=1, description="Planner turns.")
    max_repeats: int = Field(default=1, ge=0, description="How often an identical plan may be re-proposed before the run stops.")
    max_consecutive_rejections: int = Field(default=3, ge=1)
    answer_reserve_s: float = Field(default=20.0, ge=0, description="Wall time kept back for the final answer.")

    @field_validator("max_calls_per_role")
    @classmethod
    def _known_roles(cls, v: dict[str, int]) -> dict[str, int]:
        unknown = set(v) - {"planner", "executor", "verifier", "generator"}
        if unknown:
            raise ValueError(f"unknown role(s) {sorted(unknown)}; roles are planner, executor, verifier, generator")
        return v


class PythonToolConfig(_Section):
    timeout_s: float = Field(default=10.0, gt=0)
    memory_mb: int = Field(default=512, ge=32)
    max_output_bytes: int = Field(default=65536, ge=256)
    max_processes: int = Field(default=16, ge=1, description="Process cap inside the sandbox (fork bombs).")
    sandbox: Literal["auto", "bwrap", "process"] = Field(default="auto", description="Isolation mechanism; auto prefers bwrap.")
    cost: float = Field(default=1.0, ge=0)
    program_call: bool = Field(
        default=False, description="The Planner (and the monolithic agent) says in tool_input what to compute, and a "
        "second call of the same model writes the program as a fenced block (tasks/modules/programs.py). Off: the "
        "program is written inside the JSON plan.")


class SearchToolConfig(_Section):
    corpus: str | None = Field(default=None, description="JSONL corpus {id,title,text,url?,published_at?}.")
    top_k: int = Field(default=3, ge=1, le=20)
    max_passage_chars: int = Field(default=600, ge=50)
    cost: float = Field(default=1.0, ge=0)
    timeout_s: float = Field(default=10.0, gt=0)


class GeneralistToolConfig(_Section):
    cost: float = Field(default=2.0, ge=0)
    timeout_s: float = Field(default=60.0, gt=0)


class ToolsConfig(_Section):
    allow: list[str] = Field(default_factory=lambda: ["search", "python", "generalist"])
    python: PythonToolConfig = Field(default_factory=PythonToolConfig)
    search: SearchToolConfig = Field(default_factory=SearchToolConfig)
    generalist: GeneralistToolConfig = Field(default_factory=GeneralistToolConfig)

    @field_validator("allow")
    @classmethod
    def _known_tools(cls, v: list[str]) -> list[str]:
        unknown = set(v) - {"search", "python", "generalist"}
        if unknown:
            raise ValueError(f"unknown tool(s) {sorted(unknown)}; tools are search, python, generalist")
        return v


class MemoryConfig(_Section):
    evidence_ttl_s: float | None = Field(default=None, description="Accepted evidence expires after this; None: never.")
    view_chars: int = Field(default=2400, ge=200, description="Most characters of evidence shown to a model.")
    planner_view: Literal["all", "last"] = Field(default="all", description="'last': the Planner sees only the latest step (memory-off ablation).")
    # memory across runs (issue 9)
    mode: Literal["run", "persistent"] = Field(
        default="run", description="run: memory lives for one run; persistent: lessons and evidence are kept across runs "
        "in memory.store (prior evidence counts only once re-verified in the new run).")
    store: str | None = Field(default=None, description="persistent: local directory or s3://bucket/prefix of the "
                              "memory store; None: <storage.out>/memory.")
    prior_ttl_s: float | None = Field(default=30 * 86400, gt=0, description="Records written to the store expire after "
                                      "this; expired ones are ignored and reported. None: never.")
    lessons_max: int = Field(default=4, ge=0, description="Most prior lessons shown to the Planner.")
    reverify_max: int = Field(default=2, ge=0, description="Most prior evidence records re-verified at the start of a run "
                              "(each is an Executor and a Verifier call under the run's budget).")
    similar_min: float = Field(default=0.6, ge=0.0, le=1.0, description="Word overlap (Jaccard) at which a task of the "
                               "same family counts as similar.")


class GeneratorConfig(_Section):
    """How the Generator states the answer."""

    answer: Literal["span", "free"] = Field(
        default="span", description="span: the answer is one of the values the verified evidence states (numbers, names, "
        "dates, a program's printed result, yes/no; tasks/modules/spans.py), enforced by the reply schema: a small model picks "
        "the right value far more often than it writes it, and the answer is grounded by construction. free: the model "
        "writes the answer (strong models; answers that are not a span of the evidence).")
    max_spans: int = Field(default=80, ge=4, description="span: most candidate values offered (newest evidence first).")
    claims_first: bool = Field(default=True, description="The reply quotes its supporting evidence (the claims) before "
                               "it states the answer, so a model decoding in field order picks the value after the "
                               "sentence that holds it; a yes/no question keeps the answer first. Replayed on the "
                               "tables' evidence: +3.9 points [+0.3, +8.1], 12 better, 3 worse of 242 (docs/results-v2.md).")
    direct_max_tokens: int = Field(default=512, ge=1, description="The direct baseline's one call (the Generator's "
                                   "model, no tools): room to reason step by step before its Answer line.")


class VerifierConfig(_Section):
    """How steps are judged: deterministic checks, an LLM judge (models.verifier), or checks first then the judge."""

    mode: Literal["deterministic", "llm", "hybrid"] = Field(
        default="hybrid", description="hybrid: checks first, the judge only for what they cannot decide (no judge "
        "configured: as deterministic); llm: the judge decides every well-formed step.")
    recompute: bool = Field(default=True, description="Re-run deterministic python steps in the sandbox and compare output.")
    recompute_max_s: float = Field(default=2.0, ge=0, description="Re-run only programs that took at most this long.")
    max_source_age_days: float | None = Field(default=None, ge=0, description="Sources older than this before as_of are stale.")
    supersede_in_result: bool = Field(
        default=True, description="Within one search result, a sentence of an older passage that a newer passage "
        "contradicts (same entity, same property, another number) is kept out of the evidence (tasks/checks/supersession.py).")
    judge_confidence_cap: float = Field(default=0.5, ge=0.0, le=1.0,
                                        description="Most confidence when the judge shares a model with the Planner or Executor.")
    independent: bool = Field(
        default=True, description="With a verifier model (models.verifier, hybrid): for a python step of a word problem "
        "the model writes its own programs for the question, without the Planner's, runs them in the sandbox, and "
        "independent_quorum of them agreeing on another value reject the step (both values go to the Planner).")
    independent_samples: int = Field(
        default=1, ge=1, le=9, description="Most independent programs per question: the first greedy, the rest "
        "sampled. Drawn once per question and only while they can still decide (one that reproduces the step's "
        "value passes it).")
    independent_quorum: int = Field(
        default=1, ge=1, description="Independent programs that must agree on one value other than the step's to "
        "reject it (at most independent_samples). A higher quorum rejects fewer correct steps and catches fewer "
        "wrong ones (docs/verifier-eval.md).")
    independent_temperature: float = Field(default=0.7, ge=0.0, le=2.0,
                                           description="Sampling temperature of the programs after the first.")
    undecided: Literal["accept", "reject"] = Field(
        default="accept", description="What passes when checks cannot decide and no judge is asked (accepted at low confidence).")
    answer_gate: int = Field(
        default=0, ge=0, le=5, description="Most times per question an answer step is refused because the accepted "
        "search evidence does not yet state a property or a name the question asks about (tasks/checks/coverage.py); "
        "the missing ones go to the Planner. 0: off.")
    evidence_first: bool = Field(
        default=True, description="A python step for a question that states no quantities, before any evidence is "
        "accepted, is refused before it runs, and the next turn must choose a tool that finds evidence "
        "(tasks/checks/grounding.py).")
    on_conflict: Literal["replan", "stop_uncertain", "human_review"] = Field(
        default="replan", description="Next action when a result contradicts accepted memory: seek a tie-breaking source, or stop.")

    @model_validator(mode="after")
    def _quorum_fits(self) -> "VerifierConfig":
        if self.independent_quorum > self.independent_samples:
            raise ValueError(f"verifier.independent_quorum ({self.independent_quorum}) is more than "
                             f"verifier.independent_samples ({self.independent_samples}): raise the samples or lower the quorum")
        return self


class ReviewConfig(_Section):
    """Human review of needs_review answers (issue 9). `review: prefect` is shorthand for {mode: prefect}."""

    mode: Literal["none", "prefect"] = Field(default="none", description="prefect: a run that ends needs_review pauses "
                                             "its flow run for a typed decision in the Prefect UI.")
    timeout_s: int = Field(default=3600, ge=1, description="After this the run goes on and stays needs_review.")
    poll_s: int = Field(default=5, ge=1, description="How often a paused run checks whether it was resumed.")

    @model_validator(mode="before")
    @classmethod
    def _shorthand(cls, v: Any) -> Any:
        return {"mode": v} if isinstance(v, str) else v


class StorageConfig(_Section):
    out: str = Field(default="runs", description="Local directory or s3://bucket/prefix for results.")
    s3_endpoint_url: str | None = Field(default=None, description="Custom S3 endpoint (MinIO, moto).")


class LoggingConfig(_Section):
    level: Literal["debug", "info", "warning", "error"] = "info"
    console: bool = Field(default=False, description="Also print events to stderr.")


class ModelServerConfig(_Section):
    """An OpenAI-compatible model server supervised by Ray actors; the listed roles talk to it (backend openai)."""

    roles: list[str] = Field(default_factory=lambda: ["planner", "generator"],
                             description="Roles whose models this server replaces: planner, generator, verifier, generalist.")
    engine: Literal["llama_cpp", "vllm", "command"] = Field(
        default="llama_cpp", description="llama_cpp: llama-cpp-python's server (CPU, GGUF); vllm: `vllm serve` (GPU); "
        "command: any server started by `command`.")
    model: str = Field(default="qwen2.5-coder-0.5b", description="Model name the server serves and roles send "
                       "(llama_cpp without model_path: a registered embedded model).")
    model_path: str | None = Field(default=None, description="llama_cpp: a GGUF file (default: the registry's file for "
                                   "`model`); "
                                   "vllm: a Hugging Face id or local directory (default: `model`).")
    command: list[str] = Field(default_factory=list, description="command: argv with {host}, {port}, {model} placeholders.")
    extra_args: list[str] = Field(default_factory=list, description="Appended to the server's command line.")
    replicas: int = Field(default=1, ge=1, le=64, description="Server processes, each in its own actor, load-balanced.")
    num_cpus: float = Field(default=1.0, ge=0, description="Ray CPUs reserved by each replica.")
    num_gpus: float = Field(default=0.0, ge=0, description="Ray GPUs per replica (vllm); Ray sets CUDA_VISIBLE_DEVICES.")
    resources: dict[str, float] = Field(default_factory=dict, description="Custom Ray resources per replica (node pinning).")
    host: str = Field(default="127.0.0.1", description="Bind address; 0.0.0.0 serves other nodes (the node's IP is advertised).")
    n_ctx: int = Field(default=2048, ge=256, description="Context window (llama_cpp --n_ctx, vllm --max-model-len).")
    n_threads: int | None = Field(default=None, ge=1, description="llama_cpp threads (default: as the embedded backend).")
    startup_timeout_s: float = Field(default=180.0, gt=0, description="Longest a server may take to answer /v1/models.")
    health_interval_s: float = Field(default=2.0, gt=0, description="How often the supervisor checks the server.")
    max_failed_checks: int = Field(default=3, ge=1, description="Failed health checks in a row before a restart.")

    @field_validator("roles")
    @classmethod
    def _known_roles(cls, v: list[str]) -> list[str]:
        unknown = set(v) - {"planner", "generator", "verifier", "generalist"}
        if unknown:
            raise ValueError(f"unknown role(s) {sorted(unknown)}; roles are planner, generator, verifier, generalist")
        return v


class RayActorsConfig(_Section):
    """Placement of one kind of actor."""

    num_cpus: float = Field(default=0.0, ge=0, description="Ray CPUs reserved by each actor.")
    resources: dict[str, float] = Field(default_factory=dict, description="Custom Ray resources each actor needs (node pinning).")


class RaySandboxConfig(RayActorsConfig):
    actors: int = Field(default=2, ge=1, le=256, description="Sandbox actors in the pool: programs run in parallel.")


class RayConfig(_Section):
    """Tools and model servers as Ray actors. Off by default: tools then run in the calling process."""

    enabled: bool = Field(default=False, description="Python sandboxes, the search index and model servers run as Ray actors.")
    address: str | None = Field(default=None, description="Ray cluster to join; None: $RAY_ADDRESS, else a local "
                                "loopback-only instance.")
    namespace: str = Field(default="agentflow", description="Ray namespace of the named actors.")
    num_cpus: int | None = Field(default=None, ge=1, description="Local instance: CPUs Ray may schedule (default: all).")
    object_store_mb: int = Field(default=256, ge=64, description="Local instance: object store size.")
    temp_dir: str = Field(default="/tmp/agentflow-ray", description="Local instance: Ray's session files (keep it short).")
    max_restarts: int = Field(default=3, ge=-1, description="Restarts of a dead actor (-1: unlimited). Calls are never retried.")
    call_timeout_s: float = Field(default=30.0, gt=0, description="Slack on top of a tool's own limit before a call is given up.")
    sandbox: RaySandboxConfig = Field(default_factory=RaySandboxConfig)
    search: RayActorsConfig = Field(default_factory=RayActorsConfig)
    model_servers: dict[str, ModelServerConfig] = Field(default_factory=dict, description="Named model servers.")

    @field_validator("model_servers")
    @classmethod
    def _one_server_per_role(cls, v: dict[str, ModelServerConfig]) -> dict[str, ModelServerConfig]:
        seen: dict[str, str] = {}
        for name, server in v.items():
            for role in server.roles:
                if role in seen:
                    raise ValueError(f"role {role!r} is served by both {seen[role]!r} and {name!r}")
                seen[role] = name
        return v


class RewardConfig(_Section):
    """Flow-GRPO reward terms on top of the benchmark's mechanical score (tasks/learn/reward.py)."""

    correct: float = Field(default=1.0, ge=0, description="Reward for a final answer the scorer accepts.")
    safe_stop: float = Field(default=0.25, ge=0, description="Credit for stopping 'uncertain' after using tools, when "
                             "safe_stop_when holds and the scorer did not already count the stop correct.")
    safe_stop_when: Literal["unanswerable", "evidence_missing"] = Field(
        default="unanswerable", description="unanswerable: only on questions without an answer (verified by the data); "
        "evidence_missing: also on answerable ones whose gold facts no accepted evidence holds (pays for giving up).")
    tool_cost: float = Field(default=0.02, ge=0, description="Penalty per tool cost unit spent.")
    malformed_plan: float = Field(default=0.1, ge=0, description="Penalty per Planner output that was not a valid plan.")


class LoraSettings(_Section):
    r: int = Field(default=8, ge=1, description="LoRA rank.")
    alpha: int = Field(default=16, ge=1)
    dropout: float = Field(default=0.0, ge=0, lt=1)
    target_modules: list[str] = Field(default_factory=lambda: ["q_proj", "k_proj", "v_proj", "o_proj"])


AdvantageScale = Literal["none", "std"]
"""How a group's advantages are scaled (tasks/learn/grpo.group_advantages): none = r - mean, std = (r - mean) / std."""


class TrainConfig(_Section):
    """Flow-GRPO training of the Planner (flows/train.py); the other roles stay on their own backends, frozen."""

    train_questions: str | None = Field(default=None, description="JSONL questions, or a world directory (questions.jsonl).")
    val_questions: str | None = Field(default=None, description="Validation questions (JSONL or a world directory).")
    base_model: str | None = Field(default=None, description="A GGUF file or a local Hugging Face model directory; "
                                   "or a registered embedded model's name (smollm2-135m, ...); None: the registry's default "
                                   "(qwen2.5-coder-0.5b).")
    device: str = Field(default="cpu", description="Learner device (cpu, cuda).")
    steps: int = Field(default=10, ge=1, description="Policy updates.")
    questions_per_step: int = Field(default=2, ge=1, description="Questions per batch (each gets group_size rollouts).")
    group_size: int = Field(default=4, ge=1, description="G: trajectories per question (8 in the reference).")
    temperature: float = Field(default=1.0, gt=0, le=2.0, description="Planner sampling temperature during rollouts.")
    template_fields: list[str] = Field(default_factory=lambda: ["sub_goal", "tool", "tool_input"], description=
                                       "The Planner replies with these JSON fields in this order (keys forced, values "
                                       "sampled, the tool among the allowed tools; its worked examples are shown the "
                                       "same way); []: free text (small models rarely write valid plans). The sub-goal "
                                       "first, as the embedded path's schema has it: with the tool first the 0.5B chose "
                                       "python for 43 of 51 steps, lookups included (docs/training.md).")
    advantage_scale: AdvantageScale = Field(
        default="none", description="none: advantage r - mean over the question's group (Dr. GRPO); std: divided by "
        "the group's std too (GRPO), which makes a group differing only in tool cost push as hard as one differing in "
        "correctness: on the 0.5B it taught the Planner to stop early (docs/training.md).")
    learning_rate: float = Field(default=5e-5, gt=0)
    weight_decay: float = Field(default=0.0, ge=0)
    max_grad_norm: float = Field(default=1.0, gt=0)
    epochs_per_batch: int = Field(default=1, ge=1, description="Optimizer passes over one batch of rollouts.")
    clip_low: float = Field(default=0.2, ge=0, lt=1, description="Ratio clip below 1 (1 - clip_low).")
    clip_high: float = Field(default=0.3, ge=0, description="Ratio clip above 1 (1 + clip_high).")
    kl_coef: float = Field(default=0.001, ge=0, description="KL penalty (k3) to the reference: the base model, adapter off.")
    lora: LoraSettings = Field(default_factory=LoraSettings)
    reward: RewardConfig = Field(default_factory=RewardConfig)
    workers: int = Field(default=1, ge=0, le=64, description="Rollout workers (Ray actors); 0: in the driver process.")
    worker_cpus: float = Field(default=1.0, ge=0, description="Ray CPUs reserved per rollout worker.")
    worker_gpus: float = Field(default=0.0, ge=0, description="Ray GPUs per rollout worker.")
    torch_threads: int = Field(default=1, ge=1, description="torch threads per process (learner and each worker).")
    share_prefix: int = Field(default=64, ge=0, description="Turns of an update whose prompts share at least this many "
                              "tokens run the shared prefix once (same gradient, less compute); 0: every turn whole.")
    update_threads: int = Field(default=0, ge=0, description="torch threads of the learner during the policy update, "
                                "when the rollout workers are idle; 0: every core this process may run on (x1.49 over "
                                "one thread on 2 idle cores: `python -m flows.bench run --only policy_update`).")
    eval_every: int = Field(default=5, ge=0, description="Evaluate on val_questions every N steps (0: never).")
    eval_questions: int = Field(default=8, ge=1, description="How many validation questions per evaluation.")
    checkpoint_every: int = Field(default=5, ge=1, description="Save a checkpoint every N steps (and after the last).")
    policy_server: str | None = Field(default=None, description="GPU path: base URL of an OpenAI-compatible vLLM server "
                                      "started with --enable-lora; rollouts sample there and the adapter is reloaded "
                                      "after every update. None: rollouts sample with transformers in the workers.")
    policy_server_adapter_dir: str | None = Field(default=None, description="GPU path: a directory the vLLM server can "
                                                  "read, where each update's adapter is written before it is reloaded.")
    seed: int = 0


class BatchConfig(_Section):
    concurrency: int = Field(default=1, ge=1, le=256, description="Questions researched at the same time (threads of one flow run).")
    module_tasks: bool = Field(default=True, description="Each module call is its own Prefect task (visible in the UI, "
                               "a few ms each); False: one task per question.")


class Settings(BaseSettings):
    """The whole resolved configuration of a run."""

    model_config = SettingsConfigDict(env_prefix="AGENTFLOW_", env_nested_delimiter="__", extra="forbid")

    models: RoleModels = Field(default_factory=RoleModels)
    budget: BudgetConfig = Field(default_factory=BudgetConfig)
    tools: ToolsConfig = Field(default_factory=ToolsConfig)
    memory: MemoryConfig = Field(default_factory=MemoryConfig)
    verifier: VerifierConfig = Field(default_factory=VerifierConfig)
    generator: GeneratorConfig = Field(default_factory=GeneratorConfig)
    storage: StorageConfig = Field(default_factory=StorageConfig)
    logging: LoggingConfig = Field(default_factory=LoggingConfig)
    ray: RayConfig = Field(default_factory=RayConfig)
    batch: BatchConfig = Field(default_factory=BatchConfig)
    review: ReviewConfig = Field(default_factory=ReviewConfig)
    train: TrainConfig = Field(default_factory=TrainConfig)
    seed: int = 0
    as_of: str | None = Field(default=None, description="ISO date the run treats as 'now' for source freshness.")

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        # Environment overrides the file; init kwargs carry file + CLI values merged by load_settings.
        return (env_settings, init_settings)

    @model_validator(mode="after")
    def _judge_configured(self) -> "Settings":
        if self.verifier.mode == "llm" and self.models.verifier is None:
            raise ValueError("verifier.mode=llm needs a judge model: set models.verifier (e.g. models.verifier.backend=embedded)")
        return self


def _set_dotted(tree: dict[str, Any], dotted: str, value: Any) -> None:
    node = tree
    parts = dotted.split(".")
    for part in parts[:-1]:
        node = node.setdefault(part, {})
        if not isinstance(node, dict):
            raise ConfigError(f"override {dotted!r}: {part!r} is not a section")
    node[parts[-1]] = value


def parse_override(text: str) -> tuple[str, Any]:
    """'budget.max_tokens=4000' -> ('budget.max_tokens', 4000). Values are parsed as YAML scalars."""
    if "=" not in text:
        raise ConfigError(f"override {text!r} must look like section.key=value")
    key, raw = text.split("=", 1)
    return key.strip(), yaml.safe_load(raw)


def read_config_file(path: str | Path) -> dict[str, Any]:
    p = Path(path)
    if not p.is_file():
        raise ConfigError(f"config file {str(p)!r} does not exist")
    try:
        data = yaml.safe_load(p.read_text()) or {}
    except yaml.YAMLError as exc:
        raise ConfigError(f"config file {str(p)!r} is not valid YAML/JSON: {exc}") from exc
    if not isinstance(data, dict):
        raise ConfigError(f"config file {str(p)!r} must hold a mapping at the top level")
    return data


def load_settings(path: str | Path | None = None, overrides: list[str] | None = None, **values: Any) -> Settings:
    """Resolve file + keyword values + CLI overrides (+ env, which beats the file)."""
    tree: dict[str, Any] = read_config_file(path) if path else {}
    for key, value in values.items():
        _set_dotted(tree, key, value)
    cli = [parse_override(o) for o in overrides or []]
    for key, value in cli:
        _set_dotted(tree, key, value)
    try:
        settings = Settings(**tree)
    except ValidationError as exc:
        raise ConfigError(_explain(exc, path)) from exc
    if cli:  # CLI beats env: re-apply on the resolved tree
        resolved = settings.model_dump(mode="json")
        for key, value in cli:
            _set_dotted(resolved, key, value)
        try:
            settings = Settings.model_validate(resolved)
        except ValidationError as exc:
            raise ConfigError(_explain(exc, path)) from exc
    return settings


def _explain(exc: ValidationError, path: str | Path | None) -> str:
    where = f" in {path}" if path else ""
    lines = [f"invalid configuration{where}:"]
    for err in exc.errors():
        loc = ".".join(str(p) for p in err["loc"])
        lines.append(f"  {loc}: {err['msg']}")
    return "\n".join(lines)


def dump_settings(settings: Settings) -> str:
    """The resolved config as YAML, stored beside every run's results."""
    return yaml.safe_dump(json.loads(settings.model_dump_json()), sort_keys=False)


def project_home() -> Path:
    """Where local state (Prefect home, caches) lives: $AGENTFLOW_HOME or the current directory."""
    return Path(os.environ.get("AGENTFLOW_HOME", ".")).resolve()
