"""The failure policy: chains that ended for an infrastructure reason are not rewards.

With ``trainer.algorithm.exclude_infra_failures`` (the default) a chain whose end
:func:`~agentfly_cli.rollout.infra_failures.infra_failure` blames on the infrastructure leaves
the step before advantages are computed, so it is in neither its group's statistics nor the
loss; an agent episode goes as a whole when any of its segments failed so. A group that lost
chains this way and keeps fewer episodes than ``min_group_size`` is dropped (its statistics
would rest on one sample). Metrics: ``infra/failures/<cause>`` (episodes, counted also when
exclusion is off) and ``infra/dropped_groups``.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Hashable

from agentfly_cli.rollout.infra_failures import INFRA_CAUSES, infra_failure
from agentfly_cli.settings.algorithm import AlgorithmSettings
from agentfly_cli.train.tensors.branches import episode_key
from agentfly_cli.trajectory import Trajectory


def _episode(row: int, trajectory: Trajectory) -> Hashable:
    key = episode_key(trajectory)
    return ("row", row) if key is None else ("episode", key)


def without_infra_failures(
    trajectories: list[Trajectory], algo: AlgorithmSettings, metrics: dict[str, float]
) -> list[Trajectory]:
    """``trajectories`` less the infrastructure failures and the groups they left too small
    (as the settings say); the counts go to ``metrics``."""
    episodes = [_episode(row, t) for row, t in enumerate(trajectories)]
    cause_of: dict[Hashable, str] = {}
    for episode, trajectory in zip(episodes, trajectories, strict=True):
        cause = infra_failure(trajectory)
        if cause is not None:
            cause_of.setdefault(episode, cause)
    for cause in INFRA_CAUSES:
        metrics[f"infra/failures/{cause}"] = 0.0
    for cause in cause_of.values():
        metrics[f"infra/failures/{cause}"] += 1.0
    metrics["infra/dropped_groups"] = 0.0
    if not algo.exclude_infra_failures or not cause_of:
        return trajectories
    kept: dict[str, set[Hashable]] = defaultdict(set)
    hit: set[str] = set()
    for episode, trajectory in zip(episodes, trajectories, strict=True):
        if episode in cause_of:
            hit.add(trajectory.group_id)
        else:
            kept[trajectory.group_id].add(episode)
    dropped = {g for g in hit if len(kept[g]) < algo.min_group_size}
    metrics["infra/dropped_groups"] = float(len(dropped))
    return [
        t
        for episode, t in zip(episodes, trajectories, strict=True)
        if episode not in cause_of and t.group_id not in dropped
    ]
