"""Recipe families: ``NAME:PARAM`` names a recipe that a plugin builds on demand.

A plugin registers ``register("reasoning_gym", RecipeFamily(build=...), description)``; then
``reasoning_gym:chain_sum`` resolves to that family, ``--set reasoning_gym.KEY=VALUE`` gives
its options, and ``build(param, options)`` returns the settings (a dict, as a YAML recipe holds
them) after writing the recipe's tasks. The tasks go to ``$AGENTFLY_CACHE/tasks/<family>/``
(:func:`tasks_file`), written all or nothing and reused when present (:func:`write_tasks`),
so the usual data path, ``data.holdout``, ``--limit``, ``--where`` and ``trainer.curriculum``
apply to them unchanged.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from agentfly_cli.errors import UserError
from agentfly_cli.files.output_paths import write_all, write_whole
from agentfly_cli.files.surrogates import json_line
from agentfly_cli.plugin_host.registry import Entry, RecipeFamily
from agentfly_cli.settings.variables import cache_dir

SLUG = re.compile(r"[^A-Za-z0-9_.+=-]+")


def split_spec(spec: str) -> tuple[str, str | None]:
    """``reasoning_gym:chain_sum`` -> ``("reasoning_gym", "chain_sum")``; ``calculator`` ->
    ``("calculator", None)``."""
    name, sep, param = spec.partition(":")
    return (name, param) if sep else (spec, None)


def find_recipe(spec: str, host: Any) -> tuple[Entry, str | None]:
    """The registered recipe ``spec`` names and its parameter (None without one): one
    ``UserError`` line for an unknown name, a parameter a plain recipe does not take, or a
    family called without the parameter it needs."""
    registry = host.components.recipes
    name, param = split_spec(spec)
    entry = registry.entry(name)
    family = entry.obj.family
    if family is None and param is not None:
        raise UserError(
            f"recipe '{name}' takes no parameter (got '{spec}'); run it as `{name}`, or see "
            "`agentfly recipes list` for the recipes written NAME:PARAM"
        )
    if family is not None:
        if family.param and not param:
            example = f", e.g. {name}:{family.example}" if family.example else ""
            raise UserError(
                f"recipe '{name}' needs a parameter: {family.spelled(name)}{example} (see "
                "`agentfly recipes list`)"
            )
        if not family.param and param is not None:
            raise UserError(f"recipe '{name}' takes no parameter; run it as `{name}`")
    return entry, param


def check_options(name: str, family: RecipeFamily, options: Mapping[str, Any]) -> None:
    """One ``UserError`` line for an option the family does not take."""
    unknown = sorted(set(options) - set(family.options))
    if unknown:
        allowed = ", ".join(family.options) or "none"
        raise UserError(f"--set {name}.{unknown[0]}: unknown option of {name}; options: {allowed}")


def whole_option(family: str, options: Mapping[str, Any], key: str, default: int, low: int) -> int:
    """The whole-number option ``--set FAMILY.KEY=N`` (``default`` when unset), at least ``low``;
    anything else is one ``UserError`` line."""
    value = options.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise UserError(f"--set {family}.{key}={value!r}: give a whole number >= {low}")
    return value


def tasks_file(family: str, label: str, key: Mapping[str, Any]) -> Path:
    """Where a family keeps the tasks of one recipe: ``$AGENTFLY_CACHE/tasks/<family>/
    <label>-<hash of key>.jsonl``; ``key`` holds everything the rows depend on (the parameter,
    the options, the library's version), so another key never reuses another's tasks."""
    digest = hashlib.sha256(json.dumps(key, sort_keys=True, default=str).encode()).hexdigest()
    slug = SLUG.sub("_", label)[:80] or "tasks"
    return cache_dir() / "tasks" / family / f"{slug}-{digest[:12]}.jsonl"


def write_tasks(path: Path, rows: Callable[[], Iterable[Mapping[str, Any]]]) -> Path:
    """Write ``rows()`` to ``path`` as JSONL, all or nothing, unless the file is there already
    (then ``rows`` is not called): built once, the same tasks every run."""
    if path.is_file():
        return path
    path.parent.mkdir(parents=True, exist_ok=True)

    def write(out: Any) -> None:
        for row in rows():
            write_all(out.fileno(), (json_line(dict(row)) + "\n").encode("utf-8"))

    write_whole(path, write)
    return path
