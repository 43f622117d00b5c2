"""``agentfly recipes``: list the registered recipes."""

from __future__ import annotations

import typer

from agentfly_cli.cli.common import conflict_of, host_with_warnings, provenance_fields
from agentfly_cli.cli.output import JSON_OPTION, handle_errors, print_json, stdout_console, table

app = typer.Typer(
    help="List recipes (YAML training and rollout configurations).", no_args_is_help=True
)


@app.command("list")
@handle_errors
def list_recipes(as_json: bool = JSON_OPTION) -> None:
    """List every registered recipe and the plugin that provides it."""
    host = host_with_warnings()
    registry = host.components.recipes
    items = [
        {
            "name": entry.name,
            "description": entry.obj.description,
            "path": entry.obj.path,
            **provenance_fields(entry),
            "conflict": conflict_of(registry, entry),
        }
        for entry in registry.entries()
    ]
    if as_json:
        print_json(items)
        return
    rows = [(i["name"], i["description"], i["path"], i["plugin"]) for i in items]
    stdout_console().print(
        table(f"{len(items)} recipes", ("name", "description", "path", "plugin"), rows)
    )
