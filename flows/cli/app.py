"""The `agentflow` command line: every command group and command, registered on one typer app.

Each command lives in its own module of flows/cli/ and only parses, calls a flow and prints; flows/cli/startup.py
holds what they share. `python -m flows.cli` and the `agentflow` script both run `main`.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Optional

import typer

from flows.cli.data import data_app
from flows.cli.eval import eval_command
from flows.cli.injection import injection_eval_command
from flows.cli.models import models_app
from flows.cli.runs import batch, run
from flows.cli.startup import console
from flows.cli.tool import tool_app
from flows.cli.train import train
from flows.cli.verifier import verifier_eval_app
from flows.cli.world import world_app

app = typer.Typer(help="AgentFlow: modular, measurable research agents.", no_args_is_help=True, add_completion=False)
app.add_typer(world_app, name="world")
app.add_typer(data_app, name="data")
app.add_typer(models_app, name="models")
app.add_typer(verifier_eval_app, name="verifier-eval")
app.command("eval")(eval_command)
app.add_typer(tool_app, name="tool")
app.command("injection-eval")(injection_eval_command)
app.command()(run)
app.command()(batch)
app.command()(train)


@app.command()
def schemas(out_dir: Optional[Path] = typer.Option(None, "--out", help="Write one <Name>.schema.json per contract here.")) -> None:
    """Print (or write) the JSON schemas of every contract."""
    from tasks.contracts import json_schemas

    all_schemas = json_schemas()
    if out_dir is None:
        print(json.dumps(all_schemas, indent=2))
        return
    out_dir.mkdir(parents=True, exist_ok=True)
    for name, schema in all_schemas.items():
        (out_dir / f"{name}.schema.json").write_text(json.dumps(schema, indent=2))
    console.print(f"wrote {len(all_schemas)} schemas to {out_dir}")


def main() -> None:  # pragma: no cover
    app(prog_name="agentflow")


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
