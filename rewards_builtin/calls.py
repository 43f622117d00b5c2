"""The tool calls of a trajectory, as rewards read them (live or from a saved JSONL line)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any


def call_records(trajectory: Any) -> Iterator[Mapping[str, Any]]:
    """Each tool call of ``trajectory`` (a :class:`Trajectory` or its saved dict) as a mapping."""
    calls = getattr(trajectory, "tool_calls", None)
    if calls is None and isinstance(trajectory, Mapping):
        calls = trajectory.get("tool_calls")
    for call in calls or []:
        yield call if isinstance(call, Mapping) else vars(call)
