"""What every `agentflow` command shares: its consoles and error exit, the local offline defaults set before Prefect
and Ray are imported, a run's settings from --config/--set/--corpus, and the preflight that fails fast."""

from __future__ import annotations

import os
import uuid
from datetime import datetime, timezone
from pathlib import Path
from typing import NoReturn, Optional

import typer
from rich.console import Console

console = Console(soft_wrap=True)
err_console = Console(stderr=True, soft_wrap=True)


def command_group(help: str) -> typer.Typer:
    """A typer app for one command group (`agentflow <group> ...`)."""
    return typer.Typer(help=help, no_args_is_help=True, add_completion=False)


def fail(message: str, code: int = 2) -> NoReturn:
    """Print one clear error (rich markup allowed) and exit non-zero; 2 is a usage error, nothing ran."""
    err_console.print(f"[bold red]error:[/] {message}", highlight=False)
    raise typer.Exit(code)


def new_run_id() -> str:
    return f"{datetime.now(timezone.utc):%Y%m%dT%H%M%S}-{uuid.uuid4().hex[:6]}"


def prepare_env() -> None:
    """Local, quiet, offline defaults for Prefect and Ray; set before they are imported."""
    home = Path(os.environ.get("AGENTFLOW_HOME", ".")).resolve()
    os.environ.setdefault("PREFECT_HOME", str(home / ".prefect"))
    os.environ.setdefault("DO_NOT_TRACK", "1")
    os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
    os.environ.setdefault("PREFECT_LOGGING_LEVEL", "WARNING")
    os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "120")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    from infra.runtime.events import configure_process_logging

    configure_process_logging(os.environ.get("AGENTFLOW_LOG_LEVEL", "warning"))


def run_settings(config: Optional[Path], corpus: Optional[Path], overrides: list[str], out_dir: Optional[str] = None,
                 adapter: Optional[Path] = None):
    """The run's Settings: --config, then --set, then --corpus/--out; --adapter switches the Planner to it."""
    from infra.runtime.settings import ConfigError, load_settings

    values = {}
    if corpus is not None:
        if not corpus.is_file():
            fail(f"corpus file {str(corpus)!r} does not exist")
        values["tools.search.corpus"] = str(corpus.resolve())
    if out_dir is not None:
        values["storage.out"] = out_dir
    try:
        settings = load_settings(config, overrides, **values)
    except ConfigError as exc:
        fail(str(exc))
    if "search" in settings.tools.allow and not settings.tools.search.corpus:
        settings.tools.allow = [t for t in settings.tools.allow if t != "search"]
        err_console.print("note: no corpus given (--corpus or tools.search.corpus): the search tool is disabled",
                          highlight=False)
    if adapter is not None:  # modular-trained: the Planner on a Flow-GRPO adapter
        from flows.systems import SystemOptions, SystemUnavailable, check_system, trained_settings

        try:
            check_system("modular-trained", SystemOptions(adapter=str(adapter)))
        except SystemUnavailable as exc:
            fail(str(exc))
        settings = trained_settings(settings, str(adapter))
    return settings


def preflight(settings) -> None:
    """Fail fast, with one clear message, on a missing model, an unreachable endpoint or a bad corpus."""
    from infra.models import build_backend
    from infra.models.base import ModelError
    from infra.tools.search import CorpusError, cached_index

    roles = {"planner": settings.models.planner, "generator": settings.models.generator}
    if "generalist" in settings.tools.allow:
        roles["generalist"] = settings.models.generalist
    if settings.models.verifier is not None:
        roles["verifier"] = settings.models.verifier
    if settings.ray.enabled:  # roles served by Ray model servers are checked when the servers start, not loaded here
        served = {r for server in settings.ray.model_servers.values() for r in server.roles}
        roles = {r: cfg for r, cfg in roles.items() if r not in served}
    for role, cfg in roles.items():
        try:
            build_backend(cfg)
        except ModelError as exc:
            fail(f"{role} model: {exc}")
    if "search" in settings.tools.allow:
        try:
            cached_index(settings.tools.search.corpus)
        except (CorpusError, OSError) as exc:
            fail(f"corpus: {exc}")
