"""Balanced steps: each step's tasks spread evenly over the values of one data field.

``trainer.balance: type`` deals a step's tasks round-robin over the field's values (question
types, hop counts, game sizes): each value's tasks keep their own seeded, per-epoch shuffled
order, and the values take turns in a seeded order that changes every round. With 9 question
types and ``tasks_per_step: 9``, every step sees every type once. Values with fewer tasks come
round as often as the others, so their tasks repeat sooner (that is the point: a rare kind of
task is not left out of most steps).

A random sample of 4 tasks out of 9 kinds gives whole steps of one kind, and one such step can
swing a small policy towards that kind's habit (docs/learning.md, search_qa). The order depends
only on the seed and the global position, so a resumed run continues exactly.
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from typing import Any

from agentfly_cli.errors import UserError
from agentfly_cli.train.tasks.stream import TaskStream


def group_by_field(
    tasks: Sequence[Mapping[str, Any]], field: str, *, setting: str = "trainer.balance"
) -> dict[str, list[Mapping[str, Any]]]:
    """The tasks grouped by ``str(task[field])``, in the order the values first appear."""
    missing = sum(1 for task in tasks if field not in task)
    if missing:
        raise UserError(
            f"{setting}: {missing} of {len(tasks)} training tasks have no field {field!r}; name "
            "a field every task has (e.g. type) or drop the setting"
        )
    groups: dict[str, list[Mapping[str, Any]]] = {}
    for task in tasks:
        value = task[field]
        if isinstance(value, (dict, list)):
            raise UserError(
                f"{setting}: the field {field!r} holds a {type(value).__name__}, not a value "
                "to group tasks by; name a field of strings or numbers"
            )
        groups.setdefault(str(value), []).append(task)
    return groups


class BalancedStream(TaskStream):
    """Hands out tasks round-robin over the values of ``field``: a
    :class:`~agentfly_cli.train.tasks.stream.TaskStream` whose task at a position comes from the
    value whose turn it is (``take``, ``position`` and the state dicts are the plain stream's)."""

    def __init__(
        self,
        tasks: Sequence[Mapping[str, Any]],
        field: str,
        *,
        seed: int | str = 0,
        shuffle: bool = True,
    ) -> None:
        super().__init__(tasks, seed=seed, shuffle=shuffle)
        groups = group_by_field(tasks, field)
        self.field = field
        self.values = list(groups)
        self.streams = [
            TaskStream(rows, seed=f"{seed}:{value}", shuffle=shuffle)
            for value, rows in groups.items()
        ]

    def _round(self, round_index: int) -> list[int]:
        """The order the values take their turns in one round (seeded per round)."""
        order = list(range(len(self.streams)))
        if self.shuffle:
            random.Random(f"{self.seed}:balance:{round_index}").shuffle(order)
        return order

    def task_at(self, position: int) -> Mapping[str, Any]:
        """In round ``r`` each value hands out its ``r``-th task (its own order wraps around
        at its epochs), the values taking turns in the round's order."""
        round_index, turn = divmod(position, len(self.streams))
        return self.streams[self._round(round_index)[turn]].task_at(round_index)


def deal_evenly(
    tasks: Sequence[Mapping[str, Any]], field: str, limit: int | None, *, setting: str
) -> list[Mapping[str, Any]]:
    """Up to ``limit`` of ``tasks`` taken round-robin over the values of ``field`` (values in
    the order they first appear, each value's tasks in their order): every value gets its
    share before any gets more, and a value with fewer tasks leaves its turns to the others."""
    groups = list(group_by_field(tasks, field, setting=setting).values())
    wanted = len(tasks) if limit is None else min(limit, len(tasks))
    dealt: list[Mapping[str, Any]] = []
    for round_index in range(max((len(g) for g in groups), default=0)):
        for group in groups:
            if round_index < len(group) and len(dealt) < wanted:
                dealt.append(group[round_index])
    return dealt
