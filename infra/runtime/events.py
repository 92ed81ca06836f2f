"""Structured JSON events: one log file per run, optionally echoed readably to the console.

Each run gets its own structlog logger (no global configuration), so runs in one process,
threads or Ray workers never share or lose each other's events.
"""

from __future__ import annotations

import os
import re
import sys
import threading
from pathlib import Path
from typing import Any, Iterable, TextIO

import structlog

EVENT_VERSION = 1


# ------------------------------------------------------------------------------------ secrets

REDACTED = "[REDACTED]"
#: Things that look like API keys whatever their origin: OpenAI-style ``sk-...`` keys (incl. sk-proj-...).
KEY_PATTERN = re.compile(r"\bsk-[A-Za-z0-9_\-]{12,}")
#: Environment variables whose values are treated as secrets even if no backend has read them yet.
SECRET_ENV_NAME = re.compile(r"(?:^|_)(?:API_?KEY|TOKEN|SECRET|PASSWORD|PASSWD)(?:$|_)", re.IGNORECASE)
_MIN_SECRET_LEN = 6  # a registered or explicitly named secret shorter than this would scrub ordinary words
_MIN_GUESSED_LEN = 12  # env vars only *named* like keys: real keys are long, "testing" or "false" are not
_SECRETS: set[str] = set()
_SECRETS_LOCK = threading.Lock()


def register_secret(value: str | None) -> None:
    """Remember a secret this process holds (an API key a backend read) so every log scrubs it."""
    if value and len(value) >= _MIN_SECRET_LEN:
        with _SECRETS_LOCK:
            _SECRETS.add(value)


def secret_values(env_names: Iterable[str] = ()) -> list[str]:
    """Registered secrets, values of the named env vars and of env vars named like keys; longest first."""
    found = set(_SECRETS)
    for name, value in os.environ.items():
        if value and len(value) >= _MIN_GUESSED_LEN and SECRET_ENV_NAME.search(name):
            found.add(value)
    for name in env_names:
        value = os.environ.get(name)
        if value and len(value) >= _MIN_SECRET_LEN:
            found.add(value)
    return sorted(found, key=len, reverse=True)


def redact(text: str, secrets: Iterable[str] | None = None) -> str:
    """`text` with every known secret and anything shaped like an ``sk-`` key replaced by [REDACTED]."""
    for value in secret_values() if secrets is None else secrets:
        if value in text:
            text = text.replace(value, REDACTED)
    return KEY_PATTERN.sub(REDACTED, text)


def _redact_value(value: Any, secrets: list[str]) -> Any:
    if isinstance(value, str):
        return redact(value, secrets)
    if isinstance(value, dict):
        return {k: _redact_value(v, secrets) for k, v in value.items()}
    if isinstance(value, list) or type(value) is tuple:
        return [_redact_value(v, secrets) for v in value]
    if isinstance(value, BaseException):
        return redact(f"{type(value).__name__}: {value}", secrets)
    return value


class Redact:
    """structlog processor: scrub secrets from every string in the event (nested too).

    Secrets: values registered with :func:`register_secret` (the OpenAI backend registers the key
    it reads), values of ``env_names`` (e.g. every ``api_key_env`` of the configuration), values of
    env vars named like keys (``*_API_KEY``, ``*_TOKEN``, ``*_SECRET``...), and ``sk-...`` shapes.
    Non-string values (numbers, None) pass unchanged; other objects are scrubbed once rendered.
    """

    def __init__(self, env_names: Iterable[str] = ()):
        self.env_names = tuple(env_names)

    def __call__(self, logger, method: str, event_dict: dict[str, Any]) -> dict[str, Any]:
        secrets = secret_values(self.env_names)
        return {k: _redact_value(v, secrets) for k, v in event_dict.items()}


# ------------------------------------------------------------------------------------ run logs


class _LockedFile:
    """A line-buffered append-only file shared by the threads of one run."""

    def __init__(self, path: Path):
        path.parent.mkdir(parents=True, exist_ok=True)
        self._fh: TextIO = open(path, "a", buffering=1, encoding="utf-8")
        self._lock = threading.Lock()

    def msg(self, line: str) -> None:
        with self._lock:
            self._fh.write(line + "\n")

    debug = info = warning = error = critical = msg  # structlog proxies each level to a method

    def close(self) -> None:
        self._fh.close()


class _Tee:
    """JSON to the file; a short human line to stderr when console echo is on."""

    def __init__(self, sink: _LockedFile, console: bool, secret_env: Iterable[str] = ()):
        self.sink = sink
        self.console = structlog.dev.ConsoleRenderer(colors=False) if console else None
        self.secret_env = tuple(secret_env)

    def __call__(self, logger, method: str, event_dict: dict[str, Any]) -> str:
        secrets = secret_values(self.secret_env)
        if self.console is not None:
            print(redact(self.console(logger, method, dict(event_dict)), secrets), file=sys.stderr)
        # objects rendered by default=str only become text here: scrub the finished line too
        return redact(structlog.processors.JSONRenderer(default=str)(logger, method, event_dict), secrets)


class RunLog:
    """The event stream of one run: `log.event("model_call", role="planner", ...)`."""

    def __init__(self, path: str | Path, *, run_id: str, console: bool = False, level: str = "info",
                 secret_env: Iterable[str] = ()):
        self.path = Path(path)
        self._sink = _LockedFile(self.path)
        self._logger = structlog.wrap_logger(
            self._sink,
            processors=[
                structlog.processors.add_log_level,
                structlog.processors.TimeStamper(fmt="iso", utc=True),
                Redact(secret_env),  # keys never reach the file or the console
                _Tee(self._sink, console, secret_env),
            ],
            wrapper_class=structlog.make_filtering_bound_logger(level.upper()),
        ).bind(run_id=run_id, v=EVENT_VERSION)

    def bind(self, **fields: Any) -> "BoundRunLog":
        return BoundRunLog(self._logger.bind(**fields))

    def event(self, name: str, **fields: Any) -> None:
        self._logger.info(name, **fields)

    def warning(self, name: str, **fields: Any) -> None:
        self._logger.warning(name, **fields)

    def close(self) -> None:
        self._sink.close()


class BoundRunLog:
    def __init__(self, logger):
        self._logger = logger

    def event(self, name: str, **fields: Any) -> None:
        self._logger.info(name, **fields)

    def warning(self, name: str, **fields: Any) -> None:
        self._logger.warning(name, **fields)


class _CurrentStderr:
    """Whatever sys.stderr is at write time (test runners swap and close it)."""

    def write(self, text: str) -> int:
        return sys.stderr.write(text)

    def flush(self) -> None:
        sys.stderr.flush()


def configure_process_logging(level: str = "warning") -> None:
    """Library events (model loads, retries, sandbox fallbacks) go to stderr, never stdout.

    Run events go to each run's own file through RunLog; this only sets where module-level
    `structlog.get_logger()` calls print, so `--json` output on stdout stays machine-readable.
    """
    import logging

    structlog.configure(
        processors=[structlog.processors.add_log_level, structlog.processors.TimeStamper(fmt="iso", utc=True),
                    Redact(), structlog.dev.ConsoleRenderer(colors=False)],
        wrapper_class=structlog.make_filtering_bound_logger(getattr(logging, level.upper())),
        logger_factory=structlog.PrintLoggerFactory(file=_CurrentStderr()),
        cache_logger_on_first_use=False,
    )
