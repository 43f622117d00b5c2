"""Chaos: thousands of leases with failures injected everywhere; nothing leaks, nothing hangs,
and the pool's counters agree with the test's own counts.

Failures: errors in the factory, start, task reset, release reset, step, health check and close;
starts, resets, health checks and closes that hang past their timeouts (a hung close is killed);
envs that report themselves crashed; leases whose body raises; tasks cancelled at random points
(waiting, starting, resetting, in the body, releasing); acquires with deadlines too short to
wait out. With lease time limits on, leases also overstay or hang past the limit. Randomness
comes from one seeded ``random.Random``.
"""

from __future__ import annotations

import asyncio
import os
import random
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from agentfly_cli.envs.base import BaseEnv, EnvSpec
from agentfly_cli.envs.pool import AcquireTimeout, EnvPool, EnvStartError, LeaseExpired, PoolStats
from agentfly_cli.envs.providers.local import LocalEnvHandle, LocalProvider
from agentfly_cli.envs.providers.process import EnvProcessDied, ProcessProvider
from agentfly_cli.settings.envs import PoolLimits
from tests.helpers.envs_for_tests import make_proc_env

SEED = 20250611
HANG = 3600.0


class Injected(Exception):
    """A failure the chaos test injected."""


class BodyError(Exception):
    """The leasing code's own failure."""


@dataclass
class World:
    """The test's own books, kept by the envs and handles."""

    rng: random.Random
    envs: list[ChaosEnv] = field(default_factory=list)
    handles: list[CountingHandle] = field(default_factory=list)
    factory_failures: int = 0
    starts_ok: int = 0
    task_reset_calls: int = 0
    task_resets_ok: int = 0
    closes_failed: int = 0  # raised or hung (injected)
    closes_raised: int = 0
    closes_cut: int = 0  # cancelled at close_timeout: the hung ones, and any slowed by loop lag
    alive: int = 0
    peak: int = 0


class ChaosEnv(BaseEnv):
    def __init__(self, world: World) -> None:
        if world.rng.random() < 0.01:
            world.factory_failures += 1
            raise Injected("factory")
        self.world = world
        self.closes = 0
        world.envs.append(self)
        world.alive += 1
        world.peak = max(world.peak, world.alive)

    async def _pause(self) -> None:
        await asyncio.sleep(self.world.rng.uniform(0, 0.002))

    async def start(self) -> None:
        await self._pause()
        roll = self.world.rng.random()
        if roll < 0.04:
            raise Injected("start")
        if roll < 0.06:
            await asyncio.sleep(HANG)  # past start_timeout
        self.world.starts_ok += 1

    async def reset(self, task: Mapping[str, Any] | None = None) -> Any:
        await self._pause()
        roll = self.world.rng.random()
        if roll < 0.03:
            raise Injected("reset")
        if roll < 0.04:
            await asyncio.sleep(HANG)  # past reset_timeout
        if task is not None:
            self.world.task_resets_ok += 1
        return None

    async def step(self, action: Any) -> Any:
        await self._pause()
        if action == "hang":
            await asyncio.sleep(HANG)  # past the lease's time limit
        if self.world.rng.random() < 0.05:
            raise Injected("step")
        return action

    async def healthy(self) -> bool:
        roll = self.world.rng.random()
        if roll < 0.04:
            return False  # crashed
        if roll < 0.06:
            raise Injected("healthy")
        if roll < 0.065:
            await asyncio.sleep(HANG)  # past health_timeout
        return True

    async def close(self) -> None:
        self.closes += 1
        try:
            await self._pause()
            roll = self.world.rng.random()
            if roll < 0.04:
                self.world.closes_failed += 1
                self.world.closes_raised += 1
                raise Injected("close")
            if roll < 0.06:
                self.world.closes_failed += 1
                await asyncio.sleep(HANG)  # past close_timeout: killed
        except asyncio.CancelledError:
            self.world.closes_cut += 1
            raise
        finally:
            self.world.alive -= 1


class CountingHandle(LocalEnvHandle):
    """Counts the pool's calls synchronously, so that a call cancelled before it ran counts."""

    def __init__(self, env: ChaosEnv) -> None:
        super().__init__(env)
        self.kills = 0

    def reset(self, task: Mapping[str, Any] | None = None):  # type: ignore[override]
        if task is not None:
            self.env.world.task_reset_calls += 1
        return super().reset(task)

    async def kill(self) -> None:
        self.kills += 1
        await super().kill()


class CountingProvider(LocalProvider):
    def __init__(self, world: World) -> None:
        self.world = world

    async def create(self, spec: EnvSpec, options: Mapping[str, Any]) -> CountingHandle:
        handle = CountingHandle(spec.create(**options))
        self.world.handles.append(handle)
        return handle


@dataclass
class Outcomes:
    acquired: int = 0
    timeouts: int = 0
    start_errors: int = 0
    body_failures: int = 0  # leases left by an exception or a cancellation in the body
    clean_exits: int = 0
    cancels_requested: int = 0
    cancelled: int = 0
    finished: int = 0  # lease tasks that returned (whatever the lease's outcome)
    waited_with_room: list[str] = field(default_factory=list)
    waited_with_idle: list[str] = field(default_factory=list)
    slow_acquires: list[float] = field(default_factory=list)
    unexpected: list[BaseException] = field(default_factory=list)


def test_chaos_thousands_of_leases_leak_nothing():
    rng = random.Random(SEED)
    world = World(rng)
    settings = PoolLimits(
        pool_max=8,
        warm_size=2,
        start_timeout=0.02,
        idle_ttl=0.05,
        acquire_timeout=0.5,
        reset_timeout=0.02,
        health_timeout=0.02,
        close_timeout=0.02,
    )
    spec = EnvSpec(name="chaos", factory=lambda: ChaosEnv(world), pool_max=8)
    leases, workers, burst = 4800, 32, 8
    # the longest an acquire may take past its own deadline: starting and resetting an env in
    # the slot it got, plus slack for a loaded machine
    beyond = settings.start_timeout + settings.reset_timeout + 2.0
    out = Outcomes()

    async def one_lease(number: int) -> None:
        loop = asyncio.get_running_loop()
        timeout = rng.choice([0.0005, 0.003, 0.02, 0.2, None, None])
        limit = (settings.acquire_timeout if timeout is None else timeout) + beyond
        began = loop.time()
        entered = False
        try:
            async with pool.lease({"n": number}, timeout=timeout) as handle:
                entered = True
                out.acquired += 1
                waited = loop.time() - began
                if waited > limit:
                    out.slow_acquires.append(waited)
                try:
                    for _ in range(rng.randint(0, 3)):
                        try:
                            await handle.env.step(number)
                        except Injected:
                            if rng.random() < 0.5:
                                raise
                        await asyncio.sleep(rng.uniform(0, 0.002))
                    if rng.random() < 0.05:
                        raise BodyError("the leasing code failed")
                except BaseException:
                    out.body_failures += 1
                    raise
            out.clean_exits += 1
        except (Injected, BodyError):
            pass
        except AcquireTimeout:
            out.timeouts += 1
        except EnvStartError:
            out.start_errors += 1
        finally:
            if not entered and loop.time() - began > limit:
                out.slow_acquires.append(loop.time() - began)
        out.finished += 1

    lull = asyncio.Event()  # binds to the running loop when first awaited
    arrived = 0

    async def quiet_spell() -> None:
        """Half-way through, all workers stop for a while: the reaper closes idle envs."""
        nonlocal arrived
        arrived += 1
        if arrived == workers:
            # a burst fills the pool, then nobody leases: the reaper closes all but warm_size
            await asyncio.gather(*(one_lease(-1) for _ in range(burst)))
            await asyncio.sleep(4 * settings.idle_ttl)
            lull.set()
        await lull.wait()

    async def worker(count: int) -> None:
        loop = asyncio.get_running_loop()
        for number in range(count):
            if number == count // 2:
                await quiet_spell()
            task = asyncio.create_task(one_lease(number))
            cancel = rng.random() < 0.1
            if cancel:
                out.cancels_requested += 1
                loop.call_later(rng.uniform(0, 0.006), task.cancel)
            await asyncio.wait([task])
            if task.cancelled():
                out.cancelled += 1
                if not cancel:  # a cancellation that leaked out of the pool
                    out.unexpected.append(asyncio.CancelledError("nobody cancelled this lease"))
            elif task.exception() is not None:
                out.unexpected.append(task.exception())
            peak_now = pool.live()
            if peak_now > settings.pool_max:
                out.unexpected.append(AssertionError(f"{peak_now} envs alive"))

    async def watch() -> None:
        """Nobody may wait while there is room for an env or an idle env to take."""
        while True:
            await asyncio.sleep(0.0005)
            snapshot = pool.stats()
            if snapshot.waiting and pool.live() < settings.pool_max:
                out.waited_with_room.append(f"{pool.live()} alive: {snapshot}")
            if snapshot.waiting and snapshot.idle:
                out.waited_with_idle.append(str(snapshot))

    async def main() -> PoolStats:
        nonlocal pool
        pool = EnvPool(spec, CountingProvider(world), settings)
        await pool.start()
        watcher = asyncio.create_task(watch())
        per_worker = leases // workers
        await asyncio.gather(*(worker(per_worker) for _ in range(workers)))
        watcher.cancel()
        before_close = pool.stats()
        assert before_close.in_use == 0
        await pool.close()
        return before_close

    pool: EnvPool = None  # type: ignore[assignment]
    started = time.monotonic()
    before_close = asyncio.run(asyncio.wait_for(main(), 120))
    elapsed = time.monotonic() - started
    stats = pool.stats()

    # nothing went wrong that was not injected, nothing hung
    assert out.unexpected == [], out.unexpected[:5]
    assert out.slow_acquires == [], out.slow_acquires[:5]
    assert out.finished + out.cancelled == (leases // workers) * workers + burst
    assert out.waited_with_room == [] and out.waited_with_idle == []
    # the chaos really happened
    assert out.acquired > 1000 and out.timeouts > 10 and out.start_errors > 10
    assert out.cancelled > 10 and out.body_failures > 50 and world.closes_failed > 10
    assert stats.restarts > 10 and stats.reaped > 0 and stats.killed > 50

    # zero leaked envs: every env made was closed exactly once, hung closes were killed
    assert world.alive == 0 and pool.live() == 0
    assert all(env.closes == 1 for env in world.envs)
    assert world.peak <= settings.pool_max
    # a close that raised or was cut off is killed, no other (under CPU load a close slowed past
    # the 20 ms close_timeout is cut too, so count the cuts rather than the injected hangs)
    hung = world.closes_failed - world.closes_raised
    assert world.closes_cut >= hung
    assert sum(h.kills for h in world.handles) == world.closes_raised + world.closes_cut
    assert all(h.kills <= 1 for h in world.handles)

    # the pool's counters add up and agree with ours
    assert (stats.in_use, stats.idle, stats.waiting, stats.starting) == (0, 0, 0, 0)
    assert stats.created == len(world.envs) + world.factory_failures
    assert stats.created == stats.closed
    assert stats.started == world.starts_ok
    task_reset_failures = world.task_reset_calls - world.task_resets_ok
    start_failures = len(world.envs) - world.starts_ok + world.factory_failures
    assert stats.failed == start_failures + task_reset_failures
    assert stats.acquired == out.acquired
    assert stats.timeouts == out.timeouts
    assert stats.acquired == stats.released + stats.restarts + stats.killed + stats.abandoned
    assert stats.abandoned == 0 and before_close.abandoned == 0
    # a lease whose body returned was checked on release: reused or replaced; a killed one
    # left by an exception or a cancellation, or was cancelled while it was checked
    assert stats.released + stats.restarts == out.clean_exits
    assert out.body_failures <= stats.killed <= out.body_failures + out.cancels_requested
    assert elapsed < 60


def test_chaos_with_lease_time_limits_leaks_nothing():
    """Leases overstay or hang past ``lease_timeout`` among all the other failures: each is
    taken back exactly once, its holder sees LeaseExpired, and every counter still adds up."""
    rng = random.Random(SEED + 2)
    world = World(rng)
    settings = PoolLimits(
        pool_max=6,
        warm_size=2,
        start_timeout=0.02,
        idle_ttl=0.05,
        acquire_timeout=0.5,
        reset_timeout=0.02,
        health_timeout=0.02,
        close_timeout=0.02,
        lease_timeout=0.015,
    )
    spec = EnvSpec(name="chaos", factory=lambda: ChaosEnv(world), pool_max=6)
    leases, workers = 1600, 24
    seen = {"acquired": 0, "expired": 0, "clean": 0, "body": 0, "cancelled": 0}
    unexpected: list[BaseException] = []

    async def one_lease(number: int) -> None:
        try:
            async with pool.lease({"n": number}, timeout=rng.choice([0.003, 0.05, None])) as env:
                seen["acquired"] += 1
                roll = rng.random()
                try:
                    if roll < 0.15:  # overstays, then comes back to its env
                        await asyncio.sleep(settings.lease_timeout * rng.uniform(1.2, 2))
                        await env.env.step(number)
                    elif roll < 0.25:  # hangs inside a call past the limit
                        await env.env.step("hang")
                    elif roll < 0.3:
                        raise BodyError("the leasing code failed")
                    else:
                        await env.env.step(number)
                except LeaseExpired as exc:
                    assert "lease_timeout" in str(exc)
                    seen["expired"] += 1
                    raise
                except BaseException:
                    seen["body"] += 1
                    raise
            seen["clean"] += 1
        except (Injected, BodyError, LeaseExpired, AcquireTimeout, EnvStartError):
            pass

    async def worker(count: int) -> None:
        loop = asyncio.get_running_loop()
        for number in range(count):
            task = asyncio.create_task(one_lease(number))
            if rng.random() < 0.1:
                loop.call_later(rng.uniform(0, 0.02), task.cancel)
            await asyncio.wait([task])
            if task.cancelled():
                seen["cancelled"] += 1
            elif task.exception() is not None:
                unexpected.append(task.exception())
            if pool.live() > settings.pool_max:
                unexpected.append(AssertionError(f"{pool.live()} envs alive"))

    async def main() -> None:
        nonlocal pool
        pool = EnvPool(spec, CountingProvider(world), settings)
        await pool.start()
        await asyncio.gather(*(worker(leases // workers) for _ in range(workers)))
        assert pool.stats().in_use == 0
        await pool.close()

    pool: EnvPool = None  # type: ignore[assignment]
    asyncio.run(asyncio.wait_for(main(), 120))
    stats = pool.stats()
    assert unexpected == [], unexpected[:5]
    assert seen["acquired"] > 500 and seen["expired"] > 50 and seen["cancelled"] > 10
    # every expiry was seen by its holder at most once; an unseen one left without calling
    assert seen["expired"] <= stats.expired
    assert stats.acquired == seen["acquired"]
    assert stats.acquired == (
        stats.released + stats.restarts + stats.killed + stats.abandoned + stats.expired
    )
    assert stats.released + stats.restarts <= seen["clean"]
    assert seen["clean"] <= stats.released + stats.restarts + stats.expired
    # nothing leaked: every env closed exactly once, never more than pool_max alive
    assert (stats.in_use, stats.idle, stats.waiting, stats.starting) == (0, 0, 0, 0)
    assert world.alive == 0 and pool.live() == 0 and world.peak <= settings.pool_max
    assert all(env.closes == 1 for env in world.envs)
    assert stats.created == stats.closed == len(world.envs) + world.factory_failures


# -- the subprocess provider -------------------------------------------------------------------
class RecordingProcessProvider(ProcessProvider):
    def __init__(self) -> None:
        self.handles: list[Any] = []
        self.unspawned: list[Any] = []  # starts cancelled before their process existed

    async def create(self, spec: EnvSpec, options: Mapping[str, Any]):
        handle = await super().create(spec, options)
        self.handles.append(handle)
        start = handle.start

        async def recorded_start() -> None:
            try:
                await start()
            except asyncio.CancelledError:
                if handle.pid is None:
                    self.unspawned.append(handle)
                raise

        handle.start = recorded_start
        return handle


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, ProcessLookupError):
        return False


def test_chaos_on_the_subprocess_provider_leaves_no_process():
    rng = random.Random(SEED + 1)
    provider = RecordingProcessProvider()
    spec = EnvSpec(name="proc-chaos", factory=make_proc_env, pool_max=4)
    settings = PoolLimits(
        pool_max=4,
        warm_size=2,
        start_timeout=30,
        acquire_timeout=60,
        reset_timeout=10,
        health_timeout=5,
        close_timeout=5,
    )
    leases, workers = 200, 8
    seen: dict[str, int] = {
        "acquired": 0,
        "crashed": 0,
        "hung": 0,
        "failed_resets": 0,
        "body": 0,
        "cancelled": 0,
    }
    unexpected: list[BaseException] = []

    async def one_lease() -> None:
        task = {"crash_on_reset": True} if rng.random() < 0.03 else {"q": 1}
        try:
            async with pool.lease(task) as handle:
                seen["acquired"] += 1
                assert await handle.env.step("inc") == 1  # reset on acquire: fresh state
                roll = rng.random()
                if roll < 0.06:
                    try:
                        await handle.env.step("crash")
                    except EnvProcessDied as exc:
                        assert "exit code 3" in str(exc)
                        seen["crashed"] += 1
                elif roll < 0.1:
                    try:
                        await asyncio.wait_for(handle.env.step("hang"), 0.02)
                    except TimeoutError:
                        seen["hung"] += 1
                elif roll < 0.15:
                    seen["body"] += 1
                    raise BodyError("the leasing code failed")
                else:
                    assert await handle.env.step("inc") == 2
        except BodyError:
            pass
        except EnvStartError as exc:
            assert "EnvProcessDied" in str(exc) and "exit code 4" in str(exc)
            seen["failed_resets"] += 1

    async def worker(count: int) -> None:
        loop = asyncio.get_running_loop()
        for _ in range(count):
            task = asyncio.create_task(one_lease())
            if rng.random() < 0.05:
                loop.call_later(rng.uniform(0, 0.05), task.cancel)
            await asyncio.wait([task])
            if task.cancelled():
                seen["cancelled"] += 1
            elif task.exception() is not None:
                unexpected.append(task.exception())

    async def main() -> None:
        nonlocal pool
        pool = EnvPool(spec, provider, settings)
        await pool.start()
        await asyncio.gather(*(worker(leases // workers) for _ in range(workers)))
        await pool.close()

    pool: EnvPool = None  # type: ignore[assignment]
    try:
        asyncio.run(asyncio.wait_for(main(), 150))
        assert unexpected == [], unexpected[:5]
        assert seen["acquired"] > 100 and seen["crashed"] > 0 and seen["hung"] > 0
        stats = pool.stats()
        assert stats.created == stats.closed == len(provider.handles)
        assert stats.acquired == seen["acquired"]
        assert stats.acquired == stats.released + stats.restarts + stats.killed
        assert stats.restarts + stats.killed >= seen["crashed"] + seen["hung"]
        assert (stats.in_use, stats.idle, stats.starting) == (0, 0, 0)
        # a start cancelled while its process was being spawned leaves a handle without a pid
        # (asyncio kills such a child itself); every other handle had a process to check
        pids = [h.pid for h in provider.handles if h.pid is not None]
        without = [h for h in provider.handles if h.pid is None]
        assert without == provider.unspawned and len(pids) > 10
        deadline = time.monotonic() + 10
        while any(_alive(pid) for pid in pids):
            assert time.monotonic() < deadline, [p for p in pids if _alive(p)]
            time.sleep(0.05)
    finally:
        for handle in provider.handles:  # never leave processes behind, even on failure
            if handle.pid is not None and _alive(handle.pid):
                os.kill(handle.pid, 9)
