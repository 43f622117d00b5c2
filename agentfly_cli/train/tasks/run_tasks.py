"""A training run's data file, read once: every phase (the warm start, RL, the held-out eval)
takes its side of the same checked rows."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from agentfly_cli.errors import UserError
from agentfly_cli.settings.run import DataSettings


@dataclass(frozen=True)
class RunTasks:
    """The rows of ``data.path`` (``rows``: all of them, checked) and the side this run reads
    (``train``: ``data.split``, ``where``, ``shuffle`` and ``limit`` applied)."""

    source: str
    rows: tuple[dict[str, Any], ...]
    train: tuple[dict[str, Any], ...]

    @classmethod
    def load(cls, data: DataSettings, rules: Any = None) -> RunTasks:
        """Read ``data.path`` (the only read of it in a run) and pick its side; ``rules``: what
        the run asks of each row (a ``RowRules``, e.g. ``RowRules.of(settings)``)."""
        from agentfly_cli.rollout.tasks import read_tasks

        if not data.path:
            raise UserError("no data: pass --data FILE.jsonl (or set data.path in the settings)")
        return cls.of_rows(read_tasks(data.path, rules), data, str(data.path))

    @classmethod
    def of_rows(
        cls, rows: Sequence[Mapping[str, Any]], data: DataSettings, source: str
    ) -> RunTasks:
        """The same from rows already read and checked."""
        from agentfly_cli.rollout.tasks import data_side

        rows = tuple(rows)
        return cls(source, rows, tuple(data_side(rows, data, source)))

    def as_given(self) -> dict[str, Any]:
        """``resolve_run``'s keywords for this run's side: ``tasks`` and their ``source``."""
        return {"tasks": self.train, "source": self.source}
