"""A training run's plan: the values derived from its settings, decided once before it starts.

The settings the user gave (a :class:`~agentfly_cli.settings.run.RunSettings`) are never
changed: the warm-started model, the optimizer steps of the learning-rate schedule, the run
folder and the importance-sampling cap live in a frozen :class:`RunPlan`. The run folder keeps
both: ``config.json`` (the settings the run ran with) and ``plan.json`` (this plan).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from agentfly_cli.settings.run import RunSettings
from agentfly_cli.settings.train_backend import TrainBackendSettings

#: The plan of a run, written into its folder beside ``config.json``.
PLAN_FILE = "plan.json"


@dataclass(frozen=True)
class RunPlan:
    """What a run derives from its settings."""

    run_dir: str  # the run folder
    model: str | None  # the model RL starts from: the warm-started one, or the settings'
    base_model: str | None  # the settings' model
    warm_started: bool  # RL starts from RUN_DIR/warm_start/model
    total_steps: int  # optimizer steps of the run (the learning-rate schedule's length)
    tis_cap: float | None  # the importance-sampling cap the update uses

    def run_settings(self, config: RunSettings) -> RunSettings:
        """``config`` with the plan's model: a copy when it differs (``config`` stays)."""
        if self.model == config.model:
            return config
        return config.model_copy(update={"model": self.model})

    def backend_settings(self, settings: TrainBackendSettings) -> TrainBackendSettings:
        """The train backend's settings with the run's ``total_steps`` (a copy)."""
        if settings.total_steps == self.total_steps:
            return settings
        return settings.model_copy(update={"total_steps": self.total_steps})

    def record(self) -> dict[str, Any]:
        return asdict(self)

    def write(self, run_dir: Path) -> None:
        """``RUN_DIR/plan.json``."""
        run_dir.mkdir(parents=True, exist_ok=True)
        text = json.dumps(self.record(), indent=2, ensure_ascii=False)
        (run_dir / PLAN_FILE).write_text(text + "\n", encoding="utf-8")


def plan_run(
    config: RunSettings,
    run_dir: str | Path,
    *,
    warm_start: bool = False,
    tasks: Any = None,
    console: bool = True,
    **components: Any,
) -> RunPlan:
    """The plan of ``config``'s run in ``run_dir``. ``warm_start``: run the warm start first
    when ``trainer.warm_start.enabled`` (it reads ``tasks``, the run's
    :class:`~agentfly_cli.train.tasks.run_tasks.RunTasks`); ``components``: ``host``,
    ``tools`` and ``reward``, as for ``resolve_run``."""
    trainer = config.trainer
    model = config.model
    warmed = warm_start and trainer.warm_start.enabled
    if warmed:
        from agentfly_cli.train.sft.warm_start import warm_start as run_warm_start

        folder = run_warm_start(config, Path(run_dir), console=console, tasks=tasks, **components)
        model = str(folder)
    total = trainer.backend.total_steps or trainer.steps * trainer.epochs * trainer.mini_batches
    return RunPlan(
        run_dir=str(run_dir),
        model=model,
        base_model=config.model,
        warm_started=warmed,
        total_steps=total,
        tis_cap=trainer.algorithm.tis_cap,
    )
