"""Model backends behind one interface (`ModelBackend.complete`).

`build_backend(config)` returns the backend for a role's ModelConfig: `embedded` (llama.cpp,
in-process, offline), `openai` (any OpenAI-compatible endpoint), `scripted` (test double), or a
trainable policy that records token ids and logprobs per call: `hf_policy` (transformers + LoRA)
or `vllm_policy` (a vLLM server with LoRA).
Backends are cached per process, keyed by the config's JSON: a Prefect task running in a thread
or a Ray worker builds its own client/model where it runs, once, and later calls reuse it (the
scripted backend's position in its script therefore carries across calls in one process).
Embedded models are additionally shared across configs with the same (path, n_ctx, n_threads).
"""

from __future__ import annotations

import threading
from pathlib import Path

from infra.models.base import Completion, ModelBackend, ModelError, PromptTooLong
from infra.runtime.settings import ModelConfig

__all__ = [
    "Completion",
    "ModelBackend",
    "ModelError",
    "PromptTooLong",
    "build_backend",
    "clear_backend_cache",
    "locate_embedded_model",
]

_BACKENDS: dict[str, ModelBackend] = {}
_LOCK = threading.Lock()


def locate_embedded_model(name: str | None = None) -> Path:
    """A registered embedded GGUF (default: the registry's default) from the model cache (ModelError naming the
    fetch command if missing)."""
    from infra.models import registry

    return registry.locate(name or registry.DEFAULT_EMBEDDED)


def _construct(config: ModelConfig) -> ModelBackend:
    if config.backend == "embedded":
        from infra.models.embedded import EmbeddedBackend

        return EmbeddedBackend(config)
    if config.backend == "openai":
        from infra.models.openai_compat import OpenAIBackend

        return OpenAIBackend(config)
    if config.backend == "scripted":
        from infra.models.scripted import ScriptedBackend

        return ScriptedBackend(config)
    if config.backend == "hf_policy":
        from infra.models.hf_policy import HFPolicyBackend

        return HFPolicyBackend(config)
    if config.backend == "vllm_policy":
        from infra.models.vllm_policy import VLLMPolicyBackend

        return VLLMPolicyBackend(config)
    raise ModelError(f"unknown model backend {config.backend!r}; use embedded, openai, scripted, hf_policy or vllm_policy")


def build_backend(config: ModelConfig) -> ModelBackend:
    """The (per-process cached) backend for `config`."""
    key = config.model_dump_json()
    backend = _BACKENDS.get(key)
    if backend is not None:
        return backend
    with _LOCK:
        backend = _BACKENDS.get(key)
        if backend is None:
            backend = _construct(config)
            _BACKENDS[key] = backend
        return backend


def clear_backend_cache() -> None:
    """Forget cached backends (tests: restart scripted replies; loaded GGUF models stay loaded)."""
    with _LOCK:
        backends = list(_BACKENDS.values())
        _BACKENDS.clear()
    for backend in backends:
        close = getattr(backend, "close", None)
        if close is not None:
            try:
                close()
            except Exception:
                pass
