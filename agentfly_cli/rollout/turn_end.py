"""How a turn ends: whether the chain stops after it, and why.

After the tools of assistant turn N ran (or the model answered with user turns still to come),
the chain stops when a terminal tool succeeded (``terminal_tool``: its observation is the
prediction), when an env or a tool reported ``done`` on the reward channel in that turn
(``env_done``), when the error budget is spent (``errors``), or at the last turn
(``max_turns``), in that order. Otherwise it goes on.
"""

from __future__ import annotations

from collections.abc import Sequence

from agentfly_cli.components.tools import ToolResult
from agentfly_cli.settings.rollout import RolloutSettings
from agentfly_cli.trajectory import Trajectory


def finish_after_turn(
    trajectory: Trajectory,
    turn: int,
    results: Sequence[ToolResult],
    errors: int,
    settings: RolloutSettings,
) -> None:
    """Set the trajectory's finish reason (and a terminal tool's prediction) when the chain
    stops after ``turn``; ``errors``: the error observations so far."""
    terminal = next((r for r in results if r.terminal and r.ok), None)
    if terminal is not None:
        trajectory.prediction = terminal.observation
        trajectory.finish_reason = "terminal_tool"
    elif any(report["done"] for report in trajectory.env_reports if report["turn"] == turn):
        trajectory.finish_reason = "env_done"
    elif errors >= settings.max_errors:
        trajectory.finish_reason = "errors"
    elif turn == settings.max_turns - 1:
        trajectory.finish_reason = "max_turns"
