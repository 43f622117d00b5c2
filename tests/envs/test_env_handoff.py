"""The pool's waiting line: FIFO order, promised slots, and what a waiter that leaves passes on."""

import asyncio

import pytest

from agentfly_cli.envs.handoff import Handoff


class Handle:
    def __init__(self, name: str) -> None:
        self.name = name


def run(coro):
    return asyncio.run(coro)


def test_waiters_are_served_first_come_first_served():
    async def go():
        unclaimed = []
        line = Handoff(unclaimed.append)
        loop = asyncio.get_running_loop()
        first = asyncio.create_task(line.wait(loop.time() + 5))
        second = asyncio.create_task(line.wait(loop.time() + 5))
        await asyncio.sleep(0)
        assert line.waiting() == 2 and bool(line)
        env = Handle("a")
        assert line.offer(env) and line.offer(None)
        assert line.held() == 2  # a handed env and a promised slot count under the cap
        assert await first is env and line.take(env)
        assert await second is None
        line.take_slot()
        assert line.held() == 0 and not line and not line.offer(Handle("b"))
        assert unclaimed == []

    run(go())


@pytest.mark.parametrize("given", ["env", "slot"])
def test_a_waiter_that_leaves_passes_on_what_it_was_given(given):
    async def go():
        unclaimed = []
        line = Handoff(unclaimed.append)
        loop = asyncio.get_running_loop()
        waiter = asyncio.create_task(line.wait(loop.time() + 5))
        await asyncio.sleep(0)
        item = Handle("a") if given == "env" else None
        assert line.offer(item)
        waiter.cancel()  # cancelled in the same step the env (or slot) arrived
        with pytest.raises(asyncio.CancelledError):
            await waiter
        assert unclaimed == [item] and line.held() == 0

    run(go())


def test_a_waiter_times_out_and_leaves_the_line():
    async def go():
        line = Handoff(lambda _: None)
        loop = asyncio.get_running_loop()
        with pytest.raises(TimeoutError):
            await line.wait(loop.time() + 0.01)
        assert not line and line.waiting() == 0

    run(go())


def test_fail_all_fails_waiters_and_returns_untaken_envs():
    async def go():
        line = Handoff(lambda _: None)
        loop = asyncio.get_running_loop()
        given = asyncio.create_task(line.wait(loop.time() + 5))
        waiting = asyncio.create_task(line.wait(loop.time() + 5))
        await asyncio.sleep(0)
        env = Handle("a")
        line.offer(env)
        untaken = line.fail_all(lambda: RuntimeError("closed"))
        assert untaken == [env]
        assert await given is env and not line.take(env)  # the pool took it back
        with pytest.raises(RuntimeError, match="closed"):
            await waiting

    run(go())
