"""What a batch runs on when settings.ray.enabled: Ray joined, model servers started, tool actors warm (`RayRuntime`,
which hands each question the settings that point its roles at one model-server replica), and leaving it all.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from typing import TYPE_CHECKING

from infra.runtime.cluster import ensure_ray
from infra.runtime.settings import Settings

if TYPE_CHECKING:
    from infra.runtime.model_server import ModelRouter


def shutdown_ray() -> None:
    """Leave Ray (a local instance stops) and forget every actor client of this process."""
    import ray

    from infra.runtime.actors import forget_actor_clients
    from infra.runtime.model_server import forget_model_servers

    forget_actor_clients()
    forget_model_servers()
    if ray.is_initialized():
        ray.shutdown()


class RayRuntime:
    """What a batch runs on when settings.ray.enabled: Ray joined, model servers up, tool actors warm."""

    def __init__(self, routers: dict[str, "ModelRouter"]):
        self.routers = routers
        self._derived: dict[tuple, tuple[Settings, Settings]] = {}  # (id, urls) -> (base, derived)
        self._derived_lock = threading.Lock()

    @classmethod
    def start(cls, settings: Settings) -> "RayRuntime":
        from infra.runtime.actors import RemoteSearchIndex, SandboxPool
        from infra.runtime.model_server import start_model_servers

        ensure_ray(settings.ray)
        routers = start_model_servers(settings.ray)
        if "python" in settings.tools.allow:
            SandboxPool.connect(settings.ray, settings.tools.python.sandbox)
        if "search" in settings.tools.allow and settings.tools.search.corpus:
            RemoteSearchIndex.connect(settings.ray, settings.tools.search.corpus)
        return cls(routers)

    @contextlib.contextmanager
    def question_settings(self, settings: Settings) -> Iterator[Settings]:
        """`settings` with every served role pointed at the least-loaded replica of its server, for one question."""
        if not self.routers:
            yield settings
            return
        with contextlib.ExitStack() as stack:
            urls = {name: stack.enter_context(router.lease()) for name, router in self.routers.items()}
            key = (id(settings), tuple(sorted(urls.items())))
            with self._derived_lock:
                hit = self._derived.get(key)
            if hit is not None and hit[0] is settings:  # validating Settings reads the environment: ms per question
                yield hit[1]
                return
            derived = self._with_servers(settings, urls)
            with self._derived_lock:
                if len(self._derived) > 256:
                    self._derived.clear()
                self._derived[key] = (settings, derived)
            yield derived

    @staticmethod
    def _with_servers(settings: Settings, urls: dict[str, str]) -> Settings:
        tree = settings.model_dump(mode="json")
        for name, base_url in urls.items():
            server = settings.ray.model_servers[name]
            for role in server.roles:
                role_cfg = tree["models"].get(role) or {}
                role_cfg.update(backend="openai", base_url=base_url, model=server.model)
                if server.engine == "llama_cpp":  # sample as the embedded backend does (the server's default is 1.1)
                    role_cfg["extra_body"] = {"repeat_penalty": 1.0, **(role_cfg.get("extra_body") or {})}
                tree["models"][role] = role_cfg
        return Settings.model_validate(tree)
