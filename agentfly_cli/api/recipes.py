"""Recipes (packaged run configs) and their data: what ``agentfly recipes show`` reports."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from agentfly_cli.settings.run import RunSettings


def load_recipe(name: str) -> RunSettings:
    """Recipe ``name`` (or a YAML file) as a validated run config; errors are UserErrors."""
    from agentfly_cli.recipes.loader import load_config

    return load_config(name)


def recipe_tasks(config: RunSettings) -> list[dict[str, Any]]:
    """The task rows ``config``'s data selects (``data.limit``, ``data.where``); [] with none."""
    from agentfly_cli.rollout.tasks import RowRules, load_tasks

    path = config.data.path
    if not path:
        return []
    return load_tasks(path, config.data.limit, config.data.where, rules=RowRules.of(config))


def field_choices(rows: Sequence[Any]) -> dict[str, dict[str, int]]:
    """The fields that ``--where`` can select on usefully, with the count of each value."""
    from agentfly_cli.rollout.tasks import field_choices as choices

    return choices(rows)
