"""The options that ``rollout``, ``eval`` and ``train`` share, declared once.

``@with_run_options(...)`` puts the named options into a command's signature (Typer builds the
command line from it) and hands their values to the command as one ``RunFlags`` mapping, which
``build_config`` turns into the run config.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import typer

# name: (type, Typer parameter); the order is the order of ``--help``
RUN_OPTIONS: dict[str, tuple[Any, Any]] = {
    "spec": (
        str | None,
        typer.Argument(
            None,
            help="A recipe name, NAME:PARAM of a recipe family (see `agentfly recipes list`), "
            "or a YAML settings file.",
        ),
    ),
    "model": (
        str | None,
        typer.Option(None, "--model", help="Model folder, or an alias: tiny, smollm2."),
    ),
    "backend": (
        str | None,
        typer.Option(None, "--backend", help="hf, vllm, openai, scripted, or a plugin's."),
    ),
    "script": (
        Path | None,
        typer.Option(None, "--script", help="scripted backend: JSONL of responses per task."),
    ),
    "data": (
        Path | None,
        typer.Option(None, "--data", help="Tasks: JSONL, JSON, Parquet or a datasets folder."),
    ),
    "tools": (
        str | None,
        typer.Option(None, "--tools", help="Comma-separated tool names (or module:attr)."),
    ),
    "reward": (str | None, typer.Option(None, "--reward", help="Reward name (or module:attr).")),
    "agent": (
        str | None,
        typer.Option(
            None, "--agent", help="An agent program, file.py:fn, run through the gateway."
        ),
    ),
    "n": (int | None, typer.Option(None, "--n", help="Chains per task.", min=1)),
    "max_turns": (
        int | None,
        typer.Option(None, "--max-turns", help="Assistant turns per chain.", min=1),
    ),
    "limit": (int | None, typer.Option(None, "--limit", help="Use only the first N tasks.", min=1)),
    "shuffle": (
        bool,
        typer.Option(
            False,
            "--shuffle",
            help="Shuffle the tasks before --limit, seeded by data.shuffle_seed (default 0).",
        ),
    ),
    "where": (
        list[str] | None,
        typer.Option(
            None,
            "--where",
            help="Keep only tasks whose field matches: --where kind=shopping,change",
        ),
    ),
    "template": (
        str | None,
        typer.Option(None, "--template", help="Chat template: a packaged name or .jinja file."),
    ),
    "parser": (
        str | None,
        typer.Option(
            None,
            "--parser",
            help="Tool-call format: hermes, line, react, ... (`agentfly parsers list`).",
        ),
    ),
    "base_url": (
        str | None,
        typer.Option(None, "--base-url", help="openai backend: server URL (…/v1)."),
    ),
    "out": (
        Path | None,
        typer.Option(
            None,
            "--out",
            help="Trajectory JSONL file (default: runs/<recipe>-<command>-<time>.jsonl).",
        ),
    ),
    "sets": (
        list[str] | None,
        typer.Option(None, "--set", help="Override any setting: --set rollout.top_p=0.9"),
    ),
}

RunFlags = dict[str, Any]


def with_run_options(*names: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Add the shared options ``names`` (all of them when none are named) to a command.

    The command takes ``flags`` (a ``RunFlags``: the values of those options) followed by its
    own options, keyword-only.
    """
    chosen = names or tuple(RUN_OPTIONS)
    unknown = [name for name in chosen if name not in RUN_OPTIONS]
    if unknown:
        raise ValueError(f"no shared run option {unknown[0]!r}; known: {', '.join(RUN_OPTIONS)}")

    def decorate(command: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(command)
        def run(**values: Any) -> Any:
            flags = {name: values.pop(name) for name in chosen}
            return command(flags, **values)

        kind = inspect.Parameter.KEYWORD_ONLY
        shared = []
        for name in chosen:
            annotation, default = RUN_OPTIONS[name]
            shared.append(inspect.Parameter(name, kind, default=default, annotation=annotation))
        own = list(inspect.signature(command, eval_str=True).parameters.values())[1:]
        parameters = [*shared, *(p.replace(kind=kind) for p in own)]
        run.__signature__ = inspect.Signature(parameters)  # type: ignore[attr-defined]
        run.__annotations__ = {p.name: p.annotation for p in parameters}
        del run.__wrapped__  # Typer must read the new signature, not the command's
        return run

    return decorate


def build_config(flags: RunFlags, typed: Mapping[str, Any] | None = None):
    """The run config from a recipe/YAML (``flags['spec']``) plus the flags that were given.

    Every flag is a typed value at a dotted key (``typed`` adds a command's own, e.g.
    ``{"trainer.steps": 2}``; None values are flags not given), applied before ``--set``
    (a ``--set`` of the same key wins) and checked with the rest of the config."""
    from agentfly_cli.api.settings import check_agent_extra, load_settings

    def text(name: str) -> str | None:
        value = flags.get(name)
        return None if value is None else str(value)

    fields = {
        "model": flags.get("model"),
        "backend.name": flags.get("backend"),
        "backend.script": text("script"),
        "backend.base_url": flags.get("base_url"),
        "data.path": text("data"),
        "data.limit": flags.get("limit"),
        "data.shuffle": True if flags.get("shuffle") else None,
        # each --where field is added to the recipe's own data.where (or replaces that field)
        **{f"data.where.{k}": v for k, v in (parse_where(flags.get("where")) or {}).items()},
        "tools": flags.get("tools"),
        "reward": flags.get("reward"),
        "agent.entry": flags.get("agent"),
        "rollout.n": flags.get("n"),
        "rollout.max_turns": flags.get("max_turns"),
        "chat.template": flags.get("template"),
        "chat.parser": flags.get("parser"),
        # a new format starts without the recipe's options for the old one (--set can add some)
        "chat.parser_options": {} if flags.get("parser") else None,
        "out": text("out"),
        **(typed or {}),
    }
    config = load_settings(flags.get("spec"), overrides=list(flags.get("sets") or []), **fields)
    if config.agent is not None:  # its gateway needs the serve extra: say so before any load
        check_agent_extra(config)
    return config


def parse_where(items: list[str] | None) -> dict[str, Any] | None:
    """``--where FIELD=VALUE[,VALUE...]`` flags as ``data.where``; None when none were given."""
    from agentfly_cli.api.errors import UserError

    if not items:
        return None
    where: dict[str, Any] = {}
    for item in items:
        field, sep, values = item.partition("=")
        if not sep or not field.strip() or not values.strip():
            raise UserError(f"--where {item!r}: expected FIELD=VALUE, e.g. --where kind=shopping")
        choices = [v.strip() for v in values.split(",") if v.strip()]
        where[field.strip()] = choices[0] if len(choices) == 1 else choices
    return where
