"""``agentfly plugins``: what is installed, what each plugin provides, and what failed."""

from __future__ import annotations

from agentfly_cli.api.components import LOAD_PLUGINS_ENV, PluginInfo, get_plugin_host
from agentfly_cli.cli.output import (
    JSON_OPTION,
    handle_errors,
    print_json,
    print_text,
    stdout_console,
    table,
)


def problems_of(plugin: PluginInfo) -> list[str]:
    """Load errors, hook errors and warnings, one line each."""
    lines = [f"error: {plugin.error}"] if plugin.error else []
    lines += [f"error in {hook}: {message}" for hook, message in plugin.hook_errors.items()]
    lines += [f"warning: {message}" for message in plugin.warnings]
    return lines


@handle_errors
def plugins(as_json: bool = JSON_OPTION) -> None:
    """List installed plugins: distribution, version, hooks, built-in or not, load errors."""
    host = get_plugin_host()
    if as_json:
        print_json(
            {
                "plugins": [p.to_dict() for p in host.plugins],
                "missing_requested": host.missing_requested,
            }
        )
        return
    rows = [
        (
            plugin.name,
            f"{plugin.distribution or '?'} {plugin.version or '?'}"
            + (" (built-in)" if plugin.builtin else ""),
            ", ".join(hook.removeprefix("register_") for hook in plugin.hooks) or "-",
            "ok" if plugin.ok else "ERROR",
        )
        for plugin in host.plugins
    ]
    columns = ("name", "distribution", "hooks", "status")
    stdout_console().print(table(f"{len(rows)} plugins", columns, rows))
    for plugin in host.plugins:
        for line in problems_of(plugin):
            print_text(f"{plugin.name}: {line}")
    if host.missing_requested:
        print_text(
            f"{LOAD_PLUGINS_ENV} names distributions without an agentfly plugin: "
            + ", ".join(host.missing_requested)
        )
