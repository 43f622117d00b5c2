"""``agentfly backends``: the LLM backends a rollout can use (``--backend NAME``)."""

from __future__ import annotations

import typer

from agentfly_cli.cli.common import print_listing
from agentfly_cli.cli.output import JSON_OPTION, handle_errors

app = typer.Typer(help="List the LLM backends (`--backend NAME`).", no_args_is_help=True)


@app.command("list")
@handle_errors
def list_backends(as_json: bool = JSON_OPTION) -> None:
    """List every registered backend and the plugin that provides it."""
    print_listing("backends", as_json)
