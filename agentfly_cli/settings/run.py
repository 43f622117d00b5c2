"""A run's settings (:class:`RunSettings`): from a recipe, a YAML file, and ``--set`` overrides.

Its sections: ``data``, ``chat``, ``reward`` here; ``backend`` and ``rollout``
(:mod:`.rollout`), ``trainer`` (:mod:`.train`), ``envs`` (:mod:`.envs`), ``agent``
(:mod:`.agent`), ``check`` (:mod:`.check`). Loading one from YAML
and ``--set`` overrides is :func:`agentfly_cli.recipes.loader.load_config`.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from agentfly_cli.settings.agent import AgentSettings
from agentfly_cli.settings.chat import ObservationSettings
from agentfly_cli.settings.check import CheckSettings
from agentfly_cli.settings.deprecated import deprecated
from agentfly_cli.settings.envs import EnvPoolSettings
from agentfly_cli.settings.rollout import BackendSettings, RolloutSettings
from agentfly_cli.settings.train import TrainerSettings


class DataSettings(BaseModel):
    """Where the tasks come from."""

    model_config = ConfigDict(extra="forbid")

    path: str | None = Field(None, description="JSONL, JSON, Parquet or a datasets folder")
    where: dict[str, Any] = Field(
        default_factory=dict,
        description="keep only rows whose field equals the value, or one of a list of values "
        "(e.g. where: {kind: [shopping, change]}); applied before limit",
    )
    limit: int | None = Field(
        None, ge=1, description="use only the first rows (with shuffle: that many at random)"
    )
    shuffle: bool = Field(
        False,
        description="shuffle the rows (seeded by shuffle_seed) after the holdout and where, "
        "before limit: a limit then takes rows from the whole file, not its first rows; "
        "false: file order",
    )
    shuffle_seed: int = Field(0, description="seeds the shuffle (same seed, same rows and order)")
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
    user_turns_field: str = Field(
        "user_turns",
        min_length=1,
        description="the row field holding user turns that arrive mid-episode: a list of "
        '{content, after: "answer" or an assistant turn number from 0}, each appended after '
        "that turn with loss mask 0; the chain ends at an answer only when none is left",
    )
    tools_field: str | None = Field(
        "tools",
        description="the row field that holds a task's own tools: a list of OpenAI tool "
        "schemas (or their bare function objects, as BFCL writes them), offered beside the "
        "run's tools; rollout.task_tools says what their calls do (null: rows bring none)",
    )
    split: Literal["train", "heldout", "all"] = Field(
        "train",
        description="which side of the holdout this run reads (eval: heldout by default)",
    )

    @model_validator(mode="after")
    def _split_needs_holdout(self) -> DataSettings:
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


class ChatSettings(BaseModel):
    """How conversations are rendered into tokens and how tool calls are read back."""

    model_config = ConfigDict(extra="forbid")

    template: str | None = Field(
        None, description="None: the tokenizer's own; a packaged name or a .jinja path"
    )
    chat_template_kwargs: dict[str, Any] = Field(
        default_factory=dict,
        description="extra variables of the template (e.g. enable_thinking: false for Qwen3)",
    )
    parser: str | None = Field(
        None,
        description="a registered tool-call format (agentfly parsers list) or module:attr; "
        "None: guessed from the template",
    )
    parser_options: dict[str, Any] = Field(
        default_factory=dict,
        description="settings of the parser (e.g. the line parser's commands: "
        "{CALC: {tool: calculator, argument: expression}})",
    )
    observation: ObservationSettings = Field(default_factory=ObservationSettings)
    system_prompt: str | None = Field(None, description="the system message; None: none")
    examples: list[dict[str, Any]] = Field(
        default_factory=list, description="worked examples: chat messages placed before the task"
    )


class RunSettings(BaseModel):
    """Everything one rollout (and, later, training) needs."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field("custom", description="the recipe's name (run folders are named after it)")
    description: str = Field("", description="one line on what the recipe trains")
    model: str | None = Field(None, description="model folder or alias (tiny, smollm2)")
    backend: BackendSettings = Field(default_factory=BackendSettings)
    data: DataSettings = Field(default_factory=DataSettings)
    tools: list[str] = Field(
        default_factory=list,
        description="registered tool names (agentfly tools list) or module:attr; a "
        "comma-separated string also works",
    )
    reward: list[RewardComponent] = Field(
        default_factory=list,
        description="a weighted sum of rewards; a name or a list of names also works",
    )
    chat: ChatSettings = Field(default_factory=ChatSettings)
    rollout: RolloutSettings = Field(default_factory=RolloutSettings)
    trainer: TrainerSettings = Field(default_factory=TrainerSettings)
    envs: dict[str, EnvPoolSettings] = Field(
        default_factory=dict, description="per env name: provider, pool server, pool limits"
    )
    out: str | None = Field(None, description="trajectory JSONL to write")
    agent: AgentSettings | None = Field(
        None,
        description="an agent program run through the gateway instead of the turn loop (its "
        "tools are its own); a file.py:fn string also works",
    )
    check: CheckSettings | None = Field(
        None,
        description="the recipe's self-check: gold and junk answers that `agentfly recipes "
        "check` plays through its reward",
    )

    @model_validator(mode="before")
    @classmethod
    def _backend_model_is_model(cls, data: Any) -> Any:
        """``backend.model`` in a config: a deprecated alias of ``model`` (it wins, as it did);
        ``backend.model`` itself is the folder the run resolves and hands its backend."""
        if not isinstance(data, dict):
            return data
        backend = data.get("backend")
        if isinstance(backend, BackendSettings):
            backend = backend.model_dump(exclude_unset=True)
        if not isinstance(backend, dict) or "model" not in backend:
            return data
        backend = dict(backend)
        model = backend.pop("model")
        data = {**data, "backend": backend}
        if model is not None:
            deprecated("backend.model", "model", "the model folder or alias of the run")
            data["model"] = model
        return data

    @field_validator("agent", mode="before")
    @classmethod
    def _agent_shorthand(cls, value: Any) -> Any:
        return {"entry": value} if isinstance(value, str) else value

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
    def _eval_holdout_is_data_holdout(self) -> RunSettings:
        """``trainer.eval.holdout``: a deprecated alias of ``data.holdout`` (moved there, drawn
        by ``data.holdout_seed``; 0 left behind). Two different non-zero values are an error
        (the loader lets a later layer's value replace the recipe's, see
        :func:`agentfly_cli.recipes.loader.load_config`)."""
        fraction = self.trainer.eval.holdout
        if not fraction:
            return self
        if self.data.holdout and self.data.holdout != fraction:
            raise ValueError(
                f"data.holdout {self.data.holdout:g} and trainer.eval.holdout {fraction:g} "
                "disagree; keep data.holdout (the held-out share) and drop trainer.eval.holdout, "
                "its deprecated alias"
            )
        deprecated(
            "trainer.eval.holdout",
            "data.holdout",
            "the same share, held out of every phase, drawn by data.holdout_seed "
            f"{self.data.holdout_seed}",
        )
        self.data = self.data.model_copy(update={"holdout": fraction})
        held_out = self.trainer.eval.model_copy(update={"holdout": 0.0})
        self.trainer = self.trainer.model_copy(update={"eval": held_out})
        return self

    @model_validator(mode="after")
    def _eval_has_tasks(self) -> RunSettings:
        held_out = self.trainer.eval
        if held_out.every and not (held_out.path or held_out.where or self.data.holdout):
            raise ValueError(
                "trainer.eval: every needs eval tasks the run does not train on: set "
                "data.holdout (e.g. 0.1), trainer.eval.path (a data file) or "
                "trainer.eval.where (rows of the data)"
            )
        return self
