"""Structured JSON events: one log file per run, optionally echoed readably to the console.

Each run gets its own structlog logger (no global configuration), so runs in one process,
threads or Ray workers never share or lose each other's events.
"""

from __future__ import annotations

import sys
import threading
from pathlib import Path
from typing import Any, TextIO

import structlog

EVENT_VERSION = 1


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

    def __init__(self, sink: _LockedFile, console: bool):
        self.sink = sink
        self.console = structlog.dev.ConsoleRenderer(colors=False) if console else None

    def __call__(self, logger, method: str, event_dict: dict[str, Any]) -> str:
        if self.console is not None:
            print(self.console(logger, method, dict(event_dict)), file=sys.stderr)
        return structlog.processors.JSONRenderer(default=str)(logger, method, event_dict)


class RunLog:
    """The event stream of one run: `log.event("model_call", role="planner", ...)`."""

    def __init__(self, path: str | Path, *, run_id: str, console: bool = False, level: str = "info"):
        self.path = Path(path)
        self._sink = _LockedFile(self.path)
        self._logger = structlog.wrap_logger(
            self._sink,
            processors=[
                structlog.processors.add_log_level,
                structlog.processors.TimeStamper(fmt="iso", utc=True),
                _Tee(self._sink, console),
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


def configure_process_logging(level: str = "warning") -> None:
    """Library events (model loads, retries, sandbox fallbacks) go to stderr, never stdout.

    Run events go to each run's own file through RunLog; this only sets where module-level
    `structlog.get_logger()` calls print, so `--json` output on stdout stays machine-readable.
    """
    import logging

    structlog.configure(
        processors=[structlog.processors.add_log_level, structlog.processors.TimeStamper(fmt="iso", utc=True),
                    structlog.dev.ConsoleRenderer(colors=False)],
        wrapper_class=structlog.make_filtering_bound_logger(getattr(logging, level.upper())),
        logger_factory=structlog.PrintLoggerFactory(file=sys.stderr),
        cache_logger_on_first_use=False,
    )
