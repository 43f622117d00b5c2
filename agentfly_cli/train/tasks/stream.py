"""The task stream of a training run: seeded epochs over the dataset, resumable by position."""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from typing import Any


class TaskStream:
    """Hands out tasks in seeded, per-epoch shuffled order.

    The order depends only on ``(seed, position)``, so a run resumes exactly from the number
    of tasks it had consumed.
    """

    def __init__(
        self, tasks: Sequence[Mapping[str, Any]], *, seed: int | str = 0, shuffle: bool = True
    ):
        if not tasks:
            raise ValueError("the dataset has no tasks")
        self.tasks = list(tasks)
        self.seed = seed
        self.shuffle = shuffle
        self.position = 0
        self._epoch: tuple[int, list[int]] | None = None

    def _order(self, epoch: int) -> list[int]:
        if self._epoch is None or self._epoch[0] != epoch:
            order = list(range(len(self.tasks)))
            if self.shuffle:
                random.Random(f"{self.seed}:{epoch}").shuffle(order)
            self._epoch = (epoch, order)
        return self._epoch[1]

    def task_at(self, position: int) -> Mapping[str, Any]:
        """The task this stream hands out at ``position`` (epochs wrap around)."""
        epoch, index = divmod(position, len(self.tasks))
        return self.tasks[self._order(epoch)[index]]

    def take(self, count: int) -> list[tuple[int, Mapping[str, Any]]]:
        """The next ``count`` tasks as ``(global position, task)``; epochs wrap around."""
        out = []
        for _ in range(count):
            out.append((self.position, self.task_at(self.position)))
            self.position += 1
        return out

    def record(self, reward_mean: float) -> str | None:
        """A plain stream has no levels: nothing to promote (see ``CurriculumStream``)."""
        return None

    def metrics(self) -> dict[str, float]:
        return {"data/position": float(self.position)}

    def state_dict(self) -> dict[str, Any]:
        return {"position": self.position}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.position = int(state["position"])
