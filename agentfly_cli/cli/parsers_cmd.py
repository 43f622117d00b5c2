"""``agentfly parsers``: the tool-call parsers a run can use (``--parser NAME``)."""

from __future__ import annotations

import typer

from agentfly_cli.cli.common import print_listing
from agentfly_cli.cli.output import JSON_OPTION, handle_errors

app = typer.Typer(help="List the tool-call parsers (`--parser NAME`).", no_args_is_help=True)


@app.command("list")
@handle_errors
def list_parsers(as_json: bool = JSON_OPTION) -> None:
    """List every registered tool-call parser and the plugin that provides it."""
    print_listing("parsers", as_json)
