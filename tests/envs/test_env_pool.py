"""Env pools: caps, FIFO waits with deadlines, warm starts, release checks, kills, the reaper,
shutdown and stats."""

from __future__ import annotations

import asyncio
import time

import pytest

from agentfly_cli.envs.pool import AcquireTimeout, EnvStartError, PoolClosed
from agentfly_cli.settings.envs import PoolLimits
from tests.helpers.pool_helpers import Boom, Tracker, assert_settled, eventually, run


# -- caps and waiting -------------------------------------------------------------------------
def test_cap_is_respected_under_load():
    tracker = Tracker()
    tracker.start_delay = 0.005

    async def go():
        pool = tracker.pool(pool_max=3, acquire_timeout=10)

        async def one(i):
            async with pool.lease({"i": i}) as handle:
                assert pool.live() <= 3
                await handle.env.step(i)
                await asyncio.sleep(0.01)

        await asyncio.gather(*(one(i) for i in range(20)))
        assert tracker.peak == 3
        stats = pool.stats()
        assert stats.acquired == 20 and stats.released == 20 and stats.created == 3
        await pool.close()
        assert_settled(pool, tracker)

    run(go())


def test_warm_start_racing_acquires_respects_cap():
    """Acquires that run while ``start()`` warms the pool never push it past ``pool_max``."""
    tracker = Tracker()
    tracker.start_delay = 0.01

    async def go():
        pool = tracker.pool(pool_max=2, warm_size=2, acquire_timeout=10)

        async def hold():
            async with pool.lease():
                await asyncio.sleep(0.02)

        await asyncio.gather(pool.start(), hold(), hold(), hold())
        assert tracker.peak <= 2
        await pool.close()
        assert_settled(pool, tracker)

    run(go())


def test_replacing_a_dead_env_waits_for_its_slot():
    """A killed env still counts against the cap while it closes; the warm replacement starts
    once it is gone."""
    tracker = Tracker()
    tracker.close_delay = 0.1

    async def go():
        pool = tracker.pool(pool_max=2, warm_size=2)
        assert await pool.start() == 2
        with pytest.raises(Boom):
            async with pool.lease(), pool.lease():
                raise Boom("trajectory crashed")
        # both leases were killed; their replacements must wait for the slots
        assert pool.live() <= 2
        await asyncio.sleep(0.05)
        assert tracker.peak <= 2
        await eventually(lambda: pool.stats().idle == 2)
        assert tracker.peak == 2
        assert pool.stats().killed == 2
        await pool.close()
        assert_settled(pool, tracker)

    run(go())


def test_waiters_are_served_in_fifo_order_by_handoff():
    tracker = Tracker()
    order: list[int] = []

    async def go():
        pool = tracker.pool(pool_max=1, acquire_timeout=10)
        holder = await pool.acquire()

        async def waiter(i):
            async with pool.lease() as handle:
                order.append(i)
                assert handle is holder  # handed over, not restarted
                await asyncio.sleep(0.001)

        tasks = []
        for i in range(4):
            tasks.append(asyncio.create_task(waiter(i)))
            await asyncio.sleep(0.005)
        assert pool.stats().waiting == 4
        await pool.release(holder)
        await asyncio.gather(*tasks)
        assert order == [0, 1, 2, 3]
        assert len(tracker.envs) == 1
        await pool.close()
        assert_settled(pool, tracker)

    run(go())


def test_a_waiter_woken_for_room_is_not_overtaken_by_a_newcomer():
    """When a dead env's slot frees up, the first waiter gets it, not an acquire that came
    later."""
    tracker = Tracker()
    order: list[str] = []

    async def go():
        pool = tracker.pool(pool_max=1, acquire_timeout=10)

        async def user(name):
            async with pool.lease():
                order.append(name)
                await asyncio.sleep(0.01)

        async def newcomer():
            while pool.stats().closed == 0:  # acquire right after the slot frees
                await asyncio.sleep(0)
            await user("newcomer")

        holder = await pool.acquire()
        first = asyncio.create_task(user("waiter"))
        await asyncio.sleep(0.01)
        late = asyncio.create_task(newcomer())
        await pool.release(holder, broken=True)
        await asyncio.gather(first, late)
        assert order == ["waiter", "newcomer"]
        await pool.close()
        assert_settled(pool, tracker)

    run(go())


def test_acquire_timeout_is_a_clear_error_within_the_deadline():
    tracker = Tracker()

    async def go():
        pool = tracker.pool(pool_max=1, acquire_timeout=0.2)
        async with pool.lease():
            waiter = asyncio.create_task(pool.acquire())
            await asyncio.sleep(0.05)
            assert pool.stats().waiting == 1
            started = time.monotonic()
            with pytest.raises(AcquireTimeout) as caught:
                await waiter
            elapsed = time.monotonic() - started
            assert elapsed < 1.5
            started = time.monotonic()
            with pytest.raises(TimeoutError):  # AcquireTimeout is a TimeoutError too
                await pool.acquire(timeout=0.1)
            assert 0.09 <= time.monotonic() - started < 1.5
        message = str(caught.value)
        assert "'tracked'" in message and "0.2 s" in message and "pool_max" in message
        stats = pool.stats()
        assert stats.timeouts == 2 and stats.waiting == 0 and stats.acquired == 1
        await pool.close()
        assert_settled(pool, tracker)

    run(go())


# -- warm starts -------------------------------------------------------------------------------
def test_warm_start_is_parallel():
    tracker = Tracker()
    tracker.start_delay = 0.2

    async def go():
        pool = tracker.pool(pool_max=4, warm_size=4)
        assert await pool.start() == 4
        assert tracker.peak_starting == 4  # all four at once (one after another: 1)
        stats = pool.stats()
        assert stats.idle == 4 and stats.started == 4
        await pool.close()
        assert_settled(pool, tracker)

    run(go())


def test_warm_start_tolerates_some_failures_and_raises_when_all_fail():
    tracker = Tracker()
    tracker.fail_start = {1, 3}

    async def go():
        pool = tracker.pool(pool_max=4, warm_size=4)
        assert await pool.start() == 2
        stats = pool.stats()
        assert stats.idle == 2 and stats.failed == 2
        await pool.close()
        assert_settled(pool, tracker)

        everything = Tracker()
        everything.fail_start = {0, 1, 2}
        pool = everything.pool(pool_max=3, warm_size=3)
        with pytest.raises(EnvStartError, match="failed to start: Boom"):
            await pool.start()
        await pool.close()
        assert_settled(pool, everything)
        assert pool.stats().failed == 3

    run(go())


# -- release checks ----------------------------------------------------------------------------
def test_release_resets_and_health_checks_then_reuses():
    tracker = Tracker()

    async def go():
        pool = tracker.pool(pool_max=2)
        async with pool.lease({"q": 1}) as handle:
            assert await handle.env.step("x") == 0
        env = tracker.envs[0]
        assert env.calls == [
            "start",
            ("reset", {"q": 1}),
            ("step", "x"),
            ("reset", None),
            "healthy",
        ]
        async with pool.lease({"q": 2}) as again:
            assert again.env is env
        assert pool.stats().released == 2 and len(tracker.envs) == 1
        await pool.close()
        assert_settled(pool, tracker)

    run(go())


@pytest.mark.parametrize("failure", ["unhealthy", "health_raises", "health_hangs", "reset_raises"])
def test_a_failing_release_check_closes_and_replaces_the_env(failure):
    tracker = Tracker()

    async def go():
        pool = tracker.pool(pool_max=2, warm_size=1, health_timeout=0.05)
        await pool.start()
        async with pool.lease() as handle:
            first = handle.env
            if failure == "unhealthy":
                first.sick = True
            elif failure == "health_raises":
                tracker.healthy = "raise"
            elif failure == "health_hangs":
                tracker.healthy = "hang"
            else:
                tracker.fail_release_reset = True
        tracker.healthy, tracker.fail_release_reset = True, False
        stats = pool.stats()
        assert stats.restarts == 1 and stats.released == 0
        await eventually(lambda: first.closes == 1 and pool.stats().idle == 1)
        async with pool.lease() as handle:
            assert handle.env is not first  # the replacement, never the dead env
        assert len(tracker.envs) == 2
        await pool.close()
        assert_settled(pool, tracker)

    run(go())


# -- kills -------------------------------------------------------------------------------------
def test_a_lease_left_by_an_exception_kills_its_env():
    tracker = Tracker()

    async def go():
        pool = tracker.pool(pool_max=2)
        with pytest.raises(Boom):
            async with pool.lease() as handle:
                first = handle.env
                raise Boom("trajectory crashed")
        await eventually(lambda: first.closes == 1)
        assert first.calls == ["start", "close"]  # killed: neither reset nor checked
        async with pool.lease() as handle:
            assert handle.env is not first
        stats = pool.stats()
        assert stats.killed == 1 and stats.released == 1
        await pool.close()
        assert_settled(pool, tracker)

    run(go())


def test_a_lease_left_by_cancellation_kills_its_env():
    tracker = Tracker()

    async def go():
        entered = asyncio.Event()
        pool = tracker.pool(pool_max=2)

        async def trajectory():
            async with pool.lease() as handle:
                await handle.env.step("x")
                entered.set()
                await asyncio.sleep(3600)

        task = asyncio.create_task(trajectory())
        await entered.wait()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        # the kill closes the env in the background: wait until its slot is free as well
        await eventually(lambda: tracker.envs[0].closes == 1 and pool.live() == 0)
        stats = pool.stats()
        assert stats.killed == 1 and stats.in_use == 0
        await pool.close()
        assert_settled(pool, tracker)

    run(go())


@pytest.mark.parametrize("moment", ["1 turn", "2 turns", "3 turns", "4 turns", "mid-check"])
def test_a_release_cancelled_mid_check_kills_the_env_at_once(moment):
    # Early moments land while the release's reset is completing: asyncio.wait_for on Python
    # 3.10-3.11 swallowed the cancellation there, so the release went on to wait out the
    # hanging health check (60 s) and counted a restart. "mid-check": inside the health check.
    tracker = Tracker()
    tracker.healthy = "hang"

    async def go():
        pool = tracker.pool(pool_max=2, health_timeout=60)
        handle = await pool.acquire()
        releasing = asyncio.create_task(pool.release(handle))
        if moment == "mid-check":
            await asyncio.sleep(0.02)
        else:
            for _ in range(int(moment[0])):
                await asyncio.sleep(0)
        releasing.cancel()
        with pytest.raises(asyncio.CancelledError):
            await asyncio.wait_for(asyncio.shield(releasing), 5)
        await eventually(lambda: tracker.envs[0].closes == 1 and pool.live() == 0)
        assert pool.stats().killed == 1 and pool.stats().restarts == 0
        await pool.close()
        assert_settled(pool, tracker)

    run(go(), limit=20)


def test_a_start_that_hangs_past_start_timeout_is_an_error_and_leaks_nothing():
    tracker = Tracker()
    tracker.hang_start = True

    async def go():
        pool = tracker.pool(pool_max=1, start_timeout=0.1)
        started = time.monotonic()
        with pytest.raises(EnvStartError, match="did not start within 0.1 s"):
            await pool.acquire()
        assert time.monotonic() - started < 2
        await eventually(lambda: pool.live() == 0)
        assert tracker.alive == 0 and pool.stats().failed == 1
        tracker.hang_start = False  # the slot is free again
        async with pool.lease():
            pass
        await pool.close()
        assert_settled(pool, tracker)

    run(go())


def test_an_acquire_cancelled_while_its_env_starts_kills_the_env():
    tracker = Tracker()
    tracker.hang_start = True

    async def go():
        pool = tracker.pool(pool_max=1)
        task = asyncio.create_task(pool.acquire())
        await eventually(lambda: len(tracker.envs) == 1)
        await asyncio.sleep(0.01)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        await eventually(lambda: pool.live() == 0)
        assert tracker.envs[0].closes == 1 and pool.stats().failed == 1
        await pool.close()
        assert_settled(pool, tracker)

    run(go())


def test_a_failing_task_reset_is_a_start_error_and_frees_the_slot():
    tracker = Tracker()
    tracker.fail_task_reset = True

    async def go():
        pool = tracker.pool(pool_max=1)
        with pytest.raises(EnvStartError, match="failed to reset for its task: Boom: bad task"):
            await pool.acquire({"q": 1})
        tracker.fail_task_reset = False
        async with pool.lease({"q": 2}):
            pass
        await pool.close()
        assert_settled(pool, tracker, task_reset_failures=1)

    run(go())


# -- reaping and shutdown ----------------------------------------------------------------------
def test_the_reaper_closes_idle_envs_but_keeps_the_warm_ones():
    tracker = Tracker()

    async def go():
        pool = tracker.pool(pool_max=4, warm_size=1, idle_ttl=0.2)
        await pool.start()

        async def hold():
            async with pool.lease():
                await asyncio.sleep(0.02)

        await asyncio.gather(hold(), hold(), hold())
        assert pool.stats().idle == 3
        await eventually(lambda: pool.stats().reaped == 2, within=5)
        await eventually(lambda: tracker.alive == 1)
        await asyncio.sleep(0.3)  # past the ttl again: the warm one stays
        stats = pool.stats()
        assert stats.idle == 1 and stats.reaped == 2 and pool.live() == 1
        await pool.close()
        assert_settled(pool, tracker)

    run(go())


def test_reap_keeps_recently_used_envs():
    tracker = Tracker()

    async def go():
        pool = tracker.pool(pool_max=3, idle_ttl=None)
        async with pool.lease(), pool.lease():
            pass
        assert pool.reap(60.0) == 0
        assert pool.reap(0.0) == 2
        await pool.close()
        assert_settled(pool, tracker)

    run(go())


def test_close_closes_idle_and_in_use_envs_and_fails_waiters():
    tracker = Tracker()

    async def go():
        pool = tracker.pool(pool_max=2, warm_size=1, acquire_timeout=30)
        await pool.start()
        used = await pool.acquire()
        await pool.acquire()  # the pool is full; the warm env is in use now
        assert await pool.start() == 0  # nothing more to warm
        waiters = [asyncio.create_task(pool.acquire()) for _ in range(3)]
        await asyncio.sleep(0.01)
        assert pool.stats().waiting == 3
        await pool.close()
        for waiter in waiters:
            with pytest.raises(PoolClosed, match="shut down"):
                await waiter
        with pytest.raises(PoolClosed):
            await pool.acquire()
        with pytest.raises(PoolClosed):
            await pool.start()
        await pool.release(used)  # already closed by the pool: a no-op
        await pool.close()  # twice is fine
        assert pool.stats().abandoned == 2
        assert_settled(pool, tracker)

    run(go())


def test_a_cancelled_close_can_be_finished_by_closing_again():
    tracker = Tracker()

    async def go():
        pool = tracker.pool(pool_max=3, warm_size=2, idle_ttl=60)
        await pool.start()
        in_use = await pool.acquire()
        assert in_use is not None
        closing = asyncio.create_task(pool.close())
        await asyncio.sleep(0)
        closing.cancel()
        with pytest.raises(asyncio.CancelledError):
            await closing
        await pool.close()
        assert_settled(pool, tracker)

    run(go())


def test_closing_while_a_task_reset_fails_closes_the_env_once():
    tracker = Tracker()
    tracker.fail_task_reset = True

    async def go():
        tracker.task_reset_gate = asyncio.Event()
        pool = tracker.pool(pool_max=1)
        acquiring = asyncio.create_task(pool.acquire({"q": 1}))
        await eventually(lambda: any(c[0] == "reset" for c in _tuples(tracker)))
        closing = asyncio.create_task(pool.close())
        await asyncio.sleep(0.01)
        assert not closing.done()  # it waits for the reset in flight (bounded by reset_timeout)
        tracker.task_reset_gate.set()
        with pytest.raises(EnvStartError, match="bad task"):
            await acquiring
        await closing
        assert pool.stats().failed == 1
        assert_settled(pool, tracker, task_reset_failures=1)

    run(go())


def _tuples(tracker: Tracker) -> list[tuple]:
    return [c for env in tracker.envs for c in env.calls if isinstance(c, tuple)]


def test_an_env_handed_to_a_waiter_as_the_pool_closes_is_accounted_for():
    tracker = Tracker()

    async def go():
        pool = tracker.pool(pool_max=1, acquire_timeout=30)
        holder = await pool.acquire()
        waiter = asyncio.create_task(pool.acquire())
        await asyncio.sleep(0.01)
        await pool.release(holder)  # handed straight to the waiter...
        await pool.close()  # ...which has not run yet
        with pytest.raises(PoolClosed):
            await waiter
        stats = pool.stats()
        assert (stats.acquired, stats.released, stats.abandoned) == (1, 1, 0)
        assert_settled(pool, tracker)

    run(go())


def test_settings_from_spec_and_overrides():
    spec = Tracker().spec(pool_max=4, warm_size=3, start_timeout=5, idle_ttl=9)
    settings = PoolLimits.from_spec(spec)
    assert (settings.pool_max, settings.warm_size, settings.start_timeout) == (4, 3, 5)
    assert PoolLimits.from_spec(spec, pool_max=2).warm_size == 2  # lowered with the cap
    with pytest.raises(ValueError, match="warm_size"):
        PoolLimits.from_spec(spec, pool_max=2, warm_size=3)
