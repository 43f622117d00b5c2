"""``agentfly rewards``: list and try rewards."""

from __future__ import annotations

import json

import typer

from agentfly_cli.api.errors import UserError, printable
from agentfly_cli.cli.common import conflict_of, host_with_warnings, provenance_fields
from agentfly_cli.cli.output import (
    EXIT_FAILURE,
    JSON_OPTION,
    handle_errors,
    print_json,
    stdout_console,
    summary,
    table,
)

app = typer.Typer(help="List and try rewards.", no_args_is_help=True)


@app.command("list")
@handle_errors
def list_rewards(as_json: bool = JSON_OPTION) -> None:
    """List every registered reward, the dataset fields it needs, and its plugin."""
    host = host_with_warnings()
    registry = host.components.rewards
    items = [
        {
            "name": entry.name,
            "description": entry.obj.description,
            "fields": entry.obj.fields,
            "timeout": entry.obj.timeout,
            "on_error": entry.obj.on_error,
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
            ", ".join(item["fields"]) or "-",
            summary(item["description"]),
            item["plugin"] + (" (CONFLICT)" if item["conflict"] else ""),
        )
        for item in items
    ]
    stdout_console().print(
        table(f"{len(items)} rewards", ("name", "dataset fields", "description", "plugin"), rows)
    )


@app.command("call")
@handle_errors
def call_reward(
    name: str = typer.Argument(..., help="Reward name, or module:attr / file.py:attr."),
    prediction: str = typer.Option(..., "--prediction", "-p", help="The final answer to score."),
    fields: str = typer.Option(
        "{}", "--fields", "-f", help='Dataset fields as a JSON object, e.g. \'{"answer": "42"}\'.'
    ),
    options: str = typer.Option(
        "{}", "--options", "-o", help="A configurable reward's options (JSON), e.g. llm_judge's."
    ),
    as_json: bool = JSON_OPTION,
) -> None:
    """Score one answer against dataset fields (exit 1 if the reward fails, 2 on bad input)."""
    try:
        settings = json.loads(options)
    except json.JSONDecodeError as exc:
        raise UserError(f"--options is not valid JSON ({exc.msg} at position {exc.pos})") from None
    if not isinstance(settings, dict):
        raise UserError('--options must be a JSON object like \'{"base_url": "..."}\'')
    import asyncio

    from agentfly_cli.api.components import resolve_reward, score_reward_async

    component = resolve_reward(name).with_options(settings)
    try:
        row = json.loads(fields)
    except json.JSONDecodeError as exc:
        raise UserError(f"--fields is not valid JSON ({exc.msg} at position {exc.pos})") from None
    if not isinstance(row, dict):
        raise UserError('--fields must be a JSON object like \'{"answer": "42"}\'')
    missing = [field for field in component.fields if field not in row]
    if missing:
        raise UserError(
            f"reward '{component.name}' needs dataset field(s) {', '.join(missing)}; pass them "
            f"with --fields '{{\"{missing[0]}\": ...}}'"
        )
    # on_error="raise": still a failed score, not a crash
    result = asyncio.run(score_reward_async(component, prediction, row))
    if as_json:
        print_json(result.to_dict())
    else:
        console = stdout_console()
        console.print(f"{result.reward:g}", highlight=False)
        for key, value in result.extras.items():
            console.print(printable(f"  {key}: {value}"), markup=False, highlight=False)
        if result.failed:
            console.print(printable(f"failed: {result.error}"), markup=False, highlight=False)
    if result.failed:
        raise typer.Exit(EXIT_FAILURE)
