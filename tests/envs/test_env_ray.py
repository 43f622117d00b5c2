"""The Ray provider against one local Ray instance (2 CPUs, a custom 'widget' resource)."""

from __future__ import annotations

import asyncio
import os
import sys
import time

import pytest

ray = pytest.importorskip("ray", reason="the optional ray extra is not installed")

from agentfly_cli.envs.base import BaseEnv, EnvSpec  # noqa: E402
from agentfly_cli.envs.providers.ray_provider import RayEnvGone, RayProvider  # noqa: E402
from agentfly_cli.errors import UserError  # noqa: E402

pytestmark = pytest.mark.ray

# the workers may not find this module (pytest run from another folder): ship its envs by value
ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])


class CounterEnv(BaseEnv):
    """Keeps a number across steps; some actions fail, crash, or report the actor's resources."""

    def __init__(self, start: int = 0) -> None:
        self.n = start

    async def reset(self, task=None):
        self.n = (task or {}).get("n", self.n)
        return self.n

    async def step(self, action):
        if action == "bad":
            raise ValueError("bad action")
        if action == "crash":
            os._exit(1)
        if action == "hang":
            await asyncio.sleep(60)
        if action == "resources":
            return ray.get_runtime_context().get_assigned_resources()
        self.n += action
        return self.n

    def peek(self) -> int:
        return self.n


class FailingStartEnv(BaseEnv):
    async def start(self) -> None:
        raise OSError("no game server")


class MisconfiguredEnv(BaseEnv):
    async def start(self) -> None:
        from agentfly_cli.errors import UserError

        raise UserError("stockfish not found: install it")


def spec(factory=CounterEnv, **kwargs) -> EnvSpec:
    return EnvSpec(name="counter", factory=factory, **kwargs)


def pid_alive(pid: int, wait: float = 10.0) -> bool:
    """Whether ``pid`` still runs after up to ``wait`` seconds."""
    deadline = time.monotonic() + wait
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        time.sleep(0.05)
    return True


@pytest.fixture(scope="module", autouse=True)
def ray_instance():
    """One local Ray for the module, started (and stopped) by a provider of its own.

    Started in one event loop and used in others: Ray must outlive the loop that started it.
    """
    assert not ray.is_initialized()
    owner = RayProvider(init_options={"num_cpus": 2, "resources": {"widget": 2}})
    asyncio.run(owner.connect())
    yield owner
    asyncio.run(owner.shutdown())
    assert not ray.is_initialized()


async def started(provider: RayProvider, options=None, **spec_kwargs):
    handle = await provider.create(spec(**spec_kwargs), options or {})
    await handle.start()
    return handle


def test_lifecycle_keeps_state_and_isolates_envs(ray_instance):
    async def go():
        provider = RayProvider()  # reuses the running Ray
        a, b = await started(provider, {"start": 10}), await started(provider)
        assert a.info["provider"] == "ray" and a.info["pid"] != b.info["pid"]
        assert a.info["actor_id"] and a.info["node_id"]
        assert await a.env.reset() == 10 and await b.env.reset({"n": 100}) == 100
        assert [await a.env.step(1), await a.env.step(2), await b.env.step(5)] == [11, 13, 105]
        assert await a.env.peek() == 13  # any other env method goes through the proxy
        assert await a.healthy() and await a.env.healthy()
        assert provider.describe() == {"provider": "ray", "address": None, "nodes": 1}
        await a.env.close()
        await b.close()
        await b.close()  # twice is fine
        return a.info["pid"], b.info["pid"]

    for pid in asyncio.run(go()):
        assert not pid_alive(pid)
    assert ray.is_initialized()  # a provider that did not start Ray leaves it running


def test_env_errors_surface_with_type_and_message(ray_instance):
    async def go():
        provider = RayProvider()
        handle = await started(provider)
        with pytest.raises(ValueError, match="^bad action$"):
            await handle.env.step("bad")
        assert await handle.env.step(1) == 1  # the env survives its own errors
        await handle.close()
        with pytest.raises(RayEnvGone, match="not running"):
            await handle.step(1)

        failing = await provider.create(spec(FailingStartEnv), {})
        with pytest.raises(OSError, match="no game server"):
            await failing.start()
        await failing.kill()
        misconfigured = await provider.create(spec(MisconfiguredEnv), {})
        with pytest.raises(UserError, match="stockfish not found: install it"):
            await misconfigured.start()  # a UserError stays one: the rollout stops with exit 2
        await misconfigured.kill()
        not_env = await provider.create(spec(dict), {})
        with pytest.raises(TypeError, match="lacks the Env methods"):
            await not_env.start()
        await not_env.close()

    asyncio.run(go())


def test_crashed_env_is_unhealthy_and_kill_is_idempotent(ray_instance):
    async def go():
        handle = await started(RayProvider())
        with pytest.raises(RayEnvGone, match="the actor is gone"):
            await handle.step("crash")
        assert await handle.healthy() is False
        await handle.kill()
        await handle.kill()
        await handle.close()
        assert await handle.healthy() is False
        with pytest.raises(RayEnvGone):
            await handle.start()  # a killed handle makes no new actor

    asyncio.run(go())


def test_kill_frees_a_hung_step(ray_instance):
    async def go():
        handle = await started(RayProvider())
        step = asyncio.ensure_future(handle.step("hang"))
        await asyncio.sleep(0.2)
        assert await handle.healthy()  # answered beside the hung step
        await handle.kill()
        with pytest.raises(RayEnvGone):
            await asyncio.wait_for(step, 10)
        return handle.info["pid"]

    assert not pid_alive(asyncio.run(go()))


def test_spec_resources_reach_the_actor(ray_instance):
    async def go():
        provider = RayProvider()
        resources = {"cpu": 0.5, "widget": 1, "memory_mb": 64}
        handle = await started(provider, resources=resources)
        assigned = await handle.step("resources")
        await handle.close()

        # more widgets than the cluster has: start waits until the pool's timeout, kill frees it
        pending = await provider.create(spec(resources={"cpu": 0, "widget": 5}), {})
        with pytest.raises((TimeoutError, asyncio.TimeoutError)):
            await asyncio.wait_for(pending.start(), 0.5)
        await pending.kill()
        return assigned

    assigned = asyncio.run(go())
    assert assigned["CPU"] == 0.5 and assigned["widget"] == 1
    assert assigned["memory"] == 64 * 2**20


def test_factory_not_importable_on_workers(ray_instance, tmp_path, monkeypatch):
    (tmp_path / "driver_only_env.py").write_text(
        "from agentfly_cli.envs.base import BaseEnv\nclass DriverOnlyEnv(BaseEnv):\n    pass\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))  # the driver's sys.path only
    from driver_only_env import DriverOnlyEnv

    async def go():
        handle = await RayProvider().create(spec(DriverOnlyEnv), {})
        with pytest.raises(RayEnvGone, match="No module named 'driver_only_env'; the env factory"):
            await handle.start()
        await handle.kill()

    asyncio.run(go())


def test_the_python_sandbox_runs_in_an_actor_with_its_state(ray_instance):
    """Ray's async actors run on uvloop, whose subprocesses take no user/group arguments."""
    from envs_builtin.python_sandbox import PYTHON
    from tests.helpers.sandbox_modes import SANDBOX

    async def go():
        provider = RayProvider()
        spec = PYTHON.model_copy(update={"resources": {"cpu": 0}})
        handle = await provider.create(spec, {"sandbox": SANDBOX})
        try:
            await handle.start()
            await handle.reset({})
            assert await handle.env.step({"code": "x = 20"}) == "(no output)"
            assert (await handle.env.step({"code": "x + 1"})).strip() == "21"
        finally:
            await handle.close()

    asyncio.run(go())


def test_a_pool_of_ray_actors_hands_over_what_reset_returned(ray_instance):
    """The opening of an env that speaks first comes back from its actor (CounterEnv's reset
    returns its number)."""
    from agentfly_cli.envs.pool import EnvPool
    from agentfly_cli.settings.envs import PoolLimits

    async def go():
        pool = EnvPool(spec(), RayProvider(), PoolLimits(pool_max=1))
        async with pool:
            async with pool.lease({"n": 7}) as handle:
                assert handle.opening == 7
            async with pool.lease() as handle:
                assert handle.opening is None

    asyncio.run(go())
