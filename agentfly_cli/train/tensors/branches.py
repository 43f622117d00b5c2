"""An agent episode's branches as training data.

An agent episode (one gateway session) may hold several segments: a harness that compacts its
history, or runs a sub-agent, starts a new one. The last turn of a segment that the episode
goes on after is a **branch end**: the summary a compaction continues from, or a sub-agent's
answer. ``trainer.algorithm.branch_credit`` says what it gets: ``episode`` (the default) trains
it with the episode's advantage like any turn, since what comes after it (the whole rest of
the episode) is what that advantage scores; ``none`` leaves it untrained.
"""

from __future__ import annotations

import dataclasses
from collections import defaultdict
from collections.abc import Hashable, Sequence

from agentfly_cli.trajectory import Trajectory


def episode_key(trajectory: Trajectory) -> Hashable | None:
    """The agent episode a trajectory is a segment of (None: it is a chain of its own)."""
    return trajectory.meta.get("episode")


def branch_ends(trajectories: Sequence[Trajectory]) -> list[set[int]]:
    """For each trajectory, the indices (into its ``turns``) of its branch ends: the last
    assistant turn of a segment when another segment of its episode has a later one. Time is
    the turns' ``episode_turn`` (the gateway's record order) where each last turn has one,
    else the segments' order (``meta["segment"]``)."""
    rows_of: dict[Hashable, list[int]] = defaultdict(list)
    for row, trajectory in enumerate(trajectories):
        if (key := episode_key(trajectory)) is not None:
            rows_of[key].append(row)
    out: list[set[int]] = [set() for _ in trajectories]
    for rows in rows_of.values():
        for row, turn in _ends_before_the_last(trajectories, rows):
            out[row].add(turn)
    return out


def _ends_before_the_last(trajectories: Sequence[Trajectory], rows: list[int]):
    """``(row, turn index)`` of the last assistant turn of each of one episode's segments
    (``rows``) but the one that ends last."""
    last = {}
    for row in rows:
        turns = trajectories[row].turns
        assistant = [k for k, turn in enumerate(turns) if turn.role == "assistant"]
        if assistant:
            last[row] = assistant[-1]
    timed = all(trajectories[r].turns[k].episode_turn is not None for r, k in last.items())
    times = {
        row: trajectories[row].turns[k].episode_turn
        if timed
        else trajectories[row].meta.get("segment", row)
        for row, k in last.items()
    }
    end = max(times.values(), default=None)
    return [(row, k) for row, k in last.items() if times[row] < end]


def credited(
    trajectories: Sequence[Trajectory], branch_credit: str, metrics: dict[str, float]
) -> list[Trajectory]:
    """The trajectories as trained: with ``branch_credit: none``, a copy of each that has
    branch ends whose tokens are off the loss mask (and their logprobs dropped); the records
    themselves are left as sampled. ``metrics``: ``train/branch_ends`` (agent runs)."""
    ends = branch_ends(trajectories)
    if any(episode_key(t) is not None for t in trajectories):
        metrics["train/branch_ends"] = float(sum(len(e) for e in ends))
    if branch_credit == "episode":
        return list(trajectories)
    out = []
    for trajectory, turns in zip(trajectories, ends, strict=True):
        if not turns:
            out.append(trajectory)
            continue
        mask, logprobs = list(trajectory.loss_mask), list(trajectory.logprobs)
        for k in turns:
            turn = trajectory.turns[k]
            mask[turn.start : turn.end] = [0] * (turn.end - turn.start)
            logprobs[turn.start : turn.end] = [None] * (turn.end - turn.start)
        out.append(dataclasses.replace(trajectory, loss_mask=mask, logprobs=logprobs))
    return out
