"""The OpenAI-compatible backend: any server speaking /v1/chat/completions (vLLM, Ollama,
llama.cpp's server, hosted APIs) through the `openai` client.

- The API key comes from the Prefect Secret block named by `ModelConfig.api_key_secret_block`
  when that is set (a block that cannot be loaded is a ModelError, never a silent fallback), else
  from the environment variable named by `ModelConfig.api_key_env`. The config never holds the
  key. The key is registered with `infra.runtime.events.register_secret`, so every log scrubs it, and it
  is removed from every ModelError message (servers that echo request headers in error bodies
  cannot leak it into logs, Parquet or CLI output); such errors carry no exception chain either.
  Local servers usually need no key; a placeholder is sent then.
- The client's own retries are off (max_retries=0). We retry 429 / 5xx / connection errors
  ourselves, at most `max_transport_retries` times and only while the call's time allows, each
  retry logged as a structlog event `model_transport_retry`. `last_retries` holds the count of
  the latest call, `total_retries` the process-wide count for this backend.
- Structured output: `response_format={"type": "json_schema", ...}` (OpenAI / vLLM /
  llama-server). A server that rejects it (400/422) is retried with
  `{"type": "json_object", "schema": ...}` (llama-cpp-python's server, which answers the
  unknown type with HTTP 500 naming response_format), then with plain
  `{"type": "json_object"}`; the first accepted form is remembered for this backend.
- The prompt cannot be tokenized locally, so its size is estimated conservatively
  (characters / 3 plus a few tokens per message); over `max_input_tokens` -> PromptTooLong.
- Timeout per call = min(config.timeout_s, deadline_s), shared by all attempts of the call.
- Construction checks that something answers at base_url (one GET /models, any HTTP status
  counts) so a wrong URL fails fast with a one-line ModelError; `probe=False` skips it.
"""

from __future__ import annotations

import math
import os
import random
import threading
import time
from typing import Any

import structlog

from infra.models.base import Completion, ModelError, PromptTooLong
from infra.runtime.events import redact, register_secret, secret_values
from infra.runtime.settings import ModelConfig

PLACEHOLDER_API_KEY = "not-needed"
RETRY_STATUS = {408, 409, 429, 500, 502, 503, 504}
SCHEMA_REJECT_STATUS = {400, 422}
_BACKOFF_BASE_S = 0.25
_BACKOFF_MAX_S = 4.0

# response_format variants, most to least specific
_FORMATS = ("json_schema", "json_object_schema", "json_object")


def estimate_prompt_tokens(messages: list[dict[str, str]]) -> int:
    """A conservative upper bound on prompt tokens without the server's tokenizer:
    one token per 3 characters plus 4 tokens of chat-template framing per message."""
    chars = sum(len(str(m.get("content") or "")) for m in messages)
    return math.ceil(chars / 3) + 4 * len(messages) + 3


def _response_format(kind: str, schema: dict[str, Any]) -> dict[str, Any]:
    if kind == "json_schema":
        return {"type": "json_schema", "json_schema": {"name": "output", "schema": schema, "strict": True}}
    if kind == "json_object_schema":
        return {"type": "json_object", "schema": schema}
    return {"type": "json_object"}


def _is_format_rejection(exc: Exception, request: dict[str, Any]) -> bool:
    """A server refusing our response_format: 400/422, or llama-cpp-python's server, which
    answers its own request-validation errors with HTTP 500 naming the field."""
    if "response_format" not in request:
        return False
    status = getattr(exc, "status_code", None)
    if status in SCHEMA_REJECT_STATUS:
        return True
    return status == 500 and "response_format" in str(exc)


def resolve_api_key(config: ModelConfig) -> str | None:
    """The key for `config`: its Prefect Secret block if named, else its env var, else None.

    Errors name the block or variable, never a value.
    """
    if config.api_key_secret_block:
        name = config.api_key_secret_block
        try:
            from prefect.blocks.system import Secret

            value = Secret.load(name).get()
        except Exception as exc:  # missing block, no Prefect API, wrong block type
            raise ModelError(f"cannot load the API key from Prefect Secret block {name!r} "
                             f"(models.<role>.api_key_secret_block): {type(exc).__name__}") from None
        if not isinstance(value, str) or not value:
            raise ModelError(f"Prefect Secret block {name!r} does not hold a non-empty string")
        return value
    return os.environ.get(config.api_key_env) or None


def _retry_after_s(exc: Exception) -> float | None:
    response = getattr(exc, "response", None)
    headers = getattr(response, "headers", None)
    if not headers:
        return None
    value = headers.get("retry-after")
    if value is None:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        return None


class OpenAIBackend:
    """Chat completions over an OpenAI-compatible HTTP API (see module docstring)."""

    def __init__(self, config: ModelConfig, *, probe: bool = True):
        try:
            import openai
        except ImportError as exc:  # pragma: no cover - a declared dependency
            raise ModelError("the openai package is not installed: pip install openai") from exc
        if not config.base_url:
            raise ModelError(
                "backend 'openai' needs models.<role>.base_url, e.g. http://127.0.0.1:8000/v1 "
                "(vLLM, Ollama, llama.cpp server) or https://api.openai.com/v1"
            )
        self.config = config
        self.name = f"openai:{config.model}"
        self.base_url = config.base_url
        self._openai = openai
        key = resolve_api_key(config)
        register_secret(key)  # every log of this process scrubs it from now on
        self._secrets = [key] if key else []
        api_key = key or PLACEHOLDER_API_KEY
        self.api_key_from_env = key is not None and not config.api_key_secret_block
        self._client = openai.OpenAI(
            base_url=config.base_url,
            api_key=api_key,
            max_retries=0,
            timeout=config.timeout_s,
        )
        self._format_kind: str | None = None  # which response_format the server accepted
        self._lock = threading.Lock()
        self.last_retries = 0
        self.total_retries = 0
        self.calls = 0
        if probe:
            self.check_reachable()

    def check_reachable(self, timeout_s: float = 5.0) -> None:
        """Fail fast (ModelError naming base_url) when nothing answers at base_url.

        One GET {base_url}/models; any HTTP answer, even 401/404, counts as reachable: only the
        transport is checked here, not the key or the model name.
        """
        openai = self._openai
        try:
            self._client.models.list(timeout=min(timeout_s, self.config.timeout_s))
        except openai.APIStatusError:
            return
        except openai.APITimeoutError as exc:
            raise ModelError(
                f"model endpoint {self.base_url} did not answer within {min(timeout_s, self.config.timeout_s):.1f}s"
            ) from exc
        except openai.APIConnectionError as exc:
            raise ModelError(
                f"model endpoint {self.base_url} is unreachable ({self._short(exc.__cause__ or exc, 160)}); is the server "
                "running and base_url right?"
            ) from exc

    def close(self) -> None:
        self._client.close()

    def _short(self, exc: BaseException, limit: int = 300) -> str:
        return _short(exc, limit, [*self._secrets, *secret_values((self.config.api_key_env,))])

    # -- one HTTP attempt ------------------------------------------------------------
    def _create(self, request: dict[str, Any], timeout: float) -> Any:
        return self._client.chat.completions.create(**request, timeout=timeout)

    def _call_with_retries(self, request: dict[str, Any], end: float, counter: list[int]) -> Any:
        """Send `request`, retrying transport failures within the bounds; counter[0] counts retries."""
        openai = self._openai
        while True:
            remaining = end - time.perf_counter()
            if remaining <= 0:
                raise ModelError(f"model call to {self.base_url} ran out of time (timeout/deadline)")
            try:
                return self._create(request, remaining)
            except openai.APITimeoutError as exc:
                raise ModelError(
                    f"model endpoint {self.base_url} did not answer within {remaining:.1f}s"
                ) from exc
            except openai.APIConnectionError as exc:
                reason: str = f"connection error: {self._short(exc.__cause__ or exc, 160)}"
                retry_after = None
                failure: Exception = exc
                status = None
            except openai.APIStatusError as exc:
                status = exc.status_code
                if status not in RETRY_STATUS or _is_format_rejection(exc, request):
                    raise
                reason = f"HTTP {status}"
                retry_after = _retry_after_s(exc)
                failure = exc
            retries = counter[0]
            if retries >= self.config.max_transport_retries:
                if status is None:
                    raise ModelError(
                        f"model endpoint {self.base_url} is unreachable ({reason}); is the server "
                        "running and base_url right?"
                    ) from failure
                raise ModelError(
                    f"model endpoint {self.base_url} failed with {reason} after {retries} retries"
                ) from failure
            backoff = min(_BACKOFF_MAX_S, _BACKOFF_BASE_S * (2**retries)) * (0.5 + random.random() / 2)
            wait = retry_after if retry_after is not None else backoff
            wait = min(wait, _BACKOFF_MAX_S)
            if time.perf_counter() + wait >= end:
                raise ModelError(
                    f"model endpoint {self.base_url} failed with {reason}; no time left to retry"
                ) from failure
            counter[0] = retries = retries + 1
            structlog.get_logger(__name__).warning(
                "model_transport_retry",
                backend="openai",
                base_url=self.base_url,
                model=self.config.model,
                attempt=retries,
                max_retries=self.config.max_transport_retries,
                reason=reason,
                status=status,
                wait_s=round(wait, 3),
            )
            time.sleep(wait)

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
        openai = self._openai
        started = time.perf_counter()
        if deadline_s is not None and deadline_s <= 0:
            raise ModelError(f"no time left for the model call (deadline_s={deadline_s})")
        budget_s = min(cfg.timeout_s, deadline_s) if deadline_s is not None else cfg.timeout_s
        end = started + budget_s
        estimate = estimate_prompt_tokens(messages)
        if estimate > cfg.max_input_tokens:
            raise PromptTooLong(estimate, cfg.max_input_tokens)
        max_tokens = cfg.max_tokens if max_tokens is None else max_tokens
        temperature = cfg.temperature if temperature is None else temperature
        seed = cfg.seed if seed is None else seed

        request: dict[str, Any] = {
            "model": cfg.model,
            "messages": [{"role": m["role"], "content": m["content"]} for m in messages],
            "max_tokens": max_tokens,
            "temperature": temperature,
        }
        if seed is not None:
            request["seed"] = seed
        if cfg.extra_body:
            request["extra_body"] = dict(cfg.extra_body)

        kinds: tuple[str, ...] = ()
        if json_schema is not None:
            kinds = _FORMATS[_FORMATS.index(self._format_kind):] if self._format_kind else _FORMATS

        counter = [0]
        response = None
        try:
            if not kinds:
                response = self._call_with_retries(request, end, counter)
            else:
                for i, kind in enumerate(kinds):
                    request["response_format"] = _response_format(kind, json_schema)  # type: ignore[arg-type]
                    try:
                        response = self._call_with_retries(request, end, counter)
                        if self._format_kind != kind:
                            self._format_kind = kind
                        break
                    except openai.APIStatusError as exc:
                        if not _is_format_rejection(exc, request) or i == len(kinds) - 1:
                            raise
                        structlog.get_logger(__name__).warning(
                            "model_response_format_fallback",
                            backend="openai",
                            base_url=self.base_url,
                            model=cfg.model,
                            rejected=kind,
                            status=exc.status_code,
                            next=kinds[i + 1],
                        )
        except openai.APIStatusError as exc:  # the body may echo our headers: scrubbed, and no chain
            raise ModelError(
                f"model endpoint {self.base_url} refused the request: HTTP {exc.status_code}: "
                f"{self._short(exc)}"
            ) from None
        except openai.APIError as exc:  # anything else from the client (bad payload, ...)
            raise ModelError(f"model call to {self.base_url} failed: {self._short(exc)}") from None
        finally:
            with self._lock:
                self.calls += 1
                self.last_retries = counter[0]
                self.total_retries += counter[0]

        assert response is not None
        if not getattr(response, "choices", None):
            raise ModelError(f"model endpoint {self.base_url} returned no choices")
        choice = response.choices[0]
        text = (choice.message.content if choice.message is not None else None) or ""
        usage = getattr(response, "usage", None)
        tokens_in = getattr(usage, "prompt_tokens", None) if usage is not None else None
        tokens_out = getattr(usage, "completion_tokens", None) if usage is not None else None
        if not tokens_in:
            tokens_in = math.ceil(sum(len(str(m.get("content") or "")) for m in messages) / 4) + 1
        if tokens_out is None:
            tokens_out = math.ceil(len(text) / 4) if text else 0
        return Completion(
            text=text.strip() if json_schema is None else text,
            tokens_in=int(tokens_in),
            tokens_out=int(tokens_out),
            latency_ms=(time.perf_counter() - started) * 1000.0,
            model=cfg.model,
            finish_reason=choice.finish_reason or "stop",
        )


def _short(exc: Exception, limit: int = 300, secrets: list[str] | None = None) -> str:
    """One line of an exception's text, keys scrubbed (before truncation, so no key is cut in half)."""
    text = redact(" ".join(str(exc).split()), secrets)
    return text if len(text) <= limit else text[: limit - 3] + "..."
