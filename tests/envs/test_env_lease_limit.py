"""Lease time limits: an env held past ``lease_timeout`` is taken back, killed and replaced; its
holder's next call fails clearly; cancellation stays safe; the counters add up."""

from __future__ import annotations

import asyncio
import json
import time

import pydantic
import pytest
from typer.testing import CliRunner

from agentfly_cli.cli.app import build_app
from agentfly_cli.envs.base import BaseEnv, EnvSpec
from agentfly_cli.envs.manager import ResourceManager
from agentfly_cli.envs.pool import EnvPool, LeaseExpired
from agentfly_cli.envs.providers.local import LocalProvider
from agentfly_cli.pool_server.server import PoolServer
from agentfly_cli.settings.envs import EnvPoolSettings, PoolLimits
from tests.helpers.pool_helpers import assert_settled, eventually, run

LIMIT = 0.2


class SlowEnv(BaseEnv):
    """``step("hang")`` never returns; other actions echo. Counts its closes."""

    made: list[SlowEnv] = []

    def __init__(self) -> None:
        self.closes = 0
        self.steps = 0
        SlowEnv.made.append(self)

    async def step(self, action):
        if action == "hang":
            await asyncio.sleep(3600)
        self.steps += 1
        return f"echo {action}"

    async def close(self) -> None:
        self.closes += 1


SLOW = EnvSpec(name="slow", factory=SlowEnv, pool_max=1, warm_size=1)


def _pool(**settings) -> EnvPool:
    SlowEnv.made.clear()
    values = {"pool_max": 1, "warm_size": 1, "lease_timeout": LIMIT, **settings}
    return EnvPool(SLOW, LocalProvider(), PoolLimits(**values))


def test_a_lease_held_too_long_expires_and_its_env_is_replaced():
    async def main():
        pool = _pool()
        await pool.start()
        async with pool.lease() as handle:
            first = SlowEnv.made[0]
            assert await handle.env.step("hi") == "echo hi"
            await asyncio.sleep(LIMIT * 1.5)
            with pytest.raises(LeaseExpired, match=r"held over 0.2 s .*envs.slow.lease_timeout"):
                await handle.env.step("late")
            with pytest.raises(LeaseExpired):
                await handle.step("late")
            with pytest.raises(LeaseExpired):
                handle.env.steps  # noqa: B018  (an in-process env's attributes too)
            assert first.steps == 1 and first.closes == 1  # taken back and closed
            await eventually(lambda: pool.stats().idle == 1)  # and replaced
            assert pool.stats().expired == 1 and pool.stats().in_use == 0
        async with pool.lease() as handle:  # returning the expired lease did nothing
            assert await handle.env.step("next") == "echo next"
        await pool.close()
        stats = pool.stats()
        assert (stats.expired, stats.released, stats.acquired) == (1, 1, 2)
        assert_settled(pool)
        assert all(env.closes == 1 for env in SlowEnv.made)

    run(main())


def test_a_call_in_flight_is_interrupted_when_the_lease_expires():
    async def main():
        pool = _pool()
        await pool.start()
        began = time.monotonic()
        with pytest.raises(LeaseExpired):
            async with pool.lease() as handle:
                await handle.env.step("hang")
        assert time.monotonic() - began < LIMIT + 1.0
        await pool.close()
        assert pool.stats().expired == 1 and pool.stats().killed == 0
        assert_settled(pool)

    run(main())


def test_a_waiter_gets_the_env_taken_back_from_a_holder_that_overstayed():
    async def main():
        pool = _pool(acquire_timeout=5)
        await pool.start()
        holder_entered = asyncio.Event()

        async def overstay():
            async with pool.lease():
                holder_entered.set()
                await asyncio.sleep(3 * LIMIT)

        holder = asyncio.create_task(overstay())
        await holder_entered.wait()
        began = time.monotonic()
        async with pool.lease() as handle:  # the pool holds one env: it must be reclaimed
            waited = time.monotonic() - began
            assert await handle.env.step("mine") == "echo mine"
        assert waited < 3 * LIMIT
        await holder  # its body never touched the env again: it leaves without an error
        await pool.close()
        assert pool.stats().expired == 1 and pool.live() == 0
        assert_settled(pool)

    run(main())


def test_cancelling_the_holder_is_still_a_cancellation_and_kills_the_env():
    async def main():
        pool = _pool(lease_timeout=30)
        await pool.start()

        async def hold():
            async with pool.lease() as handle:
                await handle.env.step("hang")

        task = asyncio.create_task(hold())
        await eventually(lambda: pool.stats().in_use == 1)
        await asyncio.sleep(0.02)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        await pool.close()
        stats = pool.stats()
        assert (stats.killed, stats.expired) == (1, 0)
        assert_settled(pool)

    run(main())


def test_a_released_lease_does_not_expire_later():
    async def main():
        pool = _pool()
        await pool.start()
        async with pool.lease() as handle:
            await handle.env.step("quick")
        await asyncio.sleep(LIMIT * 2)
        stats = pool.stats()
        assert (stats.expired, stats.released, stats.idle) == (0, 1, 1)
        await pool.close()
        assert_settled(pool)

    run(main())


def test_without_a_limit_tools_get_the_env_itself():
    async def main():
        pool = _pool(lease_timeout=None)
        await pool.start()
        async with pool.lease() as handle:
            assert isinstance(handle.env, SlowEnv)
        await pool.close()

    run(main())


def test_lease_timeout_is_a_pool_setting_checked_up_front():
    assert EnvPoolSettings(lease_timeout=2).pool_limits(SLOW).lease_timeout == 2
    assert EnvPoolSettings().pool_limits(SLOW).lease_timeout is None
    for bad in (0, -1, float("nan"), float("inf")):
        with pytest.raises(pydantic.ValidationError):
            EnvPoolSettings(lease_timeout=bad)
    manager = ResourceManager({"slow": SLOW}, {"slow": EnvPoolSettings(lease_timeout=LIMIT)})

    async def main():
        async with manager:
            with pytest.raises(LeaseExpired):
                async with manager.lease("slow") as handle:
                    await handle.env.step("hang")
            assert manager.metrics()["env/slow/expired"] == 1.0

    run(main())


# -- on a pool server ----------------------------------------------------------------------------
async def _serving(address: str, **config):
    server = PoolServer(SLOW, EnvPoolSettings(**config), address)
    task = asyncio.create_task(server.serve())
    await eventually(lambda: server._server is not None)
    return server, task


def test_a_pool_server_takes_back_an_env_a_client_held_too_long(tmp_path):
    async def main():
        address = f"unix://{tmp_path}/slow.sock"
        server, task = await _serving(address, lease_timeout=LIMIT)
        client = ResourceManager({"slow": SLOW}, {"slow": EnvPoolSettings(address=address)})
        async with client:
            with pytest.raises(LeaseExpired, match="lease expired"):
                async with client.lease("slow") as handle:
                    assert await handle.env.step("a") == "echo a"
                    await asyncio.sleep(LIMIT * 1.5)
                    await handle.env.step("b")
            with pytest.raises(LeaseExpired):  # a hung step is interrupted on the server
                async with client.lease("slow") as handle:
                    await asyncio.wait_for(handle.env.step("hang"), 10)
            async with client.lease("slow") as handle:  # the server serves on
                assert await handle.env.step("c") == "echo c"
            assert client.stats()["slow"]["killed"] == 2
        stats = server.pool.stats()
        assert (stats.expired, stats.released, stats.in_use) == (2, 1, 0)
        server.stop()
        await asyncio.wait_for(task, 10)
        assert server.pool.stats().created == server.pool.stats().closed

    run(main())


def test_a_client_side_limit_closes_the_connection_and_the_server_kills_the_env(tmp_path):
    async def main():
        address = f"unix://{tmp_path}/slow.sock"
        server, task = await _serving(address)  # no limit on the server
        config = EnvPoolSettings(address=address, lease_timeout=LIMIT)
        client = ResourceManager({"slow": SLOW}, {"slow": config})
        async with client:
            with pytest.raises(LeaseExpired):
                async with client.lease("slow") as handle:
                    await handle.env.step("hang")
            assert client.stats()["slow"]["expired"] == 1
            await eventually(lambda: server.pool.stats().killed == 1)
            async with client.lease("slow") as handle:
                assert await handle.env.step("d") == "echo d"
        server.stop()
        await asyncio.wait_for(task, 10)

    run(main())


def test_env_up_takes_a_lease_timeout_and_rejects_bad_ones(tmp_path, monkeypatch):
    monkeypatch.setenv("AGENTFLY_STATE_DIR", str(tmp_path / "state"))
    runner = CliRunner()
    for bad, problem in (("nan", "finite"), ("inf", "finite"), ("-1", "greater than 0")):
        result = runner.invoke(build_app(), ["env", "up", "scratchpad", "--lease-timeout", bad])
        assert result.exit_code == 2, result.output
        assert "--lease-timeout: Input should be" in result.output and problem in result.output
        assert len(result.output.strip().splitlines()) == 1
    up = runner.invoke(build_app(), ["env", "up", "scratchpad", "--lease-timeout", "30", "--json"])
    assert up.exit_code == 0, up.output
    try:
        [row] = json.loads(runner.invoke(build_app(), ["env", "servers", "--json"]).output)
        assert row["status"] == "ready" and row["stats"]["expired"] == 0
        assert row["settings"]["lease_timeout"] == 30
    finally:
        down = runner.invoke(build_app(), ["env", "down", "scratchpad", "--json"])
    assert json.loads(down.output)[0]["stopped_by"] == "shutdown"
