"""What an env's ``reset(task)`` returns reaches the lease holder (``handle.opening``): in this
process, in a child process, under a lease time limit, and through a pool server."""

from __future__ import annotations

import asyncio

import pytest

from agentfly_cli.envs.base import EnvSpec
from agentfly_cli.envs.manager import ResourceManager
from agentfly_cli.envs.pool import EnvPool
from agentfly_cli.envs.providers.local import LocalProvider
from agentfly_cli.envs.providers.process import ProcessProvider
from agentfly_cli.pool_server.server import PoolServer
from agentfly_cli.settings.envs import EnvPoolSettings, PoolLimits
from tests.helpers.envs_for_tests import make_guess_env
from tests.helpers.pool_helpers import run

GUESS = EnvSpec(name="guess", factory=make_guess_env, pool_max=2, warm_size=0)
OPENING = {"observation": "Guess my word.", "info": {"letters": 4}, "reward": 0.0}


async def _openings(pool) -> list:
    """The openings of four leases in a row of one env."""
    seen = []
    async with pool:
        async with pool.lease({"opening": "Hello."}) as handle:
            seen.append(handle.opening)
        async with pool.lease() as handle:  # no task: no reset, and not the last lease's
            seen.append(handle.opening)
        async with pool.lease({"opening": OPENING}) as handle:
            seen.append(handle.opening)
        async with pool.lease({"question": "no opening"}) as handle:
            seen.append(handle.opening)
    return seen


@pytest.mark.parametrize("provider", [LocalProvider, ProcessProvider])
@pytest.mark.parametrize("lease_timeout", [None, 30.0])
def test_the_pool_hands_over_what_reset_returned(provider, lease_timeout):
    pool = EnvPool(GUESS, provider(), PoolLimits(pool_max=1, lease_timeout=lease_timeout))
    assert run(_openings(pool)) == ["Hello.", None, OPENING, None]


def test_a_pool_server_sends_the_opening_with_the_lease(tmp_path):
    async def main():
        address = f"unix://{tmp_path / 'guess.sock'}"
        server = PoolServer(GUESS, EnvPoolSettings(pool_max=1), address, "")
        task = asyncio.create_task(server.serve())
        while server._server is None:
            await asyncio.sleep(0.01)
        try:
            manager = ResourceManager({"guess": GUESS}, {"guess": EnvPoolSettings(address=address)})
            async with manager:
                async with manager.lease("guess", {"opening": OPENING}) as handle:
                    assert handle.opening == OPENING
                    assert "opening" not in handle.info  # where it lives, not what it said
                    assert await handle.env.step("word") == {
                        "observation": "wrong (1 guesses)", "reward": 0.0, "done": False
                    }  # fmt: skip
                async with manager.lease("guess", {"question": "none"}) as handle:
                    assert handle.opening is None
        finally:
            server.stop()
            await asyncio.wait_for(task, 10)

    run(main())
