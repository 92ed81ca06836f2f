"""`agentflow tool ...`: run one tool by hand, through exactly the path the Executor takes.

`agentflow tool python --file PATH` builds a Plan for the ``python`` tool and hands it to
``tasks.modules.executor.execute`` with the loaded settings: the same allow-list check, argument
validation, sandbox mechanism and limits (``tools.python.*``) as a research run. Exit status:
0 when the Result is ``ok``, 1 when the program failed, timed out or was refused, 2 for a usage
error (missing file, bad configuration).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import typer
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from flows.cli.startup import command_group, console, fail, prepare_env

tool_app = command_group(
    "Run one tool by hand through the Executor (same allow-list, sandbox and limits as a research run)."
)

EXIT_FAILED = 1  # the tool ran (or was refused) and its status is not ok
EXIT_USAGE = 2  # nothing ran: bad file or configuration


def read_program(path: Path) -> str:
    """The program's source as text, or a one-line usage error."""
    if not path.exists():
        fail(f"file {str(path)!r} does not exist")
    if not path.is_file():
        fail(f"{str(path)!r} is not a regular file")
    try:
        raw = path.read_bytes()
    except OSError as exc:
        fail(f"cannot read {str(path)!r}: {exc.strerror or exc}")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        fail(f"{str(path)!r} is not UTF-8 text (byte {exc.start}): the python tool takes source code")
    raise AssertionError("unreachable")  # pragma: no cover


def print_result(result) -> None:
    """A Result of the python tool for people: status line, message, output streams."""
    data = result.data if isinstance(result.data, dict) else {}
    colour = {"ok": "green", "error": "red", "timeout": "yellow", "denied": "magenta"}[result.status.value]
    head = Table.grid(padding=(0, 2))
    head.add_row("status", Text(result.status.value, style=f"bold {colour}"))
    if result.error:
        head.add_row("message", Text(result.error))
    head.add_row("exit code", str(data.get("exit_code")))
    head.add_row("elapsed", f"{result.elapsed_ms / 1000:.2f} s")
    if result.source is not None:
        head.add_row("sandbox", result.source.uri)
    if data.get("truncated"):
        head.add_row("truncated", "yes: output past tools.python.max_output_bytes was dropped")
    console.print(head)
    for stream in ("stdout", "stderr"):
        text = data.get(stream)
        if text:
            console.print(Panel(Text(text.rstrip("\n")), title=stream, title_align="left", expand=False))


@tool_app.command("python")
def python_command(
    file: Path = typer.Option(..., "--file", "-f", help="Python source file to run in the sandbox."),
    config: Optional[Path] = typer.Option(None, help="Run configuration (YAML/JSON); tools.python.* sets the limits."),
    set_: list[str] = typer.Option([], "--set", help="Override a config value: section.key=value (repeatable), "
                                   "e.g. tools.python.timeout_s=2."),
    as_json: bool = typer.Option(False, "--json", help="Print the Result record as JSON."),
) -> None:
    """Run FILE with the python tool, exactly as the Executor would, and print the Result."""
    prepare_env()
    from infra.runtime.settings import ConfigError, load_settings
    from infra.tools.sandbox import SandboxUnavailable
    from tasks.contracts import Plan
    from tasks.modules.executor import execute

    code = read_program(file)
    try:
        settings = load_settings(config, set_)
    except ConfigError as exc:
        fail(str(exc))
    plan = Plan(step_id=1, sub_goal=f"run {file.name}", tool="python", args={"code": code},
                justification="agentflow tool python")
    try:
        result = execute(plan, settings)
    except SandboxUnavailable as exc:  # tools.python.sandbox=bwrap on a machine where it cannot run
        fail(f"python sandbox: {exc}")
    if as_json:
        print(json.dumps(json.loads(result.model_dump_json()), indent=2))
    else:
        print_result(result)
    if result.status.value != "ok":
        raise typer.Exit(EXIT_FAILED)
