"""The reward channel: what envs and tools report (a reward, a score, done), kept for rewards.

A tool reports by returning ``ToolResult(observation, info={"reward": x, "done": True, ...})``;
an env by the dict its ``reset`` returns (:mod:`agentfly_cli.rollout.opening`). Every call's
info is kept on its :class:`~agentfly_cli.trajectory.ToolCallRecord` (JSON-safe, without the
engine's own keys); a result whose info has ``reward``, ``done`` or ``score`` also becomes an
entry of :attr:`~agentfly_cli.trajectory.Trajectory.env_reports`, and ``done`` ends the chain
after that turn (finish ``env_done``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from pydantic_core import to_jsonable_python

from agentfly_cli.chat.parsers import ToolCall
from agentfly_cli.components.tools import ToolResult

#: keys of ``ToolResult.info`` that the engine writes for itself (not the tool's report)
ENGINE_KEYS = frozenset({"call_id", "latency_s", "raw"})
#: keys whose presence in a result's info makes it a report
REPORTING_KEYS = ("reward", "done", "score")


def jsonable(value: Any) -> Any:
    """``value`` as JSON data: pydantic's conversion, with ``repr`` for what it cannot convert
    and non-finite floats as strings (a record must stay valid JSON)."""
    try:
        converted = to_jsonable_python(value, fallback=repr)
    except Exception:  # a value whose own serialiser raises
        return repr(value)
    return _finite(converted)


def _finite(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, dict):
        return {str(k): _finite(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_finite(v) for v in value]
    return value


def call_info(info: Mapping[str, Any]) -> dict[str, Any]:
    """A call's ``ToolResult.info`` as the trajectory keeps it: JSON-safe, the engine's keys
    (:data:`ENGINE_KEYS`) left out."""
    return jsonable({k: v for k, v in info.items() if k not in ENGINE_KEYS})


def reward_value(value: Any) -> float | None:
    """A reported reward as a float; None for anything but a finite number."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(value) else None


def report(turn: int, source: str, info: Mapping[str, Any]) -> dict[str, Any]:
    """One env report: ``reward`` and ``done`` lifted out of ``info``, the rest kept."""
    done = info.get("done")
    return {
        "turn": turn,
        "source": source,
        "reward": reward_value(info.get("reward")),
        "done": done is True or (type(done) is int and done == 1),
        "info": {k: v for k, v in call_info(info).items() if k not in ("reward", "done")},
    }


def tool_reports(
    turn: int, calls: Sequence[ToolCall], results: Sequence[ToolResult]
) -> list[dict[str, Any]]:
    """The reports of one turn's call results, in call order (results without a reporting key
    report nothing)."""
    return [
        report(turn, f"tool:{call.name}", result.info)
        for call, result in zip(calls, results, strict=True)
        if any(key in result.info for key in REPORTING_KEYS)
    ]
