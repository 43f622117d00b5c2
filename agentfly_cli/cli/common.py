"""Helpers shared by the command modules: the plugin host and component listings."""

from __future__ import annotations

from agentfly_cli.api.components import (
    PluginHost,
    conflict_of,
    get_plugin_host,
    provenance_fields,
)
from agentfly_cli.cli.fitted_table import print_fitted
from agentfly_cli.cli.output import print_json, stdout_console, warn

__all__ = ["conflict_of", "host_with_warnings", "print_listing", "provenance_fields"]


def host_with_warnings() -> PluginHost:
    """The plugin host; broken plugins are mentioned on stderr in one line, never fatal."""
    host = get_plugin_host()
    if host.failed:
        names = ", ".join(p.name for p in host.failed)
        warn(
            f"{len(host.failed)} plugin(s) had errors ({names}); run `agentfly plugins` for details"
        )
    if host.missing_requested:
        warn(
            "AGENTFLY_LOAD_PLUGINS names distributions that provide no agentfly plugin: "
            + ", ".join(host.missing_requested)
        )
    return host


def print_listing(kind: str, as_json: bool) -> None:
    """Print the components of ``kind`` (name, description, plugin) as a table or JSON."""
    registry = host_with_warnings().components.of(kind)
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
    print_fitted(stdout_console(), f"{len(items)} {kind}", ("name", "description", "plugin"), rows)
