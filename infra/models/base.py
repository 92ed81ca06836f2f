"""One interface for every model backend: chat messages in, text and token counts out."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable


class ModelError(RuntimeError):
    """A model call that could not be made or completed (unreachable endpoint, bad reply)."""


class PromptTooLong(ModelError):
    """The prompt exceeds the role's max_input_tokens; the call was not made."""

    def __init__(self, tokens: int, limit: int):
        super().__init__(f"prompt has {tokens} tokens, more than max_input_tokens={limit}")
        self.tokens = tokens
        self.limit = limit


@dataclass(frozen=True)
class Completion:
    """One model call's output and its measured cost."""

    text: str
    tokens_in: int
    tokens_out: int
    latency_ms: float
    model: str
    finish_reason: str = "stop"


@runtime_checkable
class ModelBackend(Protocol):
    """Chat completion with optional JSON-schema-constrained decoding.

    `json_schema`, when given, constrains decoding where the backend can (grammar for llama.cpp,
    response_format for OpenAI-compatible servers); callers validate the text again regardless.
    `max_tokens` is a hard cap on output tokens; a prompt over the configured max_input_tokens
    raises PromptTooLong before anything is generated, so budget reservations are never exceeded.
    """

    name: str

    def complete(
        self,
        messages: list[dict[str, str]],
        *,
        json_schema: dict[str, Any] | None = None,
        max_tokens: int | None = None,
        temperature: float | None = None,
        seed: int | None = None,
        deadline_s: float | None = None,
    ) -> Completion: ...
