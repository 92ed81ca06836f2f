"""A scripted test double: replies from a list (cycling) or from a function of the messages."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from infra.models.base import Completion, ModelError, PromptTooLong
from infra.runtime.settings import ModelConfig

Responder = Callable[[list[dict[str, str]]], str]


class ScriptedBackend:
    """Returns scripted replies in order and starts over when they run out, so an adversarial
    script can repeat forever; or calls `responder(messages) -> str`.

    Accepts a ModelConfig (uses `script`, `model`, `max_tokens`, `max_input_tokens`), a list of
    replies, or a callable. Token counts are deterministic:
    tokens_in = sum(len(content)) // 4 + 1, tokens_out = min(len(text) // 4 + 1, max_tokens).
    `calls` counts completed calls; `requests` keeps each call's messages and json_schema.
    Thread-safe: concurrent callers each get the next reply exactly once.
    """

    def __init__(
        self,
        config_or_replies: ModelConfig | Sequence[str] | Responder,
        *,
        model: str | None = None,
        max_tokens: int | None = None,
        max_input_tokens: int | None = None,
    ):
        self._responder: Responder | None = None
        self._replies: list[str] = []
        if isinstance(config_or_replies, ModelConfig):
            config = config_or_replies
            self._replies = list(config.script)
        else:
            config = ModelConfig(backend="scripted")
            if callable(config_or_replies):
                self._responder = config_or_replies
            elif isinstance(config_or_replies, str):
                self._replies = [config_or_replies]
            else:
                self._replies = list(config_or_replies)
        if self._responder is None and not self._replies:
            raise ModelError("scripted backend needs at least one reply (models.<role>.script) or a callable")
        updates: dict[str, Any] = {}
        if model is not None:
            updates["model"] = model
        if max_tokens is not None:
            updates["max_tokens"] = max_tokens
        if max_input_tokens is not None:
            updates["max_input_tokens"] = max_input_tokens
        self.config = config.model_copy(update=updates) if updates else config
        self.name = f"scripted:{self.config.model}"
        self._lock = threading.Lock()
        self._next = 0
        self.calls = 0
        self.requests: list[dict[str, Any]] = []

    def reset(self) -> None:
        """Start the script over and forget recorded requests."""
        with self._lock:
            self._next = 0
            self.calls = 0
            self.requests.clear()

    @staticmethod
    def count_tokens_in(messages: list[dict[str, str]]) -> int:
        return sum(len(str(m.get("content") or "")) for m in messages) // 4 + 1

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
        started = time.perf_counter()
        if deadline_s is not None and deadline_s <= 0:
            raise ModelError(f"no time left for the model call (deadline_s={deadline_s})")
        tokens_in = self.count_tokens_in(messages)
        if tokens_in > self.config.max_input_tokens:
            raise PromptTooLong(tokens_in, self.config.max_input_tokens)
        cap = self.config.max_tokens if max_tokens is None else max_tokens
        if self._responder is not None:
            text = self._responder(messages)
            if not isinstance(text, str):
                raise ModelError(f"scripted responder returned {type(text).__name__}, not str")
            with self._lock:
                self.calls += 1
                self.requests.append({"messages": messages, "json_schema": json_schema, "max_tokens": cap})
        else:
            with self._lock:
                text = self._replies[self._next % len(self._replies)]
                self._next += 1
                self.calls += 1
                self.requests.append({"messages": messages, "json_schema": json_schema, "max_tokens": cap})
        full = len(text) // 4 + 1
        return Completion(
            text=text,
            tokens_in=tokens_in,
            tokens_out=min(full, cap),
            latency_ms=(time.perf_counter() - started) * 1000.0,
            model=self.config.model,
            finish_reason="length" if full > cap else "stop",
        )
