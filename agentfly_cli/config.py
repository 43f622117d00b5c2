"""Run configuration: pydantic models, YAML recipes, and ``--set a.b=c`` overrides.

A config names the model and backend, the data, the tools and reward, how the chat is
rendered and parsed, and the rollout limits. Every field is checked; a bad one is a single
line naming the field and the fix.
"""

from __future__ import annotations

import difflib
import os
import typing
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from agentfly_cli.chat.templates import ObservationFormat
from agentfly_cli.envs.settings import EnvPoolConfig
from agentfly_cli.errors import UserError
from agentfly_cli.rollout.backends.base import BackendConfig
from agentfly_cli.rollout.settings import RolloutSettings
from agentfly_cli.train.settings import TrainerSettings


class DataConfig(BaseModel):
    """Where the tasks come from."""

    model_config = ConfigDict(extra="forbid")

    path: str | None = Field(None, description="JSONL, JSON, Parquet or a datasets folder")
    where: dict[str, Any] = Field(
        default_factory=dict,
        description="keep only rows whose field equals the value, or one of a list of values "
        "(e.g. where: {kind: [shopping, change]}); applied before limit",
    )
    limit: int | None = Field(None, ge=1, description="use only the first rows")
    holdout: float = Field(
        0.0,
        ge=0.0,
        lt=1.0,
        allow_inf_nan=False,
        description="fraction of the tasks that no phase trains on (RL, the warm start); "
        "`agentfly eval` and trainer.eval score them. Drawn from the whole file by "
        "holdout_seed, before where and limit, so a task never changes sides",
    )
    holdout_seed: int = Field(0, description="seeds the held-out draw (fixed per recipe)")
    split: Literal["train", "heldout", "all"] = Field(
        "train",
        description="which side of the holdout this run reads (eval: heldout by default)",
    )

    @model_validator(mode="after")
    def _split_needs_holdout(self) -> DataConfig:
        if self.split == "heldout" and not self.holdout:
            raise ValueError("split: heldout needs data.holdout > 0 (e.g. 0.1)")
        return self


class RewardComponent(BaseModel):
    """One reward of a weighted sum."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(description="a registered reward (agentfly rewards list) or module:attr")
    weight: float = Field(1.0, description="its weight in the sum")
    options: dict[str, Any] = Field(
        default_factory=dict, description="settings of a configurable reward (e.g. llm_judge)"
    )


class ChatConfig(BaseModel):
    """How conversations are rendered into tokens and how tool calls are read back."""

    model_config = ConfigDict(extra="forbid")

    template: str | None = Field(
        None, description="None: the tokenizer's own; a packaged name or a .jinja path"
    )
    chat_template_kwargs: dict[str, Any] = Field(
        default_factory=dict,
        description="extra variables of the template (e.g. enable_thinking: false for Qwen3)",
    )
    parser: str | None = Field(None, description="tool-call format; None: guessed from template")
    parser_options: dict[str, Any] = Field(
        default_factory=dict,
        description="settings of the parser (e.g. the line parser's commands: "
        "{CALC: {tool: calculator, argument: expression}})",
    )
    observation: ObservationFormat = Field(default_factory=ObservationFormat)
    system_prompt: str | None = Field(None, description="the system message; None: none")
    examples: list[dict[str, Any]] = Field(
        default_factory=list, description="worked examples: chat messages placed before the task"
    )


class RunConfig(BaseModel):
    """Everything one rollout (and, later, training) needs."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field("custom", description="the recipe's name (run folders are named after it)")
    description: str = Field("", description="one line on what the recipe trains")
    model: str | None = Field(None, description="model folder or alias (tiny, smollm2)")
    backend: BackendConfig = Field(default_factory=BackendConfig)
    data: DataConfig = Field(default_factory=DataConfig)
    tools: list[str] = Field(
        default_factory=list,
        description="registered tool names (agentfly tools list) or module:attr; a "
        "comma-separated string also works",
    )
    reward: list[RewardComponent] = Field(
        default_factory=list,
        description="a weighted sum of rewards; a name or a list of names also works",
    )
    chat: ChatConfig = Field(default_factory=ChatConfig)
    rollout: RolloutSettings = Field(default_factory=RolloutSettings)
    trainer: TrainerSettings = Field(default_factory=TrainerSettings)
    envs: dict[str, EnvPoolConfig] = Field(
        default_factory=dict, description="per env name: provider, pool server, pool limits"
    )
    out: str | None = Field(None, description="trajectory JSONL to write")

    @field_validator("reward", mode="before")
    @classmethod
    def _reward_shorthand(cls, value: Any) -> Any:
        """``reward: exact_match`` or ``reward: [a, {name: b, weight: 0.5}]``."""
        if value is None:
            return []
        if isinstance(value, str):
            value = [value]
        if isinstance(value, list):
            return [{"name": v} if isinstance(v, str) else v for v in value]
        return value

    @field_validator("tools", mode="before")
    @classmethod
    def _tools_shorthand(cls, value: Any) -> Any:
        if isinstance(value, str):
            return [t.strip() for t in value.split(",") if t.strip()]
        return value

    @model_validator(mode="after")
    def _eval_has_tasks(self) -> RunConfig:
        held_out = self.trainer.eval
        if held_out.every and not (
            held_out.holdout or held_out.path or held_out.where or self.data.holdout
        ):
            raise ValueError(
                "trainer.eval: every needs eval tasks the run does not train on: set "
                "data.holdout (e.g. 0.1), trainer.eval.holdout, trainer.eval.path (a data "
                "file) or trainer.eval.where (rows of the data)"
            )
        return self


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
        allowed = _allowed_keys(first["loc"][:-1], root or RunConfig)
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
    """Apply ``a.b=c`` overrides to a nested dict, in order."""
    for item in overrides:
        key, sep, raw = item.partition("=")
        if not sep or not key.strip():
            raise UserError(f"--set {item!r}: expected KEY=VALUE, e.g. --set rollout.n=8")
        parts = key.strip().split(".")
        node = data
        for part in parts[:-1]:
            child = node.get(part)
            if child is None:
                child = node[part] = {}
            if not isinstance(child, dict):
                raise UserError(f"--set {item!r}: '{part}' is not a section")
            node = child
        node[parts[-1]] = parse_value(raw)
    return data


def resolve_recipe_path(spec: str) -> Path:
    """A YAML path, or the name of a registered recipe."""
    path = Path(spec).expanduser()
    if path.is_file():
        return path
    if path.suffix in (".yaml", ".yml") or os.sep in spec:
        raise UserError(f"config file {spec!r} not found")
    from agentfly_cli.plugins import get_plugin_host

    recipes = get_plugin_host().components.recipes
    return Path(recipes.get(spec).path)


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
    spec: str | None = None, overrides: list[str] | None = None, **fields: Any
) -> RunConfig:
    """Build a config from a recipe name or YAML file, then ``fields``, then ``--set`` overrides.

    Relative paths in a YAML file (data, script, template) are relative to that file.
    """
    data: dict[str, Any] = {}
    source = "config"
    if spec:
        path = resolve_recipe_path(spec)
        data = load_yaml(path)
        source = str(path)
        _anchor_paths(data, path.parent)
    recipe_data = dict(data.get("data") or {})
    for dotted, value in fields.items():
        if value is not None:
            apply_overrides_value(data, dotted, value)
    apply_overrides(data, list(overrides or []))
    _holdout_stays_with_its_file(data, recipe_data)
    try:
        return RunConfig.model_validate(data)
    except ValidationError as exc:
        raise UserError(format_settings_error(exc, source)) from None


def _holdout_stays_with_its_file(data: dict[str, Any], recipe_data: dict[str, Any]) -> None:
    """A recipe's ``data.holdout`` is drawn over the recipe's data file: other data (``--data``,
    ``--set data.path=``) is used whole unless the holdout is set again with it."""
    section = data.get("data")
    if not isinstance(section, dict) or section.get("path") == recipe_data.get("path"):
        return
    for key in ("holdout", "holdout_seed"):
        if key in recipe_data and section.get(key) == recipe_data[key]:
            del section[key]


def apply_overrides_value(data: dict[str, Any], dotted: str, value: Any) -> None:
    """Set one already-typed value at a dotted key (CLI flags)."""
    parts = dotted.split(".")
    node = data
    for part in parts[:-1]:
        node = node.setdefault(part, {})
    node[parts[-1]] = value


def _anchor_paths(data: dict[str, Any], base: Path) -> None:
    def anchor(value: Any) -> Any:
        if isinstance(value, str) and value and not os.path.isabs(value):
            candidate = base / value
            if candidate.exists():
                return str(candidate)
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
    chat = data.get("chat")
    if isinstance(chat, dict) and isinstance(chat.get("template"), str):
        if chat["template"].endswith(".jinja"):
            chat["template"] = anchor(chat["template"])
