"""Model servers as Ray actors: each actor starts, health-checks and restarts one OpenAI-compatible server.

The same actor runs every engine; only the command differs:
- `llama_cpp`: llama-cpp-python's server on the GGUF (the embedded SmolLM2 by default), CPU;
- `vllm`: `vllm serve MODEL` on the GPUs Ray gives the actor (num_gpus; CUDA_VISIBLE_DEVICES);
- `command`: any server, argv with {host}, {port} and {model} placeholders.
Roles then use the ordinary `openai` backend; `ModelRouter` hands each question the base_url of the
least-loaded healthy replica. The server process dies with its actor (PR_SET_PDEATHSIG), and a
server that exits or fails its health checks is restarted on the same port.

`ScriptedModelServer` is an OpenAI-compatible endpoint in a thread that answers from a function of
the messages after a fixed latency: a model with a known cost for benchmarks and tests.
"""

from __future__ import annotations

import contextlib
import ctypes
import hashlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import structlog

from infra.runtime.settings import ModelServerConfig, RayConfig

log = structlog.get_logger(__name__)


class ModelServerError(RuntimeError):
    """A model server that cannot be started or reached; the message names it and points at its log."""


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host if host != "0.0.0.0" else "", 0))
        return s.getsockname()[1]


def server_command(cfg: ModelServerConfig, host: str, port: int) -> list[str]:
    """The argv that starts `cfg`'s server on host:port."""
    if cfg.engine == "llama_cpp":
        from infra.models.embedded import default_threads, locate_embedded_model

        model_path = cfg.model_path or str(locate_embedded_model(cfg.model))
        threads = str(cfg.n_threads or default_threads())
        argv = [sys.executable, "-m", "llama_cpp.server", "--model", model_path, "--host", host, "--port", str(port),
                "--n_ctx", str(cfg.n_ctx), "--model_alias", cfg.model, "--n_threads", threads, "--n_threads_batch", threads]
    elif cfg.engine == "vllm":
        vllm = shutil.which("vllm") or str(Path(sys.executable).with_name("vllm"))
        argv = [vllm, "serve", cfg.model_path or cfg.model, "--host", host, "--port", str(port),
                "--served-model-name", cfg.model, "--max-model-len", str(cfg.n_ctx)]
    else:
        if not cfg.command:
            raise ModelServerError("engine 'command' needs ray.model_servers.<name>.command (argv with {host} and {port})")
        argv = [a.format(host=host, port=port, model=cfg.model, python=sys.executable) for a in cfg.command]
    return argv + list(cfg.extra_args)


def _die_with_parent() -> None:  # runs in the child between fork and exec
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except OSError:
        pass
    os.setsid()


def _healthy(base_url: str, timeout_s: float = 2.0) -> bool:
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(f"{base_url}/models", timeout=timeout_s) as resp:
            return resp.status == 200
    except OSError:
        return False


class ModelServer:
    """Ray actor: one server process, started in __init__ (ready when it answers) and supervised by a thread.

    The supervisor thread owns the process (the server gets SIGKILL when that thread's process
    dies), restarts it on the same port when it exits or fails `max_failed_checks` checks in a row.
    """

    def __init__(self, name: str, cfg: ModelServerConfig):
        self.name = name
        self.cfg = cfg
        self.port = free_port(cfg.host)
        advertise = cfg.host
        if cfg.host in ("0.0.0.0", "::"):
            import ray

            advertise = ray.util.get_node_ip_address()
        self.url = f"http://{advertise}:{self.port}/v1"
        log_dir = Path(tempfile.gettempdir()) / "agentflow-model-servers"
        log_dir.mkdir(parents=True, exist_ok=True)
        self.log_path = log_dir / f"{name}-{os.getpid()}.log"
        self.restarts = 0
        self.proc: subprocess.Popen | None = None
        self._stop = threading.Event()
        self._ready = threading.Event()
        self._error: str | None = None
        self._thread = threading.Thread(target=self._supervise, name=f"supervise-{name}", daemon=True)
        self._thread.start()
        if not self._ready.wait(cfg.startup_timeout_s + 5):
            self._error = self._error or f"not ready within {cfg.startup_timeout_s:.0f}s"
        if self._error:
            self.stop()
            raise ModelServerError(f"model server {name} failed to start: {self._error}; log: {self.log_path}")

    # -- supervision (the supervisor thread only) ----------------------------------------
    def _spawn(self) -> bool:
        argv = server_command(self.cfg, self.cfg.host, self.port)
        with open(self.log_path, "ab") as out:  # a file, never a pipe: a full pipe blocks the server
            out.write(f"\n=== start {time.strftime('%H:%M:%S')}: {' '.join(argv)}\n".encode())
            out.flush()
            self.proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                         preexec_fn=_die_with_parent, env=os.environ.copy())
        deadline = time.monotonic() + self.cfg.startup_timeout_s
        while time.monotonic() < deadline and not self._stop.is_set():
            if self.proc.poll() is not None:
                self._error = f"exited with code {self.proc.returncode}: {self._log_tail()}"
                return False
            if _healthy(self.url):
                return True
            time.sleep(0.25)
        self._error = f"not ready within {self.cfg.startup_timeout_s:.0f}s: {self._log_tail()}"
        self._kill()
        return False

    def _supervise(self) -> None:
        if not self._spawn():
            self._ready.set()
            return
        self._error = None
        self._ready.set()
        failed = 0
        while not self._stop.wait(self.cfg.health_interval_s):
            proc = self.proc
            if proc is not None and proc.poll() is None and _healthy(self.url):
                failed = 0
                continue
            failed = self.cfg.max_failed_checks if proc is None or proc.poll() is not None else failed + 1
            if failed < self.cfg.max_failed_checks:
                continue
            self.restarts += 1
            log.warning("model_server_restart", server=self.name, restarts=self.restarts,
                        exit_code=proc.poll() if proc is not None else None)
            self._kill()
            failed = 0
            while not self._stop.is_set() and not self._spawn():
                log.warning("model_server_start_failed", server=self.name, error=self._error)
                self._stop.wait(self.cfg.health_interval_s)

    def _kill(self) -> None:
        proc = self.proc
        if proc is None or proc.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()

    def _log_tail(self, n: int = 600) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-n:].replace("\n", " | ")
        except OSError:
            return ""

    # -- the actor's methods ------------------------------------------------------------
    def base_url(self) -> str:
        return self.url

    def status(self) -> dict[str, Any]:
        import ray

        proc = self.proc
        return {"name": self.name, "url": self.url, "pid": proc.pid if proc else None,
                "running": proc is not None and proc.poll() is None, "healthy": _healthy(self.url),
                "restarts": self.restarts, "node_id": ray.get_runtime_context().get_node_id(),
                "actor_pid": os.getpid(), "log": str(self.log_path)}

    def kill_server(self) -> int | None:
        """SIGKILL the server process (what a crash looks like); the supervisor restarts it."""
        proc = self.proc
        if proc is None or proc.poll() is not None:
            return None
        os.killpg(proc.pid, signal.SIGKILL)
        return proc.pid

    def stop(self) -> None:
        self._stop.set()
        self._kill()


# ------------------------------------------------------------------------------ the router (in the driver)


class ModelRouter:
    """Hands out the base_url of the healthy replica with the fewest leases (round-robin among ties)."""

    def __init__(self, name: str, replicas: list[Any], timeout_s: float = 10.0, url_ttl_s: float = 2.0):
        self.name = name
        self.replicas = replicas
        self.timeout_s = timeout_s
        # a replica's url changes only when its actor restarts; asking the actor on every lease cost a
        # Ray round trip per question (10-25 ms on a busy 2-core node), so an answer is reused this long
        self.url_ttl_s = url_ttl_s
        self._urls: list[tuple[str, float] | None] = [None] * len(replicas)
        self.in_flight = [0] * len(replicas)
        self.leases = [0] * len(replicas)  # total handed out, per replica
        self._next = 0
        self._lock = threading.Lock()

    def _order(self) -> list[int]:
        n = len(self.replicas)
        start = self._next
        self._next = (self._next + 1) % n
        return sorted(range(n), key=lambda i: (self.in_flight[i], (i - start) % n))

    @contextlib.contextmanager
    def lease(self) -> Iterator[str]:
        """A replica's base_url for the duration of the block. ModelServerError when none answers."""
        from ray.exceptions import GetTimeoutError, RayActorError

        with self._lock:
            order = self._order()
        errors = []
        for i in order:
            try:
                url = self._url(i)
            except (RayActorError, GetTimeoutError) as exc:
                errors.append(f"replica {i}: {type(exc).__name__}")
                continue
            with self._lock:
                self.in_flight[i] += 1
                self.leases[i] += 1
            try:
                yield url
            finally:
                with self._lock:
                    self.in_flight[i] -= 1
            return
        raise ModelServerError(f"no replica of model server {self.name!r} answers ({'; '.join(errors)})")

    def _url(self, i: int) -> str:
        import ray

        cached = self._urls[i]
        now = time.monotonic()
        if cached is not None and now - cached[1] < self.url_ttl_s:
            return cached[0]
        self._urls[i] = None
        url = ray.get(self.replicas[i].base_url.remote(), timeout=self.timeout_s)  # also: is the actor alive?
        self._urls[i] = (url, now)
        return url

    def status(self) -> list[dict[str, Any]]:
        import ray

        return ray.get([r.status.remote() for r in self.replicas], timeout=self.timeout_s)


_ROUTERS: dict[str, ModelRouter] = {}
_ROUTERS_LOCK = threading.Lock()


def _spec_key(name: str, cfg: ModelServerConfig) -> str:
    return hashlib.sha1(f"{name}:{cfg.model_dump_json()}".encode()).hexdigest()[:10]


def start_model_servers(ray_cfg: RayConfig) -> dict[str, ModelRouter]:
    """Start (or find) every configured server's replicas and wait until each answers; one router per server."""
    import ray

    from infra.runtime.cluster import ensure_ray

    if not ray_cfg.model_servers:
        return {}
    ensure_ray(ray_cfg)
    remote = ray.remote(ModelServer)
    routers: dict[str, ModelRouter] = {}
    with _ROUTERS_LOCK:
        pending = {}
        for name, cfg in ray_cfg.model_servers.items():
            key = f"{ray_cfg.namespace}:{_spec_key(name, cfg)}"
            if key in _ROUTERS:
                routers[name] = _ROUTERS[key]
                continue
            replicas = [remote.options(name=f"agentflow-model-{name}-{_spec_key(name, cfg)}-{i}", namespace=ray_cfg.namespace,
                                       get_if_exists=True, max_restarts=ray_cfg.max_restarts, max_task_retries=0,
                                       num_cpus=cfg.num_cpus, num_gpus=cfg.num_gpus or None,
                                       resources=dict(cfg.resources) or None, max_concurrency=4)
                        .remote(f"{name}-{i}", cfg) for i in range(cfg.replicas)]
            pending[key] = (name, cfg, replicas)
        for key, (name, cfg, replicas) in pending.items():
            try:  # __init__ returns once the server answers: the first call waits for that
                ray.get([r.base_url.remote() for r in replicas], timeout=cfg.startup_timeout_s + 30)
            except Exception as exc:
                raise ModelServerError(f"model server {name!r} did not start: {str(exc).splitlines()[0][:300]}") from exc
            _ROUTERS[key] = routers[name] = ModelRouter(name, replicas, url_ttl_s=cfg.health_interval_s)
            log.info("model_server_ready", server=name, engine=cfg.engine, replicas=cfg.replicas)
    return routers


def forget_model_servers() -> None:
    with _ROUTERS_LOCK:
        _ROUTERS.clear()


# ------------------------------------------------------------------------------ a scripted endpoint

Responder = Callable[[list[dict[str, Any]]], str]


class JsonHandler(BaseHTTPRequestHandler):
    """A quiet HTTP/1.1 handler that answers JSON: the base of loopback OpenAI-style endpoints."""

    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # headers and body go out in two writes: no 40 ms delayed-ACK stall

    def log_message(self, *args: Any) -> None:  # quiet
        pass

    def _send(self, code: int, payload: dict[str, Any]) -> None:
        body = json.dumps(payload).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


class ScriptedModelServer:
    """OpenAI-compatible /v1/models and /v1/chat/completions on loopback, answering `respond(messages)`
    after `latency_ms` (requests are served in parallel, as by a batching server)."""

    def __init__(self, respond: Responder, *, latency_ms: float = 50.0, host: str = "127.0.0.1", port: int = 0,
                 model: str = "scripted"):
        self.respond = respond
        self.latency_s = latency_ms / 1000.0
        self.model = model
        self.calls = 0
        self.in_flight = 0
        self.max_in_flight = 0  # most requests served at the same time
        self._lock = threading.Lock()
        server = self

        class Handler(JsonHandler):
            def do_GET(self) -> None:  # noqa: N802
                if self.path.rstrip("/").endswith("/models"):
                    self._send(200, {"object": "list", "data": [{"id": server.model, "object": "model", "owned_by": "agentflow"}]})
                else:
                    self._send(404, {"error": {"message": "not found"}})

            def do_POST(self) -> None:  # noqa: N802
                length = int(self.headers.get("Content-Length") or 0)
                try:
                    request = json.loads(self.rfile.read(length) or b"{}")
                    messages = request["messages"]
                except (ValueError, KeyError):
                    self._send(400, {"error": {"message": "expected a chat completion request"}})
                    return
                with server._lock:
                    server.in_flight += 1
                    server.max_in_flight = max(server.max_in_flight, server.in_flight)
                try:
                    time.sleep(server.latency_s)
                    text = server.respond(messages)
                finally:
                    with server._lock:
                        server.in_flight -= 1
                        server.calls += 1
                tokens_in = sum(len(str(m.get("content") or "")) for m in messages) // 4 + 1
                tokens_out = len(text) // 4 + 1
                self._send(200, {
                    "id": f"chatcmpl-{server.calls}", "object": "chat.completion", "created": int(time.time()),
                    "model": request.get("model", server.model),
                    "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
                    "usage": {"prompt_tokens": tokens_in, "completion_tokens": tokens_out, "total_tokens": tokens_in + tokens_out},
                })

        self.httpd = ThreadingHTTPServer((host, port), Handler)
        self.httpd.daemon_threads = True
        self.base_url = f"http://{host}:{self.httpd.server_address[1]}/v1"
        self._thread: threading.Thread | None = None

    def start(self) -> "ScriptedModelServer":
        self._thread = threading.Thread(target=self.httpd.serve_forever, name="scripted-model-server", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

    def __enter__(self) -> "ScriptedModelServer":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
