"""``agentfly tools``: list, inspect and call tools."""

from __future__ import annotations

import json
import math
from typing import TYPE_CHECKING, Any

import typer
from rich.json import JSON
from rich.markup import escape

from agentfly_cli.api.errors import UserError, printable
from agentfly_cli.cli.common import conflict_of, host_with_warnings, provenance_fields
from agentfly_cli.cli.output import (
    EXIT_FAILURE,
    EXIT_USAGE,
    JSON_OPTION,
    handle_errors,
    print_json,
    print_text,
    stderr_console,
    stdout_console,
    summary,
    table,
)

if TYPE_CHECKING:  # the tool machinery loads when a command runs, not for `agentfly --help`
    from agentfly_cli.api.components import Tool

app = typer.Typer(help="List, inspect and call tools.", no_args_is_help=True)


def tool_summary(component: Tool) -> dict[str, Any]:
    return {
        "name": component.name,
        "description": component.description,
        "terminal": component.terminal,
        "env": component.env,
        "timeout": component.timeout,
        "schema": component.schema,
    }


@app.command("list")
@handle_errors
def list_tools(as_json: bool = JSON_OPTION) -> None:
    """List every registered tool and the plugin that provides it."""
    host = host_with_warnings()
    registry = host.components.tools
    items = []
    for entry in registry.entries():
        item = {**tool_summary(entry.obj), **provenance_fields(entry)}
        item["conflict"] = conflict_of(registry, entry)
        items.append(item)
    if as_json:
        print_json(items)
        return
    rows = []
    for item, entry in zip(items, registry.entries(), strict=True):
        flags = [
            *(["terminal"] if item["terminal"] else []),
            *([f"env: {item['env']}"] if item["env"] else []),
            *(["CONFLICT"] if item["conflict"] else []),
        ]
        rows.append(
            (
                item["name"],
                entry.obj.signature_text() or "-",
                summary(item["description"]),
                "\n".join([item["plugin"], *flags]),  # flags under the plugin: fits 80 columns
            )
        )
    columns = ("name", "arguments", "description", "plugin, flags")
    stdout_console().print(table(f"{len(items)} tools", columns, rows))


@app.command("show")
@handle_errors
def show_tool(
    name: str = typer.Argument(
        ..., help="Tool name, module:attr / file.py:attr, or mcp:<command or URL>."
    ),
    as_json: bool = JSON_OPTION,
) -> None:
    """Show a tool's OpenAI function-calling schema (every tool of an MCP server)."""
    from agentfly_cli.api.components import is_mcp_server, resolve_tools

    components = resolve_tools(name)
    if as_json:
        server = is_mcp_server(name)  # a list, always
        print_json([c.schema for c in components] if server else components[0].schema)
        return
    console = stdout_console()
    for component in components:
        flags = [f"timeout {component.timeout:g} s" if component.timeout else "no timeout"]
        if component.terminal:
            flags.append("terminal: a call ends the episode")
        if component.env:
            flags.append(f"needs env '{component.env}'")
        name = escape(printable(component.name))
        console.print(f"[bold]{name}[/bold]  ({escape('; '.join(flags))})", highlight=False)
        console.print(JSON(json.dumps(component.schema)))


@app.command("call")
@handle_errors
def call_tool(
    name: str = typer.Argument(
        ..., help="Tool name, module:attr / file.py:attr, or mcp:<command or URL>#<tool>."
    ),
    args: str = typer.Option("{}", "--args", "-a", help="Arguments as a JSON object."),
    task: str = typer.Option(
        "{}", "--task", help="For env tools: the task (JSON object) the env is reset with."
    ),
    timeout: float | None = typer.Option(None, "--timeout", help="Seconds; default: the tool's."),
    option: list[str] = typer.Option(
        [], "--option", "-o", help="For env tools: KEY=VALUE for the env's factory (repeatable)."
    ),
    as_json: bool = JSON_OPTION,
) -> None:
    """Run a tool once and print its result.

    Exit code 1 when the tool returns an error; 2 for bad input (including invalid arguments).
    """
    import asyncio

    from agentfly_cli.api.components import call_tool_async, is_bad_input, resolve_tool
    from agentfly_cli.api.envs import parse_options

    component = resolve_tool(name)
    arguments = _json_object(args, "--args")
    task_row = _json_object(task, "--task")
    options = parse_options(option)
    if options and component.env is None:
        raise UserError(f"--option is for env tools; '{component.name}' uses no env")
    if timeout is not None and not (math.isfinite(timeout) and timeout > 0):
        raise UserError(f"--timeout must be a positive number of seconds, e.g. 5 (got {timeout})")
    run = call_tool_async(component, arguments, task=task_row, timeout=timeout, options=options)
    result = asyncio.run(run)
    if as_json:
        print_json(result.to_dict())
    else:
        latency_ms = 1000 * result.info.get("latency_s", 0.0)
        status = "ok" if result.ok else f"error ({result.error_kind})"
        stderr_console().print(
            f"{status} · {printable(component.name)} · {latency_ms:.1f} ms",
            style="dim",
            markup=False,
            highlight=False,
        )
        print_text(result.observation)
    if not result.ok:
        raise typer.Exit(EXIT_USAGE if is_bad_input(result) else EXIT_FAILURE)


def _json_object(text: str, option: str) -> dict[str, Any]:
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise UserError(f"{option} is not valid JSON ({exc.msg} at position {exc.pos})") from None
    if not isinstance(value, dict):
        raise UserError(f"{option} must be a JSON object like '{{\"x\": 1}}'")
    return value
