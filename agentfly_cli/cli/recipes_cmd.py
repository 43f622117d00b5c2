"""``agentfly recipes``: list the registered recipes; show one with its data; check that their
rewards tell gold answers from junk."""

from __future__ import annotations

import typer

from agentfly_cli.cli.common import conflict_of, host_with_warnings, provenance_fields
from agentfly_cli.cli.fitted_table import print_facts
from agentfly_cli.cli.output import (
    EXIT_FAILURE,
    JSON_OPTION,
    handle_errors,
    print_json,
    stdout_console,
    table,
)

app = typer.Typer(
    help="List recipes (YAML training and rollout configurations), show one, check its reward.",
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
    print_facts(console, name, facts)
    choices = info["data"]["choices"]
    if choices:
        lines = [
            (f"--where {field}=...", ", ".join(f"{v} ({n})" for v, n in counts.items()))
            for field, counts in choices.items()
        ]
        console.print(table("select tasks", ("flag", "values (rows)"), lines))
    run = f"agentfly rollout {name} --limit 4  |  agentfly train {name}"
    console.print(f"run it: {run}")


@app.command("check")
@handle_errors
def check_recipes(
    names: list[str] = typer.Argument(..., help="Recipe names or YAML files (one or more)."),
    model: str = typer.Option(
        None,
        "--model",
        help="The tokenizer and template to render with (default: the "
        "recipe's; tiny is quick: the scripted backend samples nothing).",
    ),
    split: str = typer.Option("all", "--split", help="The tasks to check: train, heldout, all."),
    limit: int = typer.Option(None, "--limit", min=1, help="Check only the first N tasks."),
    gold: list[str] = typer.Option(
        None,
        "--gold",
        help="The gold answer, in place of the recipe's check.gold: a response "
        "template of the row's fields ('ANSWER: {answer}') or module:fn; repeat it for one "
        "template per turn.",
    ),
    junk: list[str] = typer.Option(
        None, "--junk", help="An extra junk answer (a template; repeatable)."
    ),
    min_gold: float = typer.Option(
        None,
        "--min-gold",
        help="The least a gold answer must score (default: the best gold "
        "score of the checked tasks).",
    ),
    margin: float = typer.Option(
        1e-9, "--margin", help="How much more than every junk answer the gold must score."
    ),
    out: str = typer.Option(None, "--out", help="Write every chain played to this JSONL file."),
    keep_limits: bool = typer.Option(
        False,
        "--keep-limits",
        help="Play under the recipe's token limits (by default they "
        "are lifted: the check tests the reward, not the token budget).",
    ),
    sets: list[str] = typer.Option(None, "--set", help="Override a setting: key=value."),
    as_json: bool = JSON_OPTION,
) -> None:
    """Play each task's gold answer and junk answers (empty, "I don't know", a blank and a
    wrong answer in the gold's format, another task's gold, the recipe's check.junk) through
    the recipe's own engine and reward with the scripted backend; flag every task whose gold
    does not score strictly above every junk answer, or under --min-gold. Exit code 0 when
    none is flagged, 1 when some are, 2 for bad input."""
    from agentfly_cli.api.errors import UserError
    from agentfly_cli.api.recipes import check_recipe
    from agentfly_cli.cli.check_report import print_check

    if split not in ("train", "heldout", "all"):
        raise UserError(f"--split {split}: give train, heldout or all")
    if out and len(names) > 1:
        raise UserError("--out writes the chains of one recipe: check one recipe at a time")
    host_with_warnings()
    reports = []
    for name in names:
        report = check_recipe(
            name, model=model, split=split, limit=limit, gold=gold or None, junk=junk,
            min_gold=min_gold, margin=margin, out=out, keep_limits=keep_limits, overrides=sets,
        )  # fmt: skip
        reports.append(report.to_dict())
    ok = all(report["ok"] for report in reports)
    if as_json:
        print_json({"ok": ok, "recipes": reports})
    else:
        print_check(reports)
    if not ok:
        raise typer.Exit(EXIT_FAILURE)
