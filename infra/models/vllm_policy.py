"""The GPU path of the trainable policy: an OpenAI-compatible vLLM server with LoRA enabled (`vllm_policy`).

Same contract as `hf_policy`: each call returns the text and records a `Turn` with the prompt's
token ids, the sampled token ids and their log-probabilities, all taken from the server (no
re-tokenisation here):

- the request asks for ``logprobs: true``, ``return_tokens_as_token_ids: true`` (each logprob entry's
  token is ``"token_id:<id>"``) and ``return_token_ids: true`` (``prompt_token_ids`` and the choice's
  ``token_ids``, vLLM >= 0.10.2); a server without the latter is asked ``POST /tokenize`` with the
  same messages for the prompt's ids;
- the JSON schema goes to the server's guided decoding (``response_format``); vLLM reports raw
  logprobs (its default ``logprobs_mode``), so turns are recorded at temperature 1 without masks
  and the learner compares like with like;
- the model name sent is the LoRA adapter's name; after each update the learner writes the
  adapter to a directory the server can read and calls :func:`reload_adapter`
  (``/v1/unload_lora_adapter`` then ``/v1/load_lora_adapter``; the server needs
  ``VLLM_ALLOW_RUNTIME_LORA_UPDATING=True`` and ``--enable-lora``).

Only exercised here against a fake server on 127.0.0.1 (tests/test_train_vllm.py), not a real vLLM.
"""

from __future__ import annotations

import os
import threading
import time
from typing import Any

import httpx
import structlog

from infra.models.base import Completion, ModelError
from infra.models.hf_policy import Turn
from infra.runtime.settings import ModelConfig

log = structlog.get_logger(__name__)


def _root(base_url: str) -> str:
    url = base_url.rstrip("/")
    return url[: -len("/v1")] if url.endswith("/v1") else url


def _client(timeout_s: float) -> httpx.Client:
    # trust_env=False: never route a policy server call through a proxy from the environment.
    return httpx.Client(timeout=timeout_s, trust_env=False)


def _token_id(entry: dict[str, Any]) -> int:
    tok = str(entry.get("token", ""))
    if not tok.startswith("token_id:"):
        raise ModelError(f"vllm_policy: logprob token {tok[:40]!r} is not 'token_id:N' (return_tokens_as_token_ids unsupported?)")
    return int(tok.split(":", 1)[1])


def reload_adapter(base_url: str, lora_name: str, lora_path: str, timeout_s: float = 120.0) -> None:
    """Make the server serve `lora_path` under `lora_name` (unload the old version first; a missing one is fine)."""
    root = _root(base_url)
    with _client(timeout_s) as http:
        http.post(f"{root}/v1/unload_lora_adapter", json={"lora_name": lora_name})
        r = http.post(f"{root}/v1/load_lora_adapter", json={"lora_name": lora_name, "lora_path": lora_path})
        if r.status_code >= 400:
            raise ModelError(f"vllm_policy: loading adapter {lora_path!r} as {lora_name!r} failed: "
                             f"HTTP {r.status_code} {r.text[:200]}")
    log.info("policy_adapter_reloaded", base_url=base_url, lora_name=lora_name, path=lora_path)


class VLLMPolicyBackend:
    """ModelBackend over a vLLM server: text back to the caller, a Turn (server token ids + logprobs) recorded."""

    def __init__(self, config: ModelConfig):
        if not config.base_url:
            raise ModelError("vllm_policy needs models.<role>.base_url (e.g. http://127.0.0.1:8000/v1)")
        self.config = config
        self.name = config.model
        self.turns: list[Turn] = []
        self.recording = False
        """Keep a Turn per call (rollout workers switch it on)."""
        self._lock = threading.Lock()
        self._api_key = os.environ.get(config.api_key_env) or "not-needed"

    def _post(self, http: httpx.Client, path: str, body: dict[str, Any]) -> dict[str, Any]:
        try:
            r = http.post(f"{_root(self.config.base_url)}{path}", json=body,
                          headers={"Authorization": f"Bearer {self._api_key}"})
        except httpx.HTTPError as exc:
            raise ModelError(f"vllm_policy: {path} unreachable: {type(exc).__name__}") from None
        if r.status_code >= 400:
            raise ModelError(f"vllm_policy: {path} answered HTTP {r.status_code}: {r.text[:200]}")
        return r.json()

    def complete(self, messages: list[dict[str, str]], *, json_schema: dict[str, Any] | None = None,
                 max_tokens: int | None = None, temperature: float | None = None, seed: int | None = None,
                 deadline_s: float | None = None) -> Completion:
        t0 = time.perf_counter()
        limit = min(max_tokens or self.config.max_tokens, self.config.max_tokens)
        temp = self.config.temperature if temperature is None else temperature
        body: dict[str, Any] = {"model": self.config.model, "messages": messages, "max_tokens": limit,
                                "temperature": temp, "top_p": 1.0, "logprobs": True,
                                "return_tokens_as_token_ids": True, "return_token_ids": True}
        if seed is not None:
            body["seed"] = seed
        if json_schema:
            body["response_format"] = {"type": "json_schema", "json_schema": {"name": "output", "schema": json_schema}}
        timeout = min(deadline_s, self.config.timeout_s) if deadline_s else self.config.timeout_s
        with _client(timeout) as http:
            data = self._post(http, "/v1/chat/completions", body)
            choice = (data.get("choices") or [{}])[0]
            entries = ((choice.get("logprobs") or {}).get("content")) or []
            completion = [_token_id(e) for e in entries]
            logprobs = [float(e.get("logprob", 0.0)) for e in entries]
            if choice.get("token_ids") and list(choice["token_ids"])[: len(completion)] != completion:
                raise ModelError("vllm_policy: token_ids and logprob tokens disagree")
            prompt = data.get("prompt_token_ids") or choice.get("prompt_token_ids")
            if prompt is None:  # older servers: ask the server's own tokenizer
                tok = self._post(http, "/tokenize", {"model": self.config.model, "messages": messages,
                                                     "add_generation_prompt": True})
                prompt = tok.get("tokens")
        if prompt is None:
            raise ModelError("vllm_policy: the server returned no prompt token ids")
        text = (choice.get("message") or {}).get("content") or ""
        finish = choice.get("finish_reason") or "stop"
        turn = Turn(prompt_ids=[int(i) for i in prompt], completion_ids=completion, logprobs=logprobs, temperature=1.0,
                    finish_reason=finish, text=text)
        if self.recording:
            with self._lock:
                self.turns.append(turn)
        return Completion(text=text, tokens_in=len(turn.prompt_ids), tokens_out=len(completion),
                          latency_ms=(time.perf_counter() - t0) * 1000, model=self.name, finish_reason=finish)

    def drain_turns(self) -> list[Turn]:
        with self._lock:
            turns, self.turns = self.turns, []
        return turns
