"""Run settings for the API: a recipe or YAML file, then fields, then ``--set`` strings."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from agentfly_cli.settings.run import RunSettings


def load_settings(
    recipe_or_file: str | Path | None = None,
    *,
    overrides: Sequence[str] = (),
    host: Any = None,
    **fields: Any,
) -> RunSettings:
    """The :class:`RunSettings` of a recipe name or YAML file, then ``fields``, then
    ``overrides``.

    ``fields`` are top-level keys with a value or a dict of sub-keys, merged into the recipe
    (``rollout={"n": 2}`` changes ``rollout.n`` only); ``overrides`` are ``--set`` strings
    (``"trainer.steps=2"``). ``host``: where recipe names are looked up (default: the
    installed plugins). Errors are one-line :class:`~agentfly_cli.errors.UserError` s.
    """
    from agentfly_cli.recipes.loader import load_config as load

    spec = str(recipe_or_file) if recipe_or_file is not None else None
    return load(spec, list(overrides), host=host, **_dotted(fields))


def load_config(
    recipe: str | Path | None = None, *, sets: Sequence[str] = (), **fields: Any
) -> RunSettings:
    """:func:`load_settings` under its first name (``sets`` are its ``overrides``)."""
    return load_settings(recipe, overrides=sets, **fields)


def check_agent_extra(settings: RunSettings) -> None:
    """A run with an ``agent`` program needs the ``serve`` extra (its gateway): without it, one
    line naming the install, before anything loads."""
    from agentfly_cli.rollout.from_settings import check_agent_extra as check

    check(settings)


def settings_of(settings_or_recipe: RunSettings | str | Path) -> RunSettings:
    """``settings_or_recipe`` as settings: a recipe name or YAML file is loaded."""
    if isinstance(settings_or_recipe, (str, Path)):
        return load_settings(settings_or_recipe)
    return settings_or_recipe


def for_eval(settings: RunSettings) -> RunSettings:
    """``settings`` reading the recipe's held-out tasks (unless it chose ``data.split``)."""
    if settings.data.holdout and "split" not in settings.data.model_fields_set:
        data = settings.data.model_copy(update={"split": "heldout"})
        settings = settings.model_copy(update={"data": data})
    return settings


def with_output_file(settings: RunSettings, command: str) -> RunSettings:
    """``settings`` with ``out`` set: its own, else a fresh ``runs/<recipe>-<command>-<time>
    .jsonl``; checked before anything loads, so that a run's chains are never thrown away."""
    from agentfly_cli.files.run_folders import trajectory_file

    return settings.model_copy(update={"out": str(trajectory_file(settings, command))})


def _dotted(fields: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    flat: dict[str, Any] = {}
    for key, value in fields.items():
        if isinstance(value, Mapping) and value:
            flat.update(_dotted(value, f"{prefix}{key}."))
        else:
            flat[f"{prefix}{key}"] = str(value) if isinstance(value, Path) else value
    return flat
