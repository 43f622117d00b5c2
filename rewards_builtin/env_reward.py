"""``env_reward``: the environment's own score, as its envs and tools reported it.

The reward channel (docs/rewards.md, "What a reward receives") keeps what an env's reset and
each tool result reported in ``trajectory.env_reports``; this reward is their sum,
``trajectory.env_reward``, or 0.0 when nothing reported a reward. The answer is not read, so
chains that end without one (``env_done``, ``max_turns``) are scored the same way.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from agentfly_cli.components.rewards import reward


def reports_of(trajectory: Any) -> list[Mapping[str, Any]]:
    """The env reports of a :class:`Trajectory` or of its saved dict (none for None)."""
    reports = getattr(trajectory, "env_reports", None)
    if reports is None and isinstance(trajectory, Mapping):
        reports = trajectory.get("env_reports")
    return [r for r in reports or [] if isinstance(r, Mapping)]


@reward
def env_reward(trajectory) -> dict:
    """The sum of the rewards the envs and tools reported (0.0 when none did)."""
    reports = reports_of(trajectory)
    rewards = [r["reward"] for r in reports if isinstance(r.get("reward"), (int, float))]
    return {
        "reward": float(sum(rewards)) if rewards else 0.0,
        "reports": len(reports),
        "rewarded": len(rewards),
        "done": any(r.get("done") is True for r in reports),
    }
