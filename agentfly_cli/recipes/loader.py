"""Loading a run's settings: a recipe name or YAML file, then flags, then ``--set a.b=c``.

The result is a :class:`~agentfly_cli.settings.run.RunSettings` (the models live in
:mod:`agentfly_cli.settings`). Every field is checked; a bad one is a single line naming the
field and the fix.
"""

from __future__ import annotations

import copy
import difflib
import os
import re
import typing
from collections.abc import Mapping
from pathlib import Path
from typing import Any, TypeVar

import yaml
from pydantic import (
    BaseModel,
    ValidationError,
)

from agentfly_cli.errors import UserError
from agentfly_cli.recipes.families import check_options, find_recipe
from agentfly_cli.settings.run import RunSettings

S = TypeVar("S", bound=BaseModel)
MCP_ENTRY = re.compile(r"\s*mcp(\[[^\]]*\])?:")  # an MCP server's command line, not a file


def format_settings_error(
    error: ValidationError, source: str, root: type[BaseModel] | None = None
) -> str:
    """One line for a settings error: where, what, and for an unknown key the allowed ones."""
    first = error.errors()[0]
    where = ".".join(str(p) for p in first["loc"]) or "(top level)"
    extra = f" (and {error.error_count() - 1} more)" if error.error_count() > 1 else ""
    message = first["msg"]
    if first["type"] == "value_error":
        message = message.removeprefix("Value error, ")
        if not first["loc"]:  # a check across sections names its settings itself
            return f"{source}: {message}{extra}"
    if first["type"] == "extra_forbidden":
        allowed = _allowed_keys(first["loc"][:-1], root or RunSettings)
        close = difflib.get_close_matches(str(first["loc"][-1]), allowed, n=1)
        hint = f"did you mean '{close[0]}'? " if close else ""
        listing = f"allowed: {', '.join(allowed)}" if allowed else "check the spelling"
        message = f"unknown key; {hint}{listing}"
    return f"{source}: {where}: {message}{extra}"


def _allowed_keys(path: tuple, root: type[BaseModel]) -> list[str]:
    """The field names of the section at ``path`` (a pydantic error location) of ``root``."""
    model: Any = root
    keyed = False  # the previous part was a dict of models: this part is one of its keys
    for part in path:
        if isinstance(part, int) or keyed:
            keyed = False
            continue  # an item of a list or a dict: same model as the container's
        field = getattr(model, "model_fields", {}).get(part)
        if field is None:
            return []
        annotation = field.annotation
        keyed = typing.get_origin(annotation) is dict
        candidates = [annotation, *typing.get_args(annotation)]
        models = [c for c in candidates if isinstance(c, type) and issubclass(c, BaseModel)]
        model = models[0] if models else None
        if model is None:
            return []
    return list(model.model_fields)


def parse_value(text: str) -> Any:
    """A ``--set`` value, read as YAML: ``4``, ``0.5``, ``true``, ``[a, b]``, ``null``."""
    try:
        return yaml.safe_load(text) if text.strip() else ""
    except yaml.YAMLError:
        return text


def apply_overrides(data: dict[str, Any], overrides: list[str]) -> dict[str, Any]:
    """Apply ``a.b=c`` overrides (``--set`` strings, values read as YAML) to a nested dict, in
    order."""
    for item in overrides:
        key, sep, raw = item.partition("=")
        if not sep or not key.strip():
            raise UserError(f"--set {item!r}: expected KEY=VALUE, e.g. --set rollout.n=8")
        _set_at(data, key.strip(), parse_value(raw), f"--set {item!r}")
    return data


def apply_values(data: dict[str, Any], values: Mapping[str, Any]) -> dict[str, Any]:
    """Set already-typed values at dotted keys (flags: ``{"trainer.steps": 2}``), in order; a
    None value is a flag not given and changes nothing."""
    for dotted, value in values.items():
        if value is not None:
            _set_at(data, dotted, value, dotted)
    return data


SHORTHANDS = {"agent": "entry"}  # a top-level section a recipe may give as its one string


def _set_at(data: dict[str, Any], dotted: str, value: Any, label: str) -> None:
    parts = dotted.split(".")
    node = data
    for depth, part in enumerate(parts[:-1]):
        child = node.get(part)
        if child is None:
            child = node[part] = {}
        if isinstance(child, str) and depth == 0 and part in SHORTHANDS:
            child = node[part] = {SHORTHANDS[part]: child}  # agent: f.py:fn -> {entry: ...}
        if not isinstance(child, dict):
            raise UserError(f"{label}: '{part}' is not a section")
        node = child
    node[parts[-1]] = value


def validate_settings(model: type[S], data: Mapping[str, Any], source: str) -> S:
    """``data`` checked as ``model`` (a settings model); a bad field is one UserError line
    naming ``source``, the field and the fix."""
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise UserError(format_settings_error(exc, source, model)) from None


def resolve_recipe_path(spec: str, host: Any = None) -> Path:
    """A YAML path, or the name of a recipe file registered with ``host`` (a
    :class:`~agentfly_cli.plugin_host.plugins.PluginHost`; default: the installed plugins).
    A recipe family (``NAME:PARAM``) has no file: :func:`load_config` builds it."""
    path = _settings_file(spec)
    if path is not None:
        return path
    entry, _ = find_recipe(spec, host_or_installed(host))
    if entry.obj.family is not None:
        raise UserError(
            f"recipe '{spec}' is built by its plugin, not read from a file; load it with "
            "load_config or `agentfly recipes show`"
        )
    return Path(entry.obj.path)


def _settings_file(spec: str) -> Path | None:
    """``spec`` as a settings file, or None when it is a recipe name."""
    path = Path(spec).expanduser()
    if path.is_file():
        return path
    if path.suffix in (".yaml", ".yml") or os.sep in spec:
        raise UserError(f"settings file {spec!r} not found")
    return None


def host_or_installed(host: Any) -> Any:
    """``host``, or the installed plugins' host."""
    if host is None:
        from agentfly_cli.plugin_host.plugins import get_plugin_host

        return get_plugin_host()
    return host


def recipe_settings(
    spec: str, overrides: list[str], fields: dict[str, Any], host: Any = None
) -> tuple[dict[str, Any], str, Path | None]:
    """The settings of a YAML file, a recipe, or a family's recipe (built now, its options
    taken out of ``overrides`` and ``fields``), their source for error lines, and the folder
    their relative paths are relative to."""
    path = _settings_file(spec)
    if path is None:
        entry, param = find_recipe(spec, host_or_installed(host))
        family = entry.obj.family
        if family is not None:
            options = _family_options(entry.name, overrides, fields)
            check_options(entry.name, family, options)
            data = family.build(param, options)
            if not isinstance(data, dict):
                raise TypeError(f"recipe family '{entry.name}': build must return a dict")
            return copy.deepcopy(data), f"recipe {spec}", None
        path = Path(entry.obj.path)
    return load_yaml(path), str(path), path.parent


def _family_options(name: str, overrides: list[str], fields: dict[str, Any]) -> dict[str, Any]:
    """A family's options: ``--set NAME.KEY=VALUE`` items, removed from ``overrides``, and
    ``NAME.KEY`` fields (the Python API's ``NAME={...}``), removed from ``fields``."""
    options: dict[str, Any] = {}
    prefix, rest = f"{name}.", []
    given = fields.pop(name, None)
    if isinstance(given, Mapping):
        options.update(given)
    elif given is not None:
        raise UserError(f"{name}: expected a mapping of the recipe's options, got {given!r}")
    for key in [k for k in fields if k.startswith(prefix)]:
        _set_at(options, key[len(prefix) :], fields.pop(key), key)
    for item in overrides:
        key, sep, raw = item.partition("=")
        if sep and key.strip().startswith(prefix):
            _set_at(options, key.strip()[len(prefix) :], parse_value(raw), f"--set {item!r}")
        else:
            rest.append(item)
    overrides[:] = rest
    return options


def load_yaml(path: Path) -> dict[str, Any]:
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise UserError(f"{path}: not valid YAML{where}: {problem}") from None
    if not isinstance(data, dict):
        raise UserError(f"{path}: expected a mapping of settings at the top level")
    return data


def load_config(
    spec: str | None = None,
    overrides: list[str] | None = None,
    *,
    host: Any = None,
    **fields: Any,
) -> RunSettings:
    """Build the settings from a recipe name or YAML file, then ``fields``, then ``--set``.

    A recipe name is looked up in ``host`` (a :class:`~agentfly_cli.plugin_host.plugins.PluginHost`;
    default: the installed plugins); ``NAME:PARAM`` names a recipe family's recipe, built now
    (its options: ``--set NAME.KEY=VALUE``, see :mod:`agentfly_cli.recipes.families`).
    Relative paths in a YAML file (data, script, template, ``file.py:attr`` tools, rewards,
    agents and parsers) are relative to that file; those of flags and ``--set`` to the current
    folder.
    """
    data: dict[str, Any] = {}
    source = "settings"
    overrides = list(overrides or [])
    if spec:
        data, source, base = recipe_settings(spec, overrides, fields, host)
        if base is not None:
            _anchor_paths(data, base)
    recipe_section = dict(data.get("data") or {})
    recipe_eval_holdout = _eval_holdout(data)
    apply_values(data, fields)
    apply_overrides(data, overrides)
    _holdout_stays_with_its_file(data, recipe_section)
    _later_holdout_wins(data, recipe_section, recipe_eval_holdout)
    return validate_settings(RunSettings, data, source)


def _holdout_stays_with_its_file(data: dict[str, Any], recipe_data: dict[str, Any]) -> None:
    """A recipe's ``data.holdout`` is drawn over the recipe's data file: other data (``--data``,
    ``--set data.path=``) is used whole unless the holdout is set again with it."""
    section = data.get("data")
    if not isinstance(section, dict) or section.get("path") == recipe_data.get("path"):
        return
    for key in ("holdout", "holdout_seed"):
        if key in recipe_data and section.get(key) == recipe_data[key]:
            del section[key]


def _eval_holdout(data: Mapping[str, Any]) -> Any:
    """``trainer.eval.holdout`` in ``data`` (None when unset)."""
    trainer = data.get("trainer")
    held_out = trainer.get("eval") if isinstance(trainer, Mapping) else None
    return held_out.get("holdout") if isinstance(held_out, Mapping) else None


def _later_holdout_wins(
    data: dict[str, Any], recipe_data: dict[str, Any], recipe_eval_holdout: Any
) -> None:
    """``trainer.eval.holdout`` is an alias of ``data.holdout``: when flags or ``--set`` give
    one of the two and leave the recipe's value of the other, theirs replaces the recipe's (so
    ``--set trainer.eval.holdout=0.25`` on a recipe with ``data.holdout: 0.1`` holds out 0.25).
    Two different values given in the same place are left to the settings' one-line error."""
    section = data.get("data")
    eval_holdout = _eval_holdout(data)
    if not isinstance(section, dict) or eval_holdout is None:
        return
    eval_given = eval_holdout != recipe_eval_holdout
    data_given = section.get("holdout") != recipe_data.get("holdout")
    if eval_given and not data_given:
        section.pop("holdout", None)
    elif data_given and not eval_given:
        del data["trainer"]["eval"]["holdout"]


def _anchor_paths(data: dict[str, Any], base: Path) -> None:
    """Make a YAML file's relative paths relative to its folder ``base`` (one rule for every
    path a recipe names: data files, the scripted backend's script, a ``.jinja`` template, and
    the files of ``file.py:attr`` tools, rewards, agents and parsers). A missing file is then
    reported with the path that was tried."""

    def anchor(value: Any) -> Any:
        if isinstance(value, str) and value and not os.path.isabs(os.path.expanduser(value)):
            return str(base / value)
        return value

    def anchor_spec(value: Any) -> Any:  # file.py:attr; names, module:attr and mcp: stay
        if isinstance(value, str) and ".py:" in value and not MCP_ENTRY.match(value):
            file, _, attribute = value.rpartition(":")
            return f"{anchor(file)}:{attribute}"
        return value

    if isinstance(data.get("data"), dict) and "path" in data["data"]:
        data["data"]["path"] = anchor(data["data"]["path"])
    trainer = data.get("trainer")
    evaluation = trainer.get("eval") if isinstance(trainer, dict) else None
    if isinstance(evaluation, dict) and evaluation.get("path"):
        evaluation["path"] = anchor(evaluation["path"])
    backend = data.get("backend")
    if isinstance(backend, dict) and "script" in backend:
        backend["script"] = anchor(backend["script"])
    agent = data.get("agent")  # file.py:fn, or {entry: file.py:fn, ...}
    if isinstance(agent, dict) and "entry" in agent:
        agent["entry"] = anchor_spec(agent["entry"])
    elif isinstance(agent, str):
        data["agent"] = anchor_spec(agent)
    _anchor_entries(data, "tools", anchor_spec)
    _anchor_entries(data, "reward", anchor_spec)
    chat = data.get("chat")
    if isinstance(chat, dict) and isinstance(chat.get("template"), str):
        if chat["template"].endswith(".jinja"):
            chat["template"] = anchor(chat["template"])
    if isinstance(chat, dict) and "parser" in chat:
        chat["parser"] = anchor_spec(chat["parser"])


def _anchor_entries(data: dict[str, Any], key: str, anchor_spec: Any) -> None:
    """``tools:`` / ``reward:`` as a string (comma-separated tools), a list of names, or a list
    of ``{name: ...}`` entries: each ``file.py:attr`` made relative to the YAML's folder."""
    value = data.get(key)
    if isinstance(value, str):
        parts = value.split(",") if key == "tools" else [value]
        data[key] = ",".join(anchor_spec(part.strip()) for part in parts)
    elif isinstance(value, list):
        for i, entry in enumerate(value):
            if isinstance(entry, dict) and "name" in entry:
                entry["name"] = anchor_spec(entry["name"])
            else:
                value[i] = anchor_spec(entry)
