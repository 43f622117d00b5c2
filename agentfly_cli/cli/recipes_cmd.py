"""``agentfly recipes``: list the registered recipes; show one with its data."""

from __future__ import annotations

import typer

from agentfly_cli.cli.common import conflict_of, host_with_warnings, provenance_fields
from agentfly_cli.cli.output import JSON_OPTION, handle_errors, print_json, stdout_console, table

app = typer.Typer(
    help="List recipes (YAML training and rollout configurations) and show one.",
    no_args_is_help=True,
)


@app.command("list")
@handle_errors
def list_recipes(as_json: bool = JSON_OPTION) -> None:
    """List every registered recipe and the plugin that provides it."""
    from agentfly_cli.api.recipes import recipe_label

    host = host_with_warnings()
    registry = host.components.recipes
    items = [
        {
            "name": recipe_label(entry),
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
    rows = [(i["name"], i["description"], i["plugin"]) for i in items]
    console = stdout_console()
    console.print(table(f"{len(items)} recipes", ("name", "description", "plugin"), rows))
    console.print("one recipe's file, settings and data: agentfly recipes show NAME")


@app.command("show")
@handle_errors
def show_recipe(
    name: str = typer.Argument(
        ..., help="A recipe name, or NAME:PARAM of a family (see `agentfly recipes list`)."
    ),
    sets: list[str] | None = typer.Option(
        None,
        "--set",
        help="Override a setting, or give a recipe family's option: --set reasoning_gym.size=100",
    ),
    as_json: bool = JSON_OPTION,
) -> None:
    """Show a recipe: its model, tools, reward, settings, and its data (rows, fields, and the
    values that --where can select)."""
    from agentfly_cli.api.recipes import field_choices, load_recipe, recipe_entry, recipe_tasks

    host = host_with_warnings()
    entry = recipe_entry(name, host)
    family = entry.obj.family
    config = load_recipe(name, sets or ())
    path = config.data.path
    rows = recipe_tasks(config)
    fields = list(dict.fromkeys(k for row in rows for k in row))
    info = {
        "name": name,
        "description": entry.obj.description,
        "path": entry.obj.path,
        "options": dict(family.options) if family is not None else {},
        **provenance_fields(entry),
        "data": {
            "path": config.data.path,
            "rows": len(rows),
            "fields": fields,
            "choices": field_choices(rows),
        },
        "config": config.model_dump(mode="json", exclude_none=True),
    }
    if as_json:
        print_json(info)
        return
    console = stdout_console()
    rollout, trainer = config.rollout, config.trainer
    rewards = ", ".join(r.name for r in config.reward) if config.reward else "-"
    algorithm = f"{trainer.algorithm.advantage} / {trainer.algorithm.policy_loss}"
    facts = [
        ("recipe", f"{name}  ({info['plugin']})"),
        ("file", entry.obj.path or f"built by the plugin ({family.spelled(entry.name)})"),
        ("about", entry.obj.description),
        ("model", f"{config.model}  (backend {config.backend.name})"),
        ("tools", ", ".join(config.tools) or "-"),
        ("reward", rewards),
        ("parser", config.chat.parser or "from the template"),
        (
            "rollout",
            f"n {rollout.n}, max_turns {rollout.max_turns}, "
            f"max_total_tokens {rollout.max_total_tokens}",
        ),
        ("trainer", f"{trainer.steps} steps x {trainer.tasks_per_step} tasks, {algorithm}"),
        ("data", path or "none"),
    ]
    if path:  # on rows of their own: a long path must not wrap the count
        facts += [("rows", str(len(rows))), ("fields", ", ".join(fields))]
    if family is not None and family.options:
        facts += [(f"--set {entry.name}.{key}=", about) for key, about in family.options.items()]
    console.print(table(name, ("setting", "value"), facts))
    choices = info["data"]["choices"]
    if choices:
        lines = [
            (f"--where {field}=...", ", ".join(f"{v} ({n})" for v, n in counts.items()))
            for field, counts in choices.items()
        ]
        console.print(table("select tasks", ("flag", "values (rows)"), lines))
    run = f"agentfly rollout {name} --limit 4  |  agentfly train {name}"
    console.print(f"run it: {run}")
