"""A warning for runs that learn nothing: group-relative advantages zero step after step."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path

#: Steps in a row without a group that has reward spread before the trainer warns.
FLAT_STEPS_WARNING = 3


class FlatRewardWatch:
    """Warns once when no group had reward spread for :data:`FLAT_STEPS_WARNING` steps."""

    def __init__(self, advantage: str, run_dir: Path, *, group_relative: bool) -> None:
        self.advantage = advantage
        self.group_relative = group_relative  # equal rewards in a group give no signal
        self.run_dir = run_dir
        self.flat_steps = 0  # steps in a row where no group had reward spread
        self.warned = False

    def check(self, metrics: Mapping[str, float], warn: Callable[[str], None]) -> None:
        """Look at one step's metrics; call ``warn`` with the advice the first time."""
        if not self.group_relative or self.warned:
            return
        if metrics.get("reward/groups_with_spread") != 0.0:
            self.flat_steps = 0
            return
        self.flat_steps += 1
        if self.flat_steps < FLAT_STEPS_WARNING:
            return
        low, high = metrics.get("reward/min"), metrics.get("reward/max")
        same = f" (every chain got {low:g})" if low is not None and low == high else ""
        warn(
            f"{self.flat_steps} steps in a row gave all chains of each task the same "
            f"reward{same}, so {self.advantage} advantages are zero and the model learns "
            "nothing; the tasks may be too hard or too easy for this model. Look at the "
            f"trajectories (agentfly view {self.run_dir}/trajectories/...), train on easier "
            "tasks (--where), raise rollout.n, or warm-start the model on solved chains "
            "(agentfly sft)"
        )
        self.warned = True
