"""``agentfly plugins``: what is installed, what each plugin provides, and what failed."""

from __future__ import annotations

from agentfly_cli.cli.output import JSON_OPTION, handle_errors, print_json, stdout_console, table
from agentfly_cli.plugins import LOAD_PLUGINS_ENV, get_plugin_host


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
    rows = []
    for plugin in host.plugins:
        problems = ([plugin.error] if plugin.error else []) + [
            f"{hook}: {message}" for hook, message in plugin.hook_errors.items()
        ]
        status = "ok" if not problems else "error: " + "; ".join(problems)
        if plugin.warnings:
            status += " (warning: " + "; ".join(plugin.warnings) + ")"
        rows.append(
            (
                plugin.name,
                plugin.distribution or "?",
                plugin.version or "?",
                "yes" if plugin.builtin else "no",
                ", ".join(plugin.hooks) or "-",
                status,
            )
        )
    console = stdout_console()
    console.print(
        table(
            "agentfly plugins",
            ("name", "distribution", "version", "built-in", "hooks", "status"),
            rows,
        )
    )
    if host.missing_requested:
        console.print(
            f"{LOAD_PLUGINS_ENV} names distributions without an agentfly plugin: "
            + ", ".join(host.missing_requested),
            markup=False,
        )
