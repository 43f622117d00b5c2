"""What a source of steps hands ``Trainer.train_on`` and what it gets back: one step's
rollouts in, the step's metrics out."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from agentfly_cli.telemetry.metrics import StepTimer
from agentfly_cli.trajectory import Trajectory


@dataclass
class StepRollouts:
    """One step's trajectories, rolled out by a source of steps (:mod:`.sync`, :mod:`.async_steps`).

    ``metrics`` holds the rollouts' metrics (and the source's own, such as staleness); the
    update adds to it. ``timer`` started with the step; the source timed its rollout (or its
    wait for rollouts) in it. ``update_in_thread``: the update runs in a worker thread, so the
    event loop goes on driving rollouts meanwhile (async). ``late_metrics``: the source's
    gauges, read after the weight sync.
    """

    step: int
    trajectories: list[Trajectory]
    metrics: dict[str, float]
    timer: StepTimer
    update_in_thread: bool = False
    late_metrics: Callable[[], dict[str, float]] | None = None


@dataclass
class StepResult:
    """A trained step: its number, its metrics (as logged) and whether this rank updated."""

    step: int
    metrics: dict[str, float]
    updated: bool
