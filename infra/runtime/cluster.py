"""Ray for drivers, tests and the CLI: join a cluster (settings or $RAY_ADDRESS) or start a local one on loopback.

A local instance binds 127.0.0.1 only, starts no dashboard, sends no usage stats, writes no auth
token and cannot reach cloud metadata endpoints (its processes get a dead HTTP proxy; loopback is
exempt). What runs on it (model servers, tool actors) and leaving it: infra/runtime/services.py.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Iterator

import structlog

from infra.runtime.settings import RayConfig

log = structlog.get_logger(__name__)

#: Settings that keep Ray (and Prefect's client next to it) on loopback (ENVIRONMENT.md).
LOOPBACK_ENV = {
    "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0",
    "RAY_USAGE_STATS_ENABLED": "0",
    "RAY_AUTH_MODE": "disabled",
}
DEAD_PROXY = "http://127.0.0.1:9"
LOOPBACK_HOSTS = ("127.0.0.1", "localhost")
_LOCK = threading.Lock()


def _with_loopback(no_proxy: str | None) -> str:
    parts = [p.strip() for p in (no_proxy or "").split(",") if p.strip()]
    return ",".join(parts + [h for h in LOOPBACK_HOSTS if h not in parts])


def loopback_env(base: dict[str, str] | None = None) -> dict[str, str]:
    """`base` (default os.environ) plus the loopback settings and a dead proxy: for processes that must not leave the machine."""
    env = dict(os.environ if base is None else base)
    env.update(LOOPBACK_ENV)
    env["http_proxy"] = env["https_proxy"] = env["HTTP_PROXY"] = env["HTTPS_PROXY"] = DEAD_PROXY
    env["no_proxy"] = env["NO_PROXY"] = _with_loopback(env.get("no_proxy"))
    return env


@contextlib.contextmanager
def _dead_proxy() -> Iterator[None]:
    """Processes started inside inherit a dead proxy (no metadata probes); this process gets its own back."""
    keys = ("http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY")
    saved = {k: os.environ.get(k) for k in keys}
    for k in keys:
        os.environ[k] = DEAD_PROXY
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def _is_loopback(address: str) -> bool:
    host = address.split("://", 1)[-1].rsplit(":", 1)[0]
    return host in LOOPBACK_HOSTS


def ensure_ray(cfg: RayConfig) -> str:
    """Join cfg.address / $RAY_ADDRESS, or start a local loopback-only instance; idempotent. Returns the GCS address."""
    import ray

    with _LOCK:
        if not ray.is_initialized():
            for key, value in LOOPBACK_ENV.items():
                os.environ.setdefault(key, value)
            for key in ("no_proxy", "NO_PROXY"):
                os.environ[key] = _with_loopback(os.environ.get(key))
            address = cfg.address or os.environ.get("RAY_ADDRESS")
            common = dict(namespace=cfg.namespace, log_to_driver=False, configure_logging=False)
            if address:
                extra = {"_node_ip_address": "127.0.0.1"} if _is_loopback(address) else {}
                ray.init(address=address, **common, **extra)
            else:
                with _dead_proxy():
                    ray.init(address="local", _node_ip_address="127.0.0.1", include_dashboard=False,
                             _temp_dir=cfg.temp_dir, num_cpus=cfg.num_cpus,
                             object_store_memory=cfg.object_store_mb * 1024 * 1024, **common)
            log.info("ray_joined", address=address or "local", namespace=cfg.namespace)
        return ray.get_runtime_context().gcs_address
