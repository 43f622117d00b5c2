"""Shared helpers of the env pool tests: a tracked env, settling checks, a bounded runner."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping
from typing import Any

from agentfly_cli.envs.base import BaseEnv, EnvSpec
from agentfly_cli.envs.pool import EnvPool
from agentfly_cli.envs.providers.local import LocalProvider
from agentfly_cli.settings.envs import PoolLimits


def run(coro, limit: float = 30.0):
    """Run a test coroutine; a hang fails the test instead of stalling the suite."""
    return asyncio.run(asyncio.wait_for(coro, limit))


class Boom(RuntimeError):
    """An error the tests inject."""


class Tracker:
    """Makes :class:`TrackedEnv` instances and counts those alive (made, close not finished).

    The attributes below steer the envs' behaviour and may change while a test runs.
    """

    def __init__(self) -> None:
        self.envs: list[TrackedEnv] = []
        self.alive = 0
        self.peak = 0
        self.start_delay = 0.0
        self.starting = 0  # env starts in progress, and the most at once
        self.peak_starting = 0
        self.hang_start = False
        self.fail_start: set[int] = set()  # instance numbers whose start raises
        self.fail_task_reset = False
        self.fail_release_reset = False
        self.task_reset_gate: asyncio.Event | None = None
        self.healthy: Any = True  # True, False, "raise" or "hang"
        self.close_delay = 0.0
        self.on_close: Any = None

    def factory(self) -> TrackedEnv:
        env = TrackedEnv(self, len(self.envs))
        self.envs.append(env)
        self.alive += 1
        self.peak = max(self.peak, self.alive)
        return env

    def spec(self, **limits: Any) -> EnvSpec:
        return EnvSpec(name="tracked", factory=self.factory, **limits)

    def pool(self, **settings: Any) -> EnvPool:
        return EnvPool(self.spec(), LocalProvider(), PoolLimits(**settings))

    @property
    def closes(self) -> int:
        return sum(env.closes for env in self.envs)


class TrackedEnv(BaseEnv):
    def __init__(self, tracker: Tracker, number: int) -> None:
        self.tracker = tracker
        self.number = number
        self.calls: list[Any] = []
        self.closes = 0
        self.sick = False

    async def start(self) -> None:
        self.calls.append("start")
        tracker = self.tracker
        tracker.starting += 1
        tracker.peak_starting = max(tracker.peak_starting, tracker.starting)
        try:
            if tracker.start_delay:
                await asyncio.sleep(tracker.start_delay)
        finally:
            tracker.starting -= 1
        if tracker.hang_start:
            await asyncio.sleep(3600)
        if self.number in tracker.fail_start:
            raise Boom(f"env {self.number} cannot start")

    async def reset(self, task: Mapping[str, Any] | None = None) -> Any:
        self.calls.append(("reset", None if task is None else dict(task)))
        if task is not None:
            if self.tracker.task_reset_gate is not None:
                await self.tracker.task_reset_gate.wait()
            if self.tracker.fail_task_reset:
                raise Boom("bad task")
        elif self.tracker.fail_release_reset:
            raise Boom("cannot reset")
        return self.number

    async def step(self, action: Any) -> Any:
        self.calls.append(("step", action))
        return self.number

    async def healthy(self) -> bool:
        self.calls.append("healthy")
        if self.tracker.healthy == "raise":
            raise Boom("health check failed")
        if self.tracker.healthy == "hang":
            await asyncio.sleep(3600)
        return bool(self.tracker.healthy) and not self.sick

    async def close(self) -> None:
        self.closes += 1
        self.calls.append("close")
        try:
            if self.tracker.on_close is not None:
                self.tracker.on_close(self)
            if self.tracker.close_delay:
                await asyncio.sleep(self.tracker.close_delay)
        finally:
            self.tracker.alive -= 1


async def eventually(check, within: float = 5.0) -> None:
    """Wait until ``check()`` is true (polling); fail after ``within`` seconds."""
    deadline = time.monotonic() + within
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached in time")
        await asyncio.sleep(0.005)


def assert_settled(pool: EnvPool, tracker: Tracker | None = None, task_reset_failures: int = 0):
    """The invariants of a closed pool: nothing alive, every counter accounted for."""
    stats = pool.stats()
    assert pool.live() == 0
    assert (stats.in_use, stats.idle, stats.waiting, stats.starting) == (0, 0, 0, 0)
    assert stats.created == stats.closed
    # every start attempt either started or failed; ``failed`` also counts failed task resets
    assert stats.created == stats.started + stats.failed - task_reset_failures
    # every acquired env came back exactly one way
    assert stats.acquired == (
        stats.released + stats.restarts + stats.killed + stats.abandoned + stats.expired
    )
    if tracker is not None:
        assert tracker.alive == 0
        assert all(env.closes == 1 for env in tracker.envs), [e.closes for e in tracker.envs]
        assert len(tracker.envs) == stats.created
