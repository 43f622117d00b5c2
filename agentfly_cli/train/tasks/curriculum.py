"""A curriculum over difficulty levels: train where the model has reward spread, move up as it
learns.

``trainer.curriculum`` names a field of the data rows (``level``) and its levels, easiest
first. Each step takes its tasks from the current level (and a ``review`` share from the levels
already passed); after each step the step's mean training reward joins a window, and once the
last ``window`` steps at this level average at least ``promote_at`` the run moves up a level.
The last level is kept to the end of the run.

Like :class:`~agentfly_cli.train.tasks.stream.TaskStream`, the order depends only on the seed and
the stream's state, so a resumed run (``state_dict`` / ``load_state_dict`` in the checkpoint)
continues exactly.
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from typing import Any

from agentfly_cli.errors import UserError
from agentfly_cli.settings.train import CurriculumSettings
from agentfly_cli.train.tasks.balance import BalancedStream
from agentfly_cli.train.tasks.stream import TaskStream


def level_names(rows: Sequence[Mapping[str, Any]], settings: CurriculumSettings) -> list[str]:
    """The levels in order, as strings: ``settings.levels``, or the field's values sorted
    (numbers numerically)."""
    field = settings.field
    values = [row[field] for row in rows if isinstance(row, Mapping) and field in row]
    if not values:
        raise UserError(
            f"trainer.curriculum.field: no training row has a field {field!r}; name the field "
            "that holds each task's difficulty (e.g. level) or drop trainer.curriculum"
        )
    if settings.levels:
        return [str(level) for level in settings.levels]
    distinct = {str(value): value for value in values}
    numeric = all(
        isinstance(v, (int, float)) and not isinstance(v, bool) for v in distinct.values()
    )
    return sorted(distinct, key=(lambda k: distinct[k]) if numeric else None)


class CurriculumStream:
    """Hands out tasks level by level; :meth:`record` promotes on the training reward."""

    def __init__(
        self,
        tasks: Sequence[Mapping[str, Any]],
        settings: CurriculumSettings,
        *,
        seed: int = 0,
        shuffle: bool = True,
        balance: str | None = None,
    ) -> None:
        if not tasks:
            raise ValueError("the dataset has no tasks")
        self.settings = settings
        self.levels = level_names(tasks, settings)
        by_level: dict[str, list[Mapping[str, Any]]] = {level: [] for level in self.levels}
        unlevelled = 0
        for task in tasks:
            level = str(task.get(settings.field)) if settings.field in task else None
            if level in by_level:
                by_level[level].append(task)
            else:
                unlevelled += 1
        empty = [level for level, rows in by_level.items() if not rows]
        if empty:
            found = sorted({str(t.get(settings.field)) for t in tasks if settings.field in t})
            raise UserError(
                f"trainer.curriculum.levels: no training task has {settings.field} = "
                f"{empty[0]!r}; the data holds {', '.join(found)}"
            )
        self.unlevelled = unlevelled  # rows outside every level: never trained on
        self.streams = [
            _stream(by_level[level], seed=f"{seed}:{level}", shuffle=shuffle, balance=balance)
            for level in self.levels
        ]
        self.seed = seed
        self.level = self._start_index()
        self.position = 0  # tasks handed out in all (the global task offset)
        self.window: list[float] = []  # mean rewards of the recent steps at this level

    def _start_index(self) -> int:
        start = self.settings.start
        if start is None:
            return 0
        if str(start) not in self.levels:
            raise UserError(
                f"trainer.curriculum.start: {start!r} is not one of the levels "
                f"{', '.join(self.levels)}"
            )
        return self.levels.index(str(start))

    @property
    def current(self) -> str:
        return self.levels[self.level]

    def take(self, count: int) -> list[tuple[int, Mapping[str, Any]]]:
        """The next ``count`` tasks as ``(global position, task)``: from the current level,
        and a ``review`` share (rounded, seeded) from the easier levels passed."""
        review = 0
        if self.level and self.settings.review:
            rng = random.Random(f"{self.seed}:review:{self.position}")
            exact = count * self.settings.review
            review = int(exact) + (rng.random() < exact - int(exact))
        picked: list[Mapping[str, Any]] = []
        for slot in range(review):
            rng = random.Random(f"{self.seed}:review:{self.position}:{slot}")
            easier = self.streams[rng.randrange(self.level)]
            picked.extend(task for _, task in easier.take(1))
        picked.extend(task for _, task in self.streams[self.level].take(count - review))
        out = [(self.position + i, task) for i, task in enumerate(picked)]
        self.position += len(out)
        return out

    def record(self, reward_mean: float) -> str | None:
        """Add a step's mean training reward; the new level's name when this promotes."""
        self.window.append(float(reward_mean))
        self.window = self.window[-self.settings.window :]
        if self.level + 1 >= len(self.levels) or len(self.window) < self.settings.window:
            return None
        if sum(self.window) / len(self.window) < self.settings.promote_at:
            return None
        self.level += 1
        self.window = []
        return self.current

    def metrics(self) -> dict[str, float]:
        return {"curriculum/level": float(self.level), "data/position": float(self.position)}

    def state_dict(self) -> dict[str, Any]:
        return {
            "level": self.level,
            "position": self.position,
            "window": list(self.window),
            "positions": [stream.position for stream in self.streams],
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        positions = list(state["positions"])
        if len(positions) != len(self.streams):
            raise UserError(
                f"--resume: the checkpoint's curriculum has {len(positions)} levels, these "
                f"settings {len(self.streams)}; resume with the run's own trainer.curriculum"
            )
        self.level = int(state["level"])
        self.position = int(state["position"])
        self.window = [float(r) for r in state["window"]]
        for stream, position in zip(self.streams, positions, strict=True):
            stream.position = int(position)


def _stream(
    tasks: Sequence[Mapping[str, Any]], *, seed: int | str, shuffle: bool, balance: str | None
) -> TaskStream | BalancedStream:
    if balance is None:
        return TaskStream(tasks, seed=seed, shuffle=shuffle)
    return BalancedStream(tasks, balance, seed=seed, shuffle=shuffle)


def task_stream(
    tasks: Sequence[Mapping[str, Any]],
    settings: CurriculumSettings,
    *,
    seed: int,
    shuffle: bool,
    balance: str | None = None,
) -> TaskStream | BalancedStream | CurriculumStream:
    """The run's task stream: a curriculum when ``settings.field`` is set; each level's (or
    the whole data's) tasks balanced over the field ``balance`` when it is set."""
    if settings.enabled:
        return CurriculumStream(tasks, settings, seed=seed, shuffle=shuffle, balance=balance)
    return _stream(tasks, seed=seed, shuffle=shuffle, balance=balance)
