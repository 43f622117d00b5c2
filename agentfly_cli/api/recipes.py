"""Recipes (packaged run settings, or a family's NAME:PARAM) and their data: what ``agentfly
recipes show`` reports."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from agentfly_cli.plugin_host.registry import Entry
    from agentfly_cli.settings.run import RunSettings


def recipe_entry(spec: str, host: Any = None) -> Entry:
    """The registered recipe that ``spec`` names (``NAME`` or a family's ``NAME:PARAM``)."""
    from agentfly_cli.recipes.families import find_recipe
    from agentfly_cli.recipes.loader import host_or_installed

    return find_recipe(spec, host_or_installed(host))[0]


def recipe_label(entry: Entry) -> str:
    """How listings name a recipe: its name, or ``NAME:PARAM`` for a family."""
    family = entry.obj.family
    return family.spelled(entry.name) if family is not None else entry.name


def load_recipe(name: str, overrides: Sequence[str] = ()) -> RunSettings:
    """Recipe ``name`` (or a YAML file), then ``--set`` ``overrides``, as validated settings;
    errors are UserErrors."""
    from agentfly_cli.recipes.loader import load_config

    return load_config(name, list(overrides))


def recipe_tasks(config: RunSettings) -> list[dict[str, Any]]:
    """The task rows ``config``'s data selects (``data.limit``, ``data.where``); [] with none."""
    from agentfly_cli.rollout.tasks import load_tasks

    path = config.data.path
    return load_tasks(path, config.data.limit, config.data.where) if path else []


def field_choices(rows: Sequence[Any]) -> dict[str, dict[str, int]]:
    """The fields that ``--where`` can select on usefully, with the count of each value."""
    from agentfly_cli.rollout.tasks import field_choices as choices

    return choices(rows)
