"""Tools as Ray actors: a pool of Python sandboxes and a search index that loads its corpus once.

Actors are named (namespace from settings.ray), so every process of a run finds the same ones, and
created with `max_restarts` and no task retries: a call that was running when its actor died is
not re-run behind anyone's back. It becomes an error outcome (sandbox) or an ActorCallError that
the search tool turns into a Result with status error; the restarted actor takes later calls.
"""

from __future__ import annotations

import hashlib
import os
import queue
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import structlog

from infra.runtime.settings import RayActorsConfig, RayConfig
from infra.tools.sandbox import SandboxLimits, SandboxOutcome, make_sandbox
from infra.tools.search import Passage, SearchIndex

log = structlog.get_logger(__name__)


class ActorCallError(RuntimeError):
    """A call to an actor that died, is restarting, or did not answer in time; the message says which."""


# ------------------------------------------------------------------------------ the actors (run inside Ray)


def _where() -> dict[str, Any]:
    import ray

    ctx = ray.get_runtime_context()
    return {"pid": os.getpid(), "node_id": ctx.get_node_id(), "actor_id": ctx.get_actor_id()}


class SandboxActor:
    """One sandbox (bwrap or process fallback) on the actor's node; one program at a time."""

    def __init__(self, kind: str):
        self.sandbox = make_sandbox(kind)  # type: ignore[arg-type]

    def run_python(self, code: str, limits: SandboxLimits) -> SandboxOutcome:
        return self.sandbox.run_python(code, limits)

    def info(self) -> dict[str, Any]:
        return _where() | {"mechanism": self.sandbox.mechanism}


class SearchIndexActor:
    """The BM25 index of one corpus file, built once when the actor starts (and again only if it restarts)."""

    def __init__(self, corpus: str):
        started = time.perf_counter()
        self.corpus = corpus
        self.index = SearchIndex.from_jsonl(corpus)
        self.load_s = time.perf_counter() - started

    def search(self, query: str, k: int, max_chars: int) -> list[Passage]:
        return self.index.search(query, k=k, max_chars=max_chars)

    def size(self) -> int:
        return len(self.index)

    def info(self) -> dict[str, Any]:
        return _where() | {"corpus": self.corpus, "documents": len(self.index), "load_s": self.load_s}


# ------------------------------------------------------------------------------ clients (run in the caller)

_REMOTE: dict[type, Any] = {}
_CLIENTS: dict[tuple, Any] = {}
_CLIENTS_LOCK = threading.Lock()


def _remote_class(cls: type) -> Any:
    import ray

    if cls not in _REMOTE:
        _REMOTE[cls] = ray.remote(cls)
    return _REMOTE[cls]


def _actor(cls: type, name: str, ray_cfg: RayConfig, placement: RayActorsConfig, *args: Any, max_concurrency: int = 1) -> Any:
    """The named actor, created (restartable, never retrying calls) if it does not exist yet."""
    from infra.runtime.cluster import ensure_ray

    ensure_ray(ray_cfg)
    return _remote_class(cls).options(
        name=name, namespace=ray_cfg.namespace, get_if_exists=True, max_restarts=ray_cfg.max_restarts,
        max_task_retries=0, num_cpus=placement.num_cpus, resources=dict(placement.resources) or None,
        max_concurrency=max_concurrency,
    ).remote(*args)


def _get(ref: Any, timeout_s: float, what: str) -> Any:
    """ray.get that turns a dead, restarting or silent actor into ActorCallError."""
    import ray
    from ray.exceptions import GetTimeoutError, RayActorError

    try:
        return ray.get(ref, timeout=timeout_s)
    except GetTimeoutError as exc:
        ray.cancel(ref)
        raise ActorCallError(f"{what} did not answer within {timeout_s:.1f}s") from exc
    except RayActorError as exc:
        state = "restarting" if type(exc).__name__ == "ActorUnavailableError" else "dead"
        raise ActorCallError(f"{what} is {state}: {str(exc).splitlines()[0][:200]}") from exc


def forget_actor_clients() -> None:
    """Drop cached pools and index clients (after ray.shutdown; tests)."""
    with _CLIENTS_LOCK:
        _CLIENTS.clear()
        _REMOTE.clear()


@dataclass
class _Slot:
    name: str
    handle: Any


class SandboxPool:
    """The Sandbox interface over N sandbox actors: each program takes a free actor (waiting for one).

    A call to an actor that dies or restarts mid-call returns an `error` outcome; an actor that is
    gone for good (restarts used up) is replaced for later calls.
    """

    mechanism = "ray"

    def __init__(self, ray_cfg: RayConfig, kind: str):
        self.ray_cfg = ray_cfg
        self.kind = kind
        prefix = f"agentflow-sandbox-{kind}"
        self.slots = [_Slot(f"{prefix}-{i}", None) for i in range(ray_cfg.sandbox.actors)]
        for slot in self.slots:
            slot.handle = self._create(slot.name)
        self._free: queue.Queue[int] = queue.Queue()
        for i in range(len(self.slots)):
            self._free.put(i)
        self._replace_lock = threading.Lock()

    @classmethod
    def connect(cls, ray_cfg: RayConfig, kind: str = "auto") -> "SandboxPool":
        """The process-wide pool for this Ray configuration and sandbox kind."""
        key = ("sandbox", ray_cfg.model_dump_json(), kind)
        with _CLIENTS_LOCK:
            if key not in _CLIENTS:
                _CLIENTS[key] = cls(ray_cfg, kind)
            return _CLIENTS[key]

    def _create(self, name: str) -> Any:
        return _actor(SandboxActor, name, self.ray_cfg, self.ray_cfg.sandbox, self.kind)

    @property
    def handles(self) -> list[Any]:
        return [s.handle for s in self.slots]

    def info(self, timeout_s: float = 60.0) -> list[dict[str, Any]]:
        import ray

        return ray.get([h.info.remote() for h in self.handles], timeout=timeout_s)

    def run_python(self, code: str, limits: SandboxLimits) -> SandboxOutcome:
        started = time.perf_counter()
        wait_s = limits.timeout_s + self.ray_cfg.call_timeout_s
        try:
            i = self._free.get(timeout=wait_s)
        except queue.Empty:
            return self._failed("timeout", f"no sandbox actor was free within {wait_s:.0f}s", started)
        slot = self.slots[i]
        try:
            return _get(slot.handle.run_python.remote(code, limits), wait_s, f"sandbox actor {slot.name}")
        except ActorCallError as exc:
            log.warning("sandbox_actor_call_failed", actor=slot.name, error=str(exc))
            self._replace_if_gone(slot)
            timed_out = "did not answer" in str(exc)
            return self._failed("timeout" if timed_out else "error", str(exc), started)
        finally:
            self._free.put(i)

    def _replace_if_gone(self, slot: _Slot) -> None:
        """A restarting actor comes back by itself; one that is dead for good is created anew."""
        import ray

        with self._replace_lock:
            try:
                ray.get_actor(slot.name, namespace=self.ray_cfg.namespace)
            except ValueError:
                slot.handle = self._create(slot.name)
                log.warning("sandbox_actor_replaced", actor=slot.name)

    @staticmethod
    def _failed(status: str, message: str, started: float) -> SandboxOutcome:
        return SandboxOutcome(status=status, exit_code=None, stdout="", stderr="",  # type: ignore[arg-type]
                              elapsed_ms=(time.perf_counter() - started) * 1000, truncated=False,
                              message=message, mechanism="ray")


def _corpus_key(corpus: str | Path) -> str:
    p = Path(corpus).resolve()
    st = p.stat()
    return hashlib.sha1(f"{p}:{st.st_mtime_ns}:{st.st_size}".encode()).hexdigest()[:12]


class RemoteSearchIndex:
    """SearchIndex.search through the corpus's search actor (one per corpus file and version)."""

    def __init__(self, ray_cfg: RayConfig, corpus: str | Path, timeout_s: float | None = None):
        self.ray_cfg = ray_cfg
        self.corpus = str(Path(corpus).resolve())
        self.name = f"agentflow-search-{_corpus_key(self.corpus)}"
        self.timeout_s = timeout_s or ray_cfg.call_timeout_s
        self.handle = _actor(SearchIndexActor, self.name, ray_cfg, ray_cfg.search, self.corpus)
        self._lock = threading.Lock()

    @classmethod
    def connect(cls, ray_cfg: RayConfig, corpus: str | Path) -> "RemoteSearchIndex":
        key = ("search", ray_cfg.model_dump_json(), _corpus_key(corpus))
        with _CLIENTS_LOCK:
            if key not in _CLIENTS:
                _CLIENTS[key] = cls(ray_cfg, corpus)
            return _CLIENTS[key]

    def search(self, query: str, k: int = 3, max_chars: int = 600) -> list[Passage]:
        try:
            return _get(self.handle.search.remote(query, k, max_chars), self.timeout_s, f"search actor {self.name}")
        except ActorCallError:
            self._replace_if_gone()
            raise

    def _replace_if_gone(self) -> None:
        """A restarting actor comes back by itself; one that is dead for good is created anew for later calls."""
        import ray

        with self._lock:
            try:
                ray.get_actor(self.name, namespace=self.ray_cfg.namespace)
            except ValueError:
                self.handle = _actor(SearchIndexActor, self.name, self.ray_cfg, self.ray_cfg.search, self.corpus)
                log.warning("search_actor_replaced", actor=self.name)

    def __len__(self) -> int:
        return _get(self.handle.size.remote(), self.timeout_s, f"search actor {self.name}")

    def info(self) -> dict[str, Any]:
        return _get(self.handle.info.remote(), self.timeout_s, f"search actor {self.name}")
