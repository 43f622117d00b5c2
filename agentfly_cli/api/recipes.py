"""Recipes (packaged run settings, or a family's NAME:PARAM) and their data: what ``agentfly
recipes show`` reports, and ``agentfly recipes check`` (:func:`check_recipe`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from agentfly_cli.plugin_host.registry import Entry
    from agentfly_cli.rollout.self_check import CheckReport
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
    from agentfly_cli.rollout.tasks import RowRules, load_tasks

    path = config.data.path
    if not path:
        return []
    return load_tasks(path, config.data.limit, config.data.where, rules=RowRules.of(config))


def field_choices(rows: Sequence[Any]) -> dict[str, dict[str, int]]:
    """The fields that ``--where`` can select on usefully, with the count of each value."""
    from agentfly_cli.rollout.tasks import field_choices as choices

    return choices(rows)


def check_recipe(
    name: str,
    *,
    model: str | None = None,
    split: str = "all",
    limit: int | None = None,
    gold: str | Sequence[str] | None = None,
    junk: Sequence[str] | None = None,
    min_gold: float | None = None,
    margin: float | None = None,
    out: str | None = None,
    keep_limits: bool = False,
    overrides: Sequence[str] | None = None,
) -> CheckReport:
    """``agentfly recipes check NAME``: play each task's gold answer and junk answers through
    recipe ``name``'s engine and reward with the scripted backend, and flag the tasks whose
    reward cannot tell them apart (:mod:`agentfly_cli.rollout.self_check`). ``gold``: one
    template or ``module:fn``, or a list of templates (one per turn), in place of the recipe's
    ``check.gold``; ``junk``: templates added to its junk; ``split``: train, heldout or all;
    ``model``: the tokenizer and template to render with (default: the recipe's);
    ``keep_limits``: play under the recipe's token limits (lifted by default: the check tests
    the reward, not the token budget); ``overrides``: ``--set`` items."""
    from agentfly_cli.recipes.loader import load_config
    from agentfly_cli.rollout.self_check import DEFAULT_MARGIN, check_settings

    fields = {"model": model, "data.split": split, "data.limit": limit}
    config = load_config(name, list(overrides or []), **fields)
    if isinstance(gold, (list, tuple)):
        gold = gold[0] if len(gold) == 1 else list(gold)
    return check_settings(
        config, gold=gold or None, junk=list(junk or []), min_gold=min_gold,
        margin=DEFAULT_MARGIN if margin is None else margin, out=out, keep_limits=keep_limits,
    )  # fmt: skip
