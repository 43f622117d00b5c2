"""``agentfly backends``: the LLM backends a rollout can use (``--backend NAME``)."""

from __future__ import annotations

import typer

from agentfly_cli.cli.common import conflict_of, host_with_warnings, provenance_fields
from agentfly_cli.cli.output import JSON_OPTION, handle_errors, print_json, stdout_console, table

app = typer.Typer(help="List the LLM backends (`--backend NAME`).", no_args_is_help=True)


@app.command("list")
@handle_errors
def list_backends(as_json: bool = JSON_OPTION) -> None:
    """List every registered backend and the plugin that provides it."""
    registry = host_with_warnings().components.backends
    items = [
        {
            "name": entry.name,
            "description": entry.description,
            **provenance_fields(entry),
            "conflict": conflict_of(registry, entry),
        }
        for entry in registry.entries()
    ]
    if as_json:
        print_json(items)
        return
    rows = [
        (
            item["name"],
            item["description"],
            item["plugin"] + (" (CONFLICT)" if item["conflict"] else ""),
        )
        for item in items
    ]
    stdout_console().print(table(f"{len(items)} backends", ("name", "description", "plugin"), rows))
