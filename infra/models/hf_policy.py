"""A trainable policy: a Hugging Face causal LM with a PEFT LoRA adapter; the `hf_policy` backend samples from it.

Every call keeps what Flow-GRPO needs, with no re-tokenisation of text: a `Turn` with the prompt's
token ids (the chat template applied to the messages), the sampled token ids and their
log-probabilities under the distribution they were sampled from (softmax of logits / temperature,
no top-k/top-p). Turns go to the policy's buffer; a rollout worker drains it per trajectory.
The text goes back to the caller unchanged, so the real Planner validates it (no constrained
decoding here; a malformed plan is penalised by the reward).

The base model is the embedded SmolLM2-135M-Instruct GGUF (dequantised to fp32 by transformers +
gguf) or any GGUF file / local model directory. `PolicyModel`s are cached per process by
(base, adapter, device), so every config that differs only in sampling shares one model.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import structlog

from infra.models.base import Completion, ModelError, PromptTooLong
from infra.runtime.settings import LoraSettings, ModelConfig

log = structlog.get_logger(__name__)


@dataclass
class Turn:
    """One policy call, as sampled: the training record of a Planner turn."""

    prompt_ids: list[int]
    completion_ids: list[int]
    logprobs: list[float]
    """log pi_old(token) for each completion token, from the policy that sampled it."""
    temperature: float = 1.0
    """The distribution the logprobs are of: softmax(logits / temperature)."""
    finish_reason: str = "stop"
    text: str = ""
    mask: list[int] | None = None
    """1 for a sampled token, 0 for a token the template forced (not trained on); None: all sampled."""
    allowed: list[list[int] | None] | None = None
    """Per completion token: the token ids it was sampled among (an enum field), or None (the whole vocabulary)."""

    def to_dict(self) -> dict[str, Any]:
        return {"prompt_ids": list(self.prompt_ids), "completion_ids": list(self.completion_ids),
                "logprobs": list(self.logprobs), "temperature": self.temperature,
                "finish_reason": self.finish_reason, "text": self.text,
                "mask": None if self.mask is None else list(self.mask),
                "allowed": None if self.allowed is None else [None if a is None else list(a) for a in self.allowed]}


FIELD_TOKENS: dict[str, int | None] = {"tool": 8, "tool_input": None}
"""Most sampled tokens per template field (others: DEFAULT_FIELD_TOKENS); None: what the reply's max_new_tokens
leaves. The tool's input is a program or a query: at a sub-goal's 40 tokens, 2 of the 13 programs the 0.5B's
templated Planner wrote on the claim's test split ended mid-expression (`'(' was never closed`)."""
DEFAULT_FIELD_TOKENS = 40


def field_budget(name: str, used: int, max_new_tokens: int) -> int:
    """Tokens a template field may sample after `used` tokens of the reply (<= 0: none left)."""
    cap = FIELD_TOKENS.get(name, DEFAULT_FIELD_TOKENS)
    left = max_new_tokens - used
    return left if cap is None else min(cap, left)


REUSE_MIN_TOKENS = 64
"""A prompt resumes from the previous prompt's keys and values when the two share at least this many leading tokens
(every Planner prompt starts with the same ~380-token system prompt and worked examples): a turn then runs only its
own tail. Fewer shared tokens are not worth the copy."""


class _Cursor:
    """Next-token logits over a growing token sequence, with a KV cache: each call runs only the tokens the cursor
    has not seen. One templated turn (forced keys, a tool chosen token by token, values sampled until their quote)
    then runs its prompt once, not once per field and per choice token."""

    def __init__(self, policy: PolicyModel):
        self.policy, self.ids, self.cache, self.last = policy, [], None, None

    def logits(self, ids: list[int]):
        """Raw logits (float32) for the token after `ids`."""
        import torch

        n = len(self.ids)
        if ids[:n] != self.ids or (len(ids) == n and self.last is None):
            self.ids, self.cache, self.last, n = [], None, None, 0  # not an extension of what it ran: start over
        if len(ids) > n:
            p = self.policy
            with p.lock, torch.no_grad():
                fresh = n == 0
                if fresh:
                    n, self.cache = p._resume(ids)
                out = p.model(input_ids=torch.tensor([ids[n:]], device=p.device), cache=self.cache, use_cache=True,
                              logits_to_keep=1)
                if fresh:  # this prompt's keys and values: the next prompt resumes from its shared part
                    p._last_prompt = (list(ids), [(layer.keys, layer.values) for layer in out.cache.layers])
            self.cache, self.last, self.ids = out.cache, out.logits[0, -1].float(), list(ids)
        return self.last


def shared_length(a: list[int], b: list[int], limit: int | None = None) -> int:
    """How many leading tokens `a` and `b` share (at most `limit`)."""
    n, end = 0, min(len(a), len(b), len(a) if limit is None else limit)
    while n < end and a[n] == b[n]:
        n += 1
    return n


def json_string_value(raw: str) -> str:
    """A sampled JSON string body (up to its closing quote) as the text it encodes: escapes decoded, so a program
    written as "x = 1\\nprint(x)" runs as two lines. A body that is not valid JSON keeps its text, quotes unescaped."""
    import json as _json

    try:
        return _json.loads(f'"{raw}"', strict=False).strip()  # strict=False: a raw newline is kept
    except ValueError:
        return raw.replace('\\"', '"').strip()


def _closing_quote(text: str) -> int:
    """Index of the first double quote not escaped by a backslash, or -1."""
    i = 0
    while i < len(text):
        if text[i] == "\\":
            i += 2
            continue
        if text[i] == '"':
            return i
        i += 1
    return -1


def resolve_base(path: str | None) -> tuple[str, str | None]:
    """(directory, gguf file name or None) of a base model: a GGUF file, a model directory, or a registered
    embedded model's name (None: the registry's default)."""
    from infra.models import registry

    if path is None or registry.is_registered(path):
        gguf = registry.locate(path or registry.DEFAULT_EMBEDDED)
        return str(gguf.parent), gguf.name
    p = Path(path).expanduser()
    if p.is_file() and p.suffix == ".gguf":
        return str(p.parent), p.name
    if p.is_dir() and (p / "config.json").is_file():
        return str(p), None
    raise ModelError(f"base model {path!r} is neither a .gguf file nor a model directory with config.json")


POLICY_FILE = "agentflow_policy.json"

_BASES: dict[tuple[str, str | None], tuple[Any, Any]] = {}
_LOCK = threading.Lock()


def load_base(path: str | None, device: str = "cpu"):
    """(tokenizer, fresh fp32 model) of a base model; tokenizers are cached, models are not (PEFT wraps them)."""
    import os

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    directory, gguf = resolve_base(path)
    kwargs = {"gguf_file": gguf} if gguf else {}
    t0 = time.perf_counter()
    with _LOCK:
        cached = _BASES.get((directory, gguf))
        tokenizer = cached[0] if cached else AutoTokenizer.from_pretrained(directory, **kwargs)
        _BASES[(directory, gguf)] = (tokenizer, None)
    if tokenizer.chat_template is None:
        raise ModelError(f"base model {path or gguf!r} has no chat template")
    quiet = os.environ.get("TQDM_DISABLE")
    os.environ["TQDM_DISABLE"] = "1"  # the GGUF de-quantisation progress bar
    try:
        model = AutoModelForCausalLM.from_pretrained(directory, dtype=torch.float32, **kwargs).to(device)
    finally:
        if quiet is None:
            os.environ.pop("TQDM_DISABLE", None)
        else:
            os.environ["TQDM_DISABLE"] = quiet
    log.info("policy_base_loaded", base=path or gguf, device=device, seconds=round(time.perf_counter() - t0, 2))
    return tokenizer, model


def saved_template_fields(adapter: str | Path) -> list[str]:
    """The reply template saved with an adapter (save_adapter's POLICY_FILE); [] when it has none."""
    path = Path(adapter) / POLICY_FILE
    if not path.is_file():
        return []
    import json as _json

    return list(_json.loads(path.read_text()).get("template_fields") or [])


class PolicyModel:
    """Base model + LoRA adapter: sampling with recorded logprobs, per-token logprobs for training, adapter I/O."""

    def __init__(self, base_model: str | None = None, *, adapter: str | None = None, lora: LoraSettings | None = None,
                 device: str = "cpu", trainable: bool = False, seed: int = 0, template_fields: list[str] | None = None):
        import torch
        from peft import LoraConfig, PeftModel, get_peft_model

        self.device = device
        self.base_model = base_model
        self.tokenizer, base = load_base(base_model, device)
        if adapter:
            if not (Path(adapter) / "adapter_config.json").is_file():
                raise ModelError(f"adapter {adapter!r} is not a PEFT adapter directory (no adapter_config.json)")
            self.model = PeftModel.from_pretrained(base, adapter, is_trainable=trainable)
        else:
            lora = lora or LoraSettings()
            torch.manual_seed(seed)  # the adapter's A matrices; B starts at zero, so the policy starts as the base
            cfg = LoraConfig(r=lora.r, lora_alpha=lora.alpha, lora_dropout=lora.dropout,
                             target_modules=list(lora.target_modules), task_type="CAUSAL_LM")
            self.model = get_peft_model(base, cfg)
        if not trainable:
            for p in self.model.parameters():
                p.requires_grad_(False)
        self.model.eval()
        self.eos_ids = self._eos_ids()
        self.template_fields: list[str] = list(template_fields or [])
        """How this policy replies (kept with a saved adapter); a config's template_fields take precedence."""
        if adapter and not self.template_fields:
            self.template_fields = saved_template_fields(adapter)
        self.turns: list[Turn] = []
        self.recording = False
        """Keep a Turn per call (rollout workers switch it on; inference with a trained adapter keeps nothing)."""
        self.lock = threading.Lock()
        self.version = 0
        """Increases with every load_lora_state: which policy sampled a turn."""
        self._last_prompt: tuple[list[int], list[tuple[Any, Any]]] | None = None
        """The last sampled prompt's ids and each layer's keys and values under the current weights (see _resume)."""

    def _eos_ids(self) -> list[int]:
        ids = {self.tokenizer.eos_token_id}
        for tok in ("<|im_end|>", "<|eot_id|>", "<|endoftext|>"):
            tid = self.tokenizer.convert_tokens_to_ids(tok)
            if isinstance(tid, int) and tid != self.tokenizer.unk_token_id and tid >= 0:
                ids.add(tid)
        gen = getattr(self.model, "generation_config", None)
        eos = getattr(gen, "eos_token_id", None) if gen else None
        ids.update(eos if isinstance(eos, list) else [eos] if eos is not None else [])
        return sorted(i for i in ids if i is not None)

    # ------------------------------------------------------------------ sampling

    def encode_chat(self, messages: list[dict[str, str]]) -> list[int]:
        """The prompt's token ids: the model's chat template with the generation prompt."""
        ids = self.tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)
        if hasattr(ids, "keys"):  # BatchEncoding in newer transformers
            ids = ids["input_ids"]
        return [int(i) for i in ids]

    def sample(self, prompt_ids: list[int], *, max_new_tokens: int, temperature: float, seed: int | None = None,
               max_time: float | None = None, stopping_criteria=None) -> Turn:
        """Sample a completion; logprobs are of softmax(logits / T) at each sampled token (T=1 when greedy)."""
        import torch

        greedy = temperature <= 0
        t = 1.0 if greedy else float(temperature)
        inputs = torch.tensor([prompt_ids], device=self.device)
        kwargs: dict[str, Any] = dict(max_new_tokens=max_new_tokens, do_sample=not greedy, output_logits=True,
                                      return_dict_in_generate=True, pad_token_id=self.eos_ids[0],
                                      eos_token_id=self.eos_ids, attention_mask=torch.ones_like(inputs))
        if not greedy:
            kwargs.update(temperature=t, top_k=0, top_p=1.0)
        if max_time:
            kwargs["max_time"] = max(0.05, max_time)
        if stopping_criteria is not None:
            kwargs["stopping_criteria"] = stopping_criteria
        with self.lock, torch.no_grad():
            if seed is not None:
                torch.manual_seed(seed)
            out = self.model.generate(inputs, **kwargs)
        completion = out.sequences[0, len(prompt_ids):].tolist()
        logits = torch.stack(out.logits, dim=1)[0].float() / t  # (n, vocab), raw logits of each step
        n = min(len(completion), logits.shape[0])
        completion = completion[:n]
        logp = torch.log_softmax(logits[:n], dim=-1).gather(-1, torch.tensor(completion, device=logits.device)[:, None])
        finish = "stop" if completion and completion[-1] in self.eos_ids else "length"
        text = self.tokenizer.decode(completion, skip_special_tokens=True)
        return Turn(prompt_ids=list(prompt_ids), completion_ids=completion, logprobs=logp[:, 0].tolist(),
                    temperature=t, finish_reason=finish, text=text)

    def sample_choice(self, prompt_ids: list[int], choices: list[str], temperature: float,
                      seed: int | None = None, cursor: _Cursor | None = None) -> tuple[list[int], list[float], list[list[int]], str]:
        """One of `choices`, token by token, each token sampled among those that continue some choice.

        Returns (token ids, logprobs under the renormalised allowed distribution, allowed ids per token, choice).
        """
        import torch

        seqs = {c: self.tokenizer.encode(c, add_special_tokens=False) for c in dict.fromkeys(choices)}
        greedy = temperature <= 0
        t = 1.0 if greedy else float(temperature)
        gen = None if seed is None else torch.Generator(device="cpu").manual_seed(seed)  # None: torch's global RNG
        cursor = cursor or _Cursor(self)
        ids: list[int] = []
        logps: list[float] = []
        allowed_all: list[list[int]] = []
        while True:
            live = {c: s for c, s in seqs.items() if s[:len(ids)] == ids}
            done = [c for c, s in live.items() if len(s) == len(ids)]
            longer = {s[len(ids)] for s in live.values() if len(s) > len(ids)}
            if done and not longer:
                return ids, logps, allowed_all, done[0]
            allowed = sorted(longer)
            logits = cursor.logits(list(prompt_ids) + ids) / t
            sub = torch.log_softmax(logits[allowed], dim=-1).cpu()
            k = int(sub.argmax()) if greedy else int(torch.multinomial(sub.exp(), 1, generator=gen))
            ids.append(allowed[k])
            logps.append(float(sub[k]))
            allowed_all.append(allowed)

    def sample_fields(self, prompt_ids: list[int], fields: list[str], *, max_new_tokens: int, temperature: float,
                      seed: int | None = None, max_time: float | None = None,
                      choices: dict[str, list[str]] | None = None) -> Turn:
        """A light template: the JSON keys and quotes are forced, each string value is sampled until its quote.

        A field with `choices` (a JSON-schema enum, e.g. the tool) is sampled among them only. The
        turn's completion holds every token the model conditioned on; forced tokens have mask 0 and
        logprob 0 (they are not trained on). The text is the JSON object of the sampled values.
        """
        import json as _json

        ids = list(prompt_ids)
        cursor = _Cursor(self)
        completion: list[int] = []
        logprobs: list[float] = []
        mask: list[int] = []
        allowed: list[list[int] | None] = []
        values: dict[str, str] = {}
        choices = choices or {}
        t_end = time.monotonic() + max_time if max_time else None
        finish = "stop"
        temp = 1.0 if temperature <= 0 else float(temperature)
        for k, name in enumerate(fields):
            forced = ("{" if k == 0 else '", ') + f'"{name}": "'
            forced_ids = self.tokenizer.encode(forced, add_special_tokens=False)
            ids += forced_ids
            completion += forced_ids
            logprobs += [0.0] * len(forced_ids)
            mask += [0] * len(forced_ids)
            allowed += [None] * len(forced_ids)
            if choices.get(name):
                c_ids, c_logps, c_allowed, value = self.sample_choice(
                    ids, choices[name], temperature, None if seed is None else seed + 1000 + k, cursor=cursor)
                ids += c_ids
                completion += c_ids
                logprobs += c_logps
                mask += [1] * len(c_ids)
                allowed += c_allowed
                values[name] = value
                continue
            budget = field_budget(name, len(completion), max_new_tokens)
            left = t_end - time.monotonic() if t_end else None
            if budget <= 0 or (left is not None and left <= 0):
                finish = "length"
                values[name] = ""
                continue
            sampled, value_logps = self._sample_value(cursor, ids, budget, temperature,
                                                      None if seed is None else seed + k, t_end)
            if sampled and sampled[-1] in self.eos_ids:  # the value ends where the model wanted to stop
                sampled, value_logps = sampled[:-1], value_logps[:-1]
            ids += sampled
            completion += sampled
            logprobs += value_logps
            mask += [1] * len(sampled)
            allowed += [None] * len(sampled)
            text = self.tokenizer.decode(sampled, skip_special_tokens=True)
            q = _closing_quote(text)
            values[name] = json_string_value(text[:q] if q >= 0 else text)
            if q < 0 and len(sampled) >= budget:
                finish = "length"
        tail = self.tokenizer.encode('"}', add_special_tokens=False)
        completion += tail
        logprobs += [0.0] * len(tail)
        mask += [0] * len(tail)
        allowed += [None] * len(tail)
        return Turn(prompt_ids=list(prompt_ids), completion_ids=completion, logprobs=logprobs, temperature=temp,
                    finish_reason=finish, text=_json.dumps(values), mask=mask,
                    allowed=allowed if any(a is not None for a in allowed) else None)

    def _sample_value(self, cursor: _Cursor, ids: list[int], budget: int, temperature: float, seed: int | None,
                      t_end: float | None) -> tuple[list[int], list[float]]:
        """A JSON string value, token by token on the turn's cursor, until its closing quote, an end-of-sequence
        token, `budget` tokens or the deadline; logprobs of softmax(logits / T) (T = 1 when greedy)."""
        import torch

        greedy = temperature <= 0
        t = 1.0 if greedy else float(temperature)
        gen = None if seed is None else torch.Generator(device="cpu").manual_seed(seed)  # None: torch's global RNG
        sampled: list[int] = []
        logps: list[float] = []
        while len(sampled) < budget and not (t_end and sampled and time.monotonic() >= t_end):
            logp = torch.log_softmax(cursor.logits(ids + sampled) / t, dim=-1).cpu()
            tok = int(logp.argmax()) if greedy else int(torch.multinomial(logp.exp(), 1, generator=gen))
            sampled.append(tok)
            logps.append(float(logp[tok]))
            if tok in self.eos_ids or _closing_quote(self.tokenizer.decode(sampled, skip_special_tokens=True)) >= 0:
                break
        return sampled, logps

    def _resume(self, ids: list[int]):
        """(tokens already run, their cache) for a new prompt: the part it shares with the last prompt, when that is at
        least REUSE_MIN_TOKENS long; (0, None) otherwise. The stored tensors are sliced, never written: the cache
        grows by concatenation. Caller holds the lock."""
        if self._last_prompt is None:
            return 0, None
        prev, layers = self._last_prompt
        n = shared_length(prev, ids, len(ids) - 1)  # at least one token runs, for the next token's logits
        if n < REUSE_MIN_TOKENS:
            return 0, None
        from transformers import DynamicCache

        return n, DynamicCache(ddp_cache_data=[(k[:, :, :n], v[:, :, :n]) for k, v in layers], config=self.model.config)

    def weights_changed(self) -> None:
        """Forget cached keys and values: they were computed under the previous adapter weights."""
        with self.lock:
            self._last_prompt = None

    def record(self, turn: Turn) -> None:
        with self.lock:
            self.turns.append(turn)

    def drain_turns(self) -> list[Turn]:
        """The turns recorded since the last drain (one trajectory's, when called per trajectory)."""
        with self.lock:
            turns, self.turns = self.turns, []
        return turns

    # ------------------------------------------------------------------ training

    def prefix_cache(self, prefix_ids: list[int], *, reference: bool = False) -> list[tuple[Any, Any]]:
        """Each layer's keys and values for a prompt prefix several turns share (the system prompt and worked
        examples), computed once: under the adapter they stay in the autograd graph (Learner.update), under the
        base model (reference) without one."""
        import torch

        ids = torch.tensor([list(prefix_ids)], device=self.device)

        def run():
            cache = self.model(input_ids=ids, use_cache=True, logits_to_keep=1).cache
            return [(layer.keys, layer.values) for layer in cache.layers]

        if reference:
            with torch.no_grad(), self.model.disable_adapter():
                return run()
        return run()

    def token_logprobs(self, prompt_ids: list[int], completion_ids: list[int], temperature: float = 1.0, *,
                       reference: bool = False, with_entropy: bool = False,
                       allowed: list[list[int] | None] | None = None,
                       prefix: tuple[int, list[tuple[Any, Any]]] | None = None):
        """Per-token log pi(completion | prompt) (and entropy) under the adapter, or the base model (reference).

        Where `allowed[i]` is given, token i's probability is renormalised over those ids (as it was sampled).
        `prefix` = (L, keys and values of prompt_ids[:L] from `prefix_cache`): only the rest of the prompt and the
        completion are run, attending to the cached prefix (L < len(prompt_ids))."""
        import torch

        start, cache = 0, None
        if prefix is not None:
            from transformers import DynamicCache

            start = prefix[0]
            if not 0 < start < len(prompt_ids):
                raise ValueError(f"a shared prefix of {start} tokens must be shorter than the prompt ({len(prompt_ids)})")
            cache = DynamicCache(ddp_cache_data=list(prefix[1]), config=self.model.config)
        ids = torch.tensor([list(prompt_ids[start:]) + list(completion_ids)], device=self.device)
        n = len(completion_ids)

        def forward():
            # Only the positions that predict completion tokens go through the LM head (vocab-sized logits).
            kw = {"cache": cache, "use_cache": True} if cache is not None else {}
            logits = self.model(input_ids=ids, logits_to_keep=n + 1, **kw).logits[0, :-1].float() / temperature
            logp_all = torch.log_softmax(logits, dim=-1)
            target = torch.tensor(completion_ids, device=self.device)[:, None]
            logp = logp_all.gather(-1, target)[:, 0]
            if allowed is not None:
                parts = []
                for i, ids_i in enumerate(allowed):
                    if ids_i is None:
                        parts.append(logp[i])
                    else:
                        sub = torch.tensor(ids_i, device=self.device)
                        parts.append(logits[i, completion_ids[i]] - torch.logsumexp(logits[i, sub], dim=-1))
                logp = torch.stack(parts)
            ent = -(logp_all.exp() * logp_all).sum(-1) if with_entropy else None
            return logp, ent

        if reference:
            with torch.no_grad(), self.model.disable_adapter():
                return forward()
        return forward()

    def trainable_parameters(self) -> list:
        return [p for p in self.model.parameters() if p.requires_grad]

    def lora_state(self) -> dict[str, Any]:
        """The adapter's weights (CPU tensors): what the learner ships to rollout workers."""
        from peft import get_peft_model_state_dict

        return {k: v.detach().to("cpu").clone() for k, v in get_peft_model_state_dict(self.model).items()}

    def load_lora_state(self, state: dict[str, Any], version: int | None = None) -> None:
        from peft import set_peft_model_state_dict

        with self.lock:
            result = set_peft_model_state_dict(self.model, state)
            unexpected = getattr(result, "unexpected_keys", None)
            if unexpected:
                raise ModelError(f"adapter state has unexpected keys: {unexpected[:3]}")
            self.version = self.version + 1 if version is None else version
            self._last_prompt = None  # computed under the old weights

    def save_adapter(self, directory: str | Path) -> Path:
        """The PEFT adapter, plus `agentflow_policy.json` (how it replies: its template fields)."""
        import json as _json

        out = Path(directory)
        out.mkdir(parents=True, exist_ok=True)
        self.model.save_pretrained(str(out))
        (out / POLICY_FILE).write_text(_json.dumps({"template_fields": self.template_fields}))
        return out


_POLICIES: dict[tuple, PolicyModel] = {}


def _policy_key(config: ModelConfig) -> tuple:
    return (config.model_path, config.adapter, config.device)


def policy_model(config: ModelConfig, lora: LoraSettings | None = None) -> PolicyModel:
    """The process's PolicyModel for an hf_policy config (loaded once per (base, adapter, device)).

    Without an adapter it starts a fresh one with `lora` (a rollout worker then receives the
    learner's weights); with one (a trained Planner) it loads it, frozen.
    """
    key = _policy_key(config)
    with _LOCK:
        policy = _POLICIES.get(key)
    if policy is None:
        policy = PolicyModel(config.model_path, adapter=config.adapter, lora=lora, device=config.device)
        with _LOCK:
            policy = _POLICIES.setdefault(key, policy)
    return policy


def register_policy(config: ModelConfig, policy: PolicyModel) -> None:
    """Make `policy` the model behind every hf_policy config with this (base, adapter, device) in this process."""
    with _LOCK:
        _POLICIES[_policy_key(config)] = policy


def forget_policies() -> None:
    with _LOCK:
        _POLICIES.clear()


def schema_choices(schema: dict[str, Any] | None) -> dict[str, list[str]]:
    """{field: enum values} for the string enums of a flat JSON object schema (e.g. the Planner's tool)."""
    props = (schema or {}).get("properties") or {}
    return {k: [str(x) for x in v["enum"]] for k, v in props.items() if isinstance(v, dict) and v.get("enum")}


class HFPolicyBackend:
    """ModelBackend over a PolicyModel: the Planner's text as usual, plus a recorded Turn per call."""

    def __init__(self, config: ModelConfig):
        self.config = config
        self.name = config.model
        self.policy = policy_model(config)

    def complete(self, messages: list[dict[str, str]], *, json_schema: dict[str, Any] | None = None,
                 max_tokens: int | None = None, temperature: float | None = None, seed: int | None = None,
                 deadline_s: float | None = None) -> Completion:
        t0 = time.perf_counter()
        prompt = self.policy.encode_chat(messages)
        if len(prompt) > self.config.max_input_tokens:
            raise PromptTooLong(len(prompt), self.config.max_input_tokens)
        limit = min(max_tokens or self.config.max_tokens, self.config.max_tokens)
        temp = self.config.temperature if temperature is None else temperature
        max_time = min(deadline_s, self.config.timeout_s) if deadline_s else self.config.timeout_s
        fields = self.config.template_fields or self.policy.template_fields
        try:
            if fields and json_schema is not None:  # a free-form call (the program call) is not templated
                turn = self.policy.sample_fields(prompt, fields, max_new_tokens=limit, temperature=temp, seed=seed,
                                                 max_time=max_time, choices=schema_choices(json_schema))
            else:
                turn = self.policy.sample(prompt, max_new_tokens=limit, temperature=temp, seed=seed, max_time=max_time)
        except (RuntimeError, ValueError) as exc:
            raise ModelError(f"hf_policy generation failed: {exc}") from exc
        if self.policy.recording:
            self.policy.record(turn)
        return Completion(text=turn.text, tokens_in=len(prompt), tokens_out=len(turn.completion_ids),
                          latency_ms=(time.perf_counter() - t0) * 1000, model=self.name, finish_reason=turn.finish_reason)

    @property
    def reply_fields(self) -> list[str]:
        """The JSON fields of this backend's replies, in order (worked examples are shown in the same form)."""
        return list(self.config.template_fields or self.policy.template_fields)

    def drain_turns(self) -> list[Turn]:
        return self.policy.drain_turns()
