"""``agentfly env list``: the registered environment kinds.

(``agentfly env list``, the command's first name, still works; it is hidden from the help so
that ``env`` is the one noun for environments.)"""

from __future__ import annotations

import typer

from agentfly_cli.cli.common import conflict_of, host_with_warnings, provenance_fields
from agentfly_cli.cli.fitted_table import print_fitted
from agentfly_cli.cli.output import JSON_OPTION, handle_errors, print_json, stdout_console, summary

app = typer.Typer(help="List environments.", no_args_is_help=True)


@app.command("list")
@handle_errors
def list_envs(as_json: bool = JSON_OPTION) -> None:
    """List every registered environment, its pool settings, and the tools that use it."""
    host = host_with_warnings()
    registry = host.components.envs
    users: dict[str, list[str]] = {}
    for entry in host.components.tools.entries():
        if entry.obj.env:
            users.setdefault(entry.obj.env, []).append(entry.name)
    items = []
    for entry in registry.entries():
        spec = entry.obj
        items.append(
            {
                **spec.model_dump(exclude={"factory"}),
                "tools": users.get(spec.name, []),
                **provenance_fields(entry),
                "conflict": conflict_of(registry, entry),
            }
        )
    if as_json:
        print_json(items)
        return
    rows = [
        (
            item["name"],
            summary(item["description"]),
            " ".join(item["tools"]) or "-",
            item["plugin"]
            + (" (CONFLICT)" if item["conflict"] else "")
            + f"\nwarm {item['warm_size']}, max {item['pool_max']}",
        )
        for item in items
    ]
    columns = ("name", "description", "tools", "plugin, pool")
    print_fitted(stdout_console(), f"{len(items)} environments", columns, rows)
