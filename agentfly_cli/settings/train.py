"""Training settings: the ``trainer:`` section of a recipe (RL), and ``agentfly sft``'s.

Both share :class:`OptimizationSettings`; their algorithm and train backend settings live in
:mod:`.algorithm` and :mod:`.train_backend`.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from agentfly_cli.settings.algorithm import AlgorithmSettings
from agentfly_cli.settings.distill import DistillSettings
from agentfly_cli.settings.train_backend import TrainBackendSettings


class TelemetrySettings(BaseModel):
    """Where metrics go."""

    model_config = ConfigDict(extra="forbid")

    sinks: list[Literal["jsonl", "tensorboard", "wandb"]] = Field(
        default_factory=lambda: ["jsonl", "tensorboard"],
        description="jsonl (always useful), tensorboard, wandb",
    )
    wandb_project: str | None = Field(None, description="W&B project (wandb sink)")
    wandb_mode: Literal["offline", "online", "disabled"] = Field(
        "offline", description="W&B mode; offline writes under the run folder"
    )
    console: bool = Field(True, description="Rich live progress and one line per step")


class EvalSettings(BaseModel):
    """Held-out evaluation during training: pass@k and mean reward on tasks the run does not
    train on, before the first step, every ``every`` steps and after the last."""

    model_config = ConfigDict(extra="forbid")

    every: int = Field(0, ge=0, description="evaluate every N steps (and at start and end); 0: off")
    holdout: float = Field(
        0.0,
        ge=0.0,
        lt=1.0,
        description="deprecated alias of data.holdout: loading the run's settings moves it there "
        "(it replaces the recipe's data.holdout; drawn by data.holdout_seed) and leaves 0 here",
    )
    path: str | None = Field(None, description="eval tasks from this file; default: data.path")
    where: dict[str, Any] = Field(
        default_factory=dict, description="keep only these eval rows (as data.where)"
    )
    limit: int | None = Field(None, ge=1, description="evaluate on at most this many tasks")
    n: int = Field(4, ge=1, description="chains per eval task (pass@k up to n)")
    threshold: float = Field(1.0, description="a chain passes when its reward is at least this")

    @property
    def enabled(self) -> bool:
        return self.every > 0


class SolutionStep(BaseModel):
    """Turns played from a list field of the task row: one or more per item (every
    ``every``-th), the last item's from ``last`` when given."""

    model_config = ConfigDict(extra="forbid")

    each: str = Field(description="the row's list field, e.g. hops or walkthrough")
    say: str | list[str] = Field(
        description="the turn for one item, or several turns: {item} is the item, {name} a "
        "field of a dict item"
    )
    every: int = Field(1, ge=1, description="take every N-th item (2: a chess solver's moves)")
    last: str | list[str] | None = Field(
        None,
        description="the turn(s) for the last item taken instead of `say` (e.g. look at the "
        "mating move, then play it); null: `say`",
    )


class WarmStartSettings(BaseModel):
    """SFT on the recipe's packaged solutions of the training tasks, before RL."""

    model_config = ConfigDict(extra="forbid")

    enabled: bool = Field(False, description="fine-tune first (`agentfly train --warm-start`)")
    responses: list[str | SolutionStep] = Field(
        default_factory=list,
        description="how a task's packaged solution is played, turn by turn: a template of the "
        "row's fields (e.g. 'ANSWER: {answer}') or a list field played item by item",
    )
    epochs: int = Field(1, ge=1, description="passes over the solutions (1 leaves room to explore)")
    batch_size: int = Field(8, ge=1, description="solutions per optimizer step")
    lr: float = Field(5e-5, gt=0, allow_inf_nan=False, description="peak learning rate (cosine)")
    limit: int | None = Field(None, ge=1, description="use only the first N training tasks")
    balance: str | None = Field(
        None,
        description="a data field (e.g. type): the `limit` tasks are dealt evenly over its "
        "values, each value's in file order, so that a file sorted by kind still gives every "
        "kind; null: the first `limit` training tasks",
    )


class CurriculumSettings(BaseModel):
    """Difficulty levels of the data, easiest first: train on a level until the training reward
    reaches ``promote_at``, then move up (see agentfly_cli/train/tasks/curriculum.py)."""

    model_config = ConfigDict(extra="forbid")

    field: str | None = Field(
        None, description="the data field holding each task's level; null: no curriculum"
    )
    levels: list[str | int] = Field(
        default_factory=list,
        description="the levels in order, easiest first; empty: the field's values, sorted",
    )
    start: str | int | None = Field(None, description="the level to start at; default the first")
    promote_at: float = Field(
        0.6,
        ge=0.0,
        allow_inf_nan=False,
        description="move up once the mean training reward of the last `window` steps at this "
        "level reaches this",
    )
    window: int = Field(2, ge=1, description="steps averaged by the promotion rule")
    review: float = Field(
        0.0,
        ge=0.0,
        lt=1.0,
        description="share of each step's tasks drawn from the easier levels already passed",
    )

    @property
    def enabled(self) -> bool:
        return self.field is not None


class OptimizationSettings(BaseModel):
    """What RL (``trainer:``) and SFT (``agentfly sft``) share: micro-batches, the train
    backend, the seed, telemetry. Declared once here."""

    model_config = ConfigDict(extra="forbid")

    micro_batch_tokens: int = Field(
        4096, ge=16, description="padded tokens per forward pass (gradient accumulation unit)"
    )
    logprob_chunk: int = Field(
        0,
        ge=0,
        description="trained positions per output-head chunk (memory bound); 0: automatic, "
        "16 MB of fp32 logits per chunk on a CPU, 128 MB on a GPU",
    )
    share_prefix: bool = Field(
        True,
        description="forward the prompt prefix that rows of a micro-batch share once (exact, "
        "with checkpointing too)",
    )
    seed: int = Field(
        0,
        description="seeds the order of tasks and batches and any hold-out split of this phase "
        "(sampling: rollout.seed)",
    )
    backend: TrainBackendSettings = Field(default_factory=TrainBackendSettings)
    telemetry: TelemetrySettings = Field(default_factory=TelemetrySettings)


#: ``algorithm.tis_cap`` of an async run with lookahead that sets none
ASYNC_TIS_CAP = 2.0


class TimeoutSettings(BaseModel):
    """How long the trainer waits before it names what hung (``trainer.timeouts``)."""

    model_config = ConfigDict(extra="forbid")

    weight_sync_s: float = Field(
        600.0,
        gt=0,
        allow_inf_nan=False,
        description="one push of the trained weights to the rollout backend (it waits for the "
        "requests in flight to finish on the old weights)",
    )
    rollout_wait_s: float = Field(
        3600.0,
        gt=0,
        allow_inf_nan=False,
        description="async mode: the trainer waiting for the producer's next task group within "
        "max_staleness (counted from the last group it kept)",
    )


class SyncCheckSettings(BaseModel):
    """The weight-sync tripwire (``trainer.sync_check``): after each push, the rollout
    backend's and the trainer's logprobs on a fixed probe are compared (docs/training.md,
    "Weight sync")."""

    model_config = ConfigDict(extra="forbid")

    enabled: bool = Field(
        True,
        description="score the probe after every push; skipped for a shared model (the policy "
        "itself), and with a note for a backend that cannot score prompts or several ranks",
    )
    threshold: float = Field(
        0.02,
        gt=0,
        allow_inf_nan=False,
        description="stop the run when the mean |logprob gap| per probe token after a push is "
        "above this and above baseline_factor times the gap measured before training",
    )
    baseline_factor: float = Field(
        3.0,
        gt=1,
        allow_inf_nan=False,
        description="how many times the benign gap before training (a bf16 backend beside a "
        "fp32 trainer: 0.001 on the tiny model, 0.06 on SmolLM2) a push may show",
    )
    probe_sequences: int = Field(
        2, ge=1, description="how many short conversations (chat template) make the probe"
    )
    probe_tokens: int = Field(
        64, ge=2, description="the first tokens of each probe conversation that are scored"
    )
    drift_factor: float = Field(
        5.0,
        gt=1,
        allow_inf_nan=False,
        description="warn when sync/sampler_kl_mean jumps above this many times its running "
        "median (and above drift_floor)",
    )
    drift_floor: float = Field(
        0.05,
        ge=0,
        allow_inf_nan=False,
        description="sync/sampler_kl_mean below this never warns (a bf16 sampler beside a fp32 "
        "trainer: 0.001-0.02 on SmolLM2)",
    )


class TrainerSettings(OptimizationSettings):
    """How a training run goes: batch sizes, epochs, checkpoints, algorithm, backend."""

    steps: int = Field(20, ge=1, description="training steps (rollout + update each)")
    tasks_per_step: int = Field(4, ge=1, description="tasks per step; each gets rollout.n chains")
    epochs: int = Field(1, ge=1, description="passes over each step's trajectories")
    mini_batches: int = Field(1, ge=1, description="optimizer steps per epoch")
    skip_zero_advantage: bool = Field(
        True,
        description="skip the forward and backward passes of rows whose advantages are all 0 "
        "(a GRPO group of equal rewards): the loss's normalisers still count them, so the "
        "update is the same; only where nothing else reads such a row (no entropy bonus, KL "
        "loss or value head; policy loss ppo or gspo)",
    )
    shuffle: bool = Field(True, description="shuffle tasks each epoch of the dataset")
    balance: str | None = Field(
        None,
        description="a data field (e.g. type): each step's tasks are dealt round-robin over its "
        "values, so every kind of task comes round evenly (train/balance.py); null: a plain "
        "shuffled stream",
    )
    save_every: int = Field(0, ge=0, description="checkpoint every N steps; 0: only at the end")
    keep_checkpoints: int = Field(2, ge=1, description="checkpoints kept in the run folder")
    save_only_model: bool = Field(
        False,
        description="checkpoints hold the model only, without the optimizer state (a third of "
        "the size in float32); such a checkpoint cannot be resumed",
    )
    out: str | None = Field(None, description="run folder; default runs/<recipe>-<time>")
    save_trajectories: bool = Field(
        True, description="write each step's trajectories to RUN_DIR/trajectories/ (agentfly view)"
    )
    algorithm: AlgorithmSettings = Field(default_factory=AlgorithmSettings)
    distill: DistillSettings = Field(default_factory=DistillSettings)
    eval: EvalSettings = Field(default_factory=EvalSettings)
    warm_start: WarmStartSettings = Field(default_factory=WarmStartSettings)
    curriculum: CurriculumSettings = Field(default_factory=CurriculumSettings)
    mode: Literal["sync", "async"] = Field(
        "sync",
        description="sync: each step rolls out, then trains; async: a producer keeps rolling out "
        "task groups while the trainer trains on finished ones (docs/async.md)",
    )
    max_staleness: int = Field(
        1,
        ge=0,
        description="async: train on a task group only if its oldest sampled token is at most "
        "this many weight updates old (older groups are dropped and counted); 0 is the sync loop",
    )
    timeouts: TimeoutSettings = Field(default_factory=TimeoutSettings)
    sync_check: SyncCheckSettings = Field(default_factory=SyncCheckSettings)

    @model_validator(mode="after")
    def _correct_stale_samples(self) -> TrainerSettings:
        """Async with lookahead trains on samples of older weights: truncated importance
        sampling (cap 2) corrects for the gap unless ``algorithm.tis_cap`` is set, to null
        included."""
        lookahead = self.mode == "async" and self.max_staleness > 0
        if lookahead and "tis_cap" not in self.algorithm.model_fields_set:
            # a copy: an AlgorithmSettings the caller passed in stays as it was
            self.algorithm = self.algorithm.model_copy(update={"tis_cap": ASYNC_TIS_CAP})
        return self


def _sft_backend() -> TrainBackendSettings:
    return TrainBackendSettings(lr=5e-5, lr_schedule="cosine", warmup_steps=2)


class SFTSettings(OptimizationSettings):
    """How ``agentfly sft`` trains; ``--set key=value`` changes any of these (the shared ones:
    :class:`OptimizationSettings`)."""

    epochs: int = Field(2, ge=1, description="passes over the kept trajectories")
    batch_size: int = Field(8, ge=1, description="trajectories per optimizer step")
    min_reward: float | None = Field(
        None,
        allow_inf_nan=False,
        description="keep only chains whose reward is at least this; None: keep all",
    )
    holdout: float = Field(
        0.1, ge=0.0, lt=1.0, description="seeded share of tasks kept out to measure loss on"
    )
    # SFT's own defaults for the shared backend: lr 5e-5, cosine, 2 warmup steps
    backend: TrainBackendSettings = Field(
        default_factory=_sft_backend,
        description="the torch train backend (lr 5e-5, cosine, 2 warmup steps by default)",
    )
