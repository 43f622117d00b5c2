"""Which tasks a run trains and evaluates on: the held-out split, the training stream (with its
curriculum), each rank's share of a step, and the state a checkpoint keeps of them."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from agentfly_cli.errors import UserError
from agentfly_cli.settings.run import DataSettings
from agentfly_cli.settings.train import TrainerSettings
from agentfly_cli.train.tasks.curriculum import task_stream
from agentfly_cli.train.tasks.evaluation import HeldOutEval, split_tasks

Picked = list[tuple[int, Mapping[str, Any]]]  # (position in the training tasks, task row)


class TaskPlan:
    """The run's tasks, split once: ``held_out`` scores the held-out side, :meth:`take` hands
    out the training side step by step, :meth:`record` feeds the curriculum."""

    def __init__(
        self,
        tasks: Sequence[Mapping[str, Any]],
        settings: TrainerSettings,
        data: DataSettings,
        file_rows: Sequence[Mapping[str, Any]] | None = None,
        rules: Any = None,
    ) -> None:
        """``tasks``: the run's side of the data; ``file_rows``: every row of ``data.path``, read
        once by the run (None: the held-out side reads the file again); ``rules``: what the run
        asks of the rows it reads (a ``RowRules``)."""
        if data.split == "heldout":
            raise UserError(
                "data.split: heldout would train on the held-out tasks; use train (the default)"
            )
        self.settings = settings
        self.split = split_tasks(tasks, settings.eval, data=data, file_rows=file_rows, rules=rules)
        self.held_out = HeldOutEval(self.split, settings.eval, settings.steps)
        self.stream = task_stream(
            self.split.train,
            settings.curriculum,
            seed=settings.seed,
            shuffle=settings.shuffle,
            balance=settings.balance,
        )
        unlevelled = getattr(self.stream, "unlevelled", 0)
        if unlevelled:
            self.split.notes.append(
                f"trainer.curriculum: {unlevelled} training rows have no "
                f"{settings.curriculum.field} among the levels {', '.join(self.stream.levels)} "
                "and are never trained on"
            )

    @property
    def notes(self) -> list[str]:
        """Lines for the run's start: what the split and the curriculum left out, and why."""
        return self.split.notes

    def write_held_out(self, run_dir: Path) -> None:
        """``RUN_DIR/eval_tasks.jsonl``, when the run holds tasks out."""
        if self.split.eval:
            self.held_out.write_tasks(run_dir)

    def take(self, rank: int = 0, world_size: int = 1) -> Picked:
        """The next step's ``tasks_per_step`` tasks (every rank draws them all, in the same
        order), and this rank's contiguous share of them."""
        picked = self.stream.take(self.settings.tasks_per_step)
        share = len(picked) // world_size
        return picked[rank * share : (rank + 1) * share]

    def record(self, step: int, metrics: Mapping[str, float]) -> str | None:
        """Feed the step's mean training reward (the same on every rank) to the curriculum; a
        promotion returns the line that announces it (``curriculum/level`` logs every step)."""
        if "reward/mean" not in metrics:
            return None
        level = self.stream.record(metrics["reward/mean"])
        if level is None:
            return None
        return (
            f"curriculum: after step {step} the training reward reached "
            f"{self.settings.curriculum.promote_at:g}; moving up to level {level}"
        )

    def metrics(self) -> dict[str, float]:
        """``data/position`` (and ``curriculum/level``)."""
        return self.stream.metrics()

    @property
    def position(self) -> int:
        return self.stream.position

    def state_dict(self) -> dict[str, Any]:
        return self.stream.state_dict()

    def load_state_dict(self, state: Mapping[str, Any] | None, position: int) -> None:
        """Continue from a checkpoint's stream state (older checkpoints kept only the
        position)."""
        self.stream.load_state_dict(state or {"position": int(position)})
