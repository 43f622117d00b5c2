"""The resource manager, the rollout engine's leases, and the subprocess provider."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import textwrap
import time
from typing import Any

import pytest

from agentfly_cli.envs.base import EnvSpec
from agentfly_cli.envs.manager import POOL_METRICS, ResourceManager
from agentfly_cli.envs.pool import EnvPool, EnvStartError
from agentfly_cli.envs.providers.process import EnvProcessDied, ProcessProvider
from agentfly_cli.errors import UserError
from agentfly_cli.settings.envs import EnvPoolSettings, PoolLimits
from envs_builtin.scratchpad import ScratchpadEnv
from tests.helpers.envs_for_tests import ProcEnv, make_proc_env
from tests.helpers.pool_helpers import Tracker, assert_settled, eventually, run

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


# -- the resource manager ----------------------------------------------------------------------
def test_manager_gives_one_env_per_spec_per_lease():
    first, second = Tracker(), Tracker()
    specs = {
        "alpha": EnvSpec(name="alpha", factory=first.factory, pool_max=4),
        "beta": EnvSpec(name="beta", factory=second.factory, pool_max=4),
    }

    async def go():
        async with ResourceManager(specs) as manager:

            async def trajectory(i):
                async with manager.lease("alpha", {"i": i}) as a, manager.lease("beta") as b:
                    assert a.env is not b.env
                    assert a.env in first.envs and b.env in second.envs
                    await asyncio.sleep(0.01)
                    return a.env, b.env

            pairs = await asyncio.gather(*(trajectory(i) for i in range(4)))
            assert len({id(a) for a, _ in pairs}) == 4  # concurrent leases never share
            assert len({id(b) for _, b in pairs}) == 4
            stats = manager.stats()
            assert stats["alpha"]["acquired"] == 4 and stats["beta"]["released"] == 4
            metrics = manager.metrics()
            assert set(metrics) == {f"env/{n}/{m}" for n in specs for m in POOL_METRICS}
            assert metrics["env/alpha/idle"] == 4.0 and metrics["env/beta/in_use"] == 0.0
            with pytest.raises(KeyError, match="no env named 'gamma'.*alpha, beta"):
                async with manager.lease("gamma"):
                    pass
        assert first.alive == 0 and second.alive == 0
        assert all(env.closes == 1 for env in first.envs + second.envs)

    run(go())


def test_manager_rejects_a_warm_size_above_the_cap():
    spec = Tracker().spec(pool_max=4)
    with pytest.raises(UserError, match=r"envs.tracked: .*warm_size \(5\) exceeds pool_max \(2\)"):
        ResourceManager({"tracked": spec}, {"tracked": EnvPoolSettings(pool_max=2, warm_size=5)})


def test_manager_leases_before_start_respect_the_cap():
    tracker = Tracker()
    tracker.start_delay = 0.01
    spec = tracker.spec(pool_max=2, warm_size=2)

    async def go():
        manager = ResourceManager({"tracked": spec})

        async def trajectory():
            async with manager.lease("tracked"):
                await asyncio.sleep(0.01)

        await asyncio.gather(*(trajectory() for _ in range(5)))
        assert tracker.peak <= 2
        await manager.close()
        assert tracker.alive == 0

    run(go())


def test_manager_builds_pools_with_the_configured_provider():
    async def go():
        spec = EnvSpec(name="proc", factory=make_proc_env)
        manager = ResourceManager({"proc": spec}, {"proc": EnvPoolSettings(provider="process")})
        async with manager:
            async with manager.lease("proc") as handle:
                pid = await handle.env.step("pid")
                assert pid != os.getpid()
        await _gone(pid)

    run(go())


# -- the rollout engine ------------------------------------------------------------------------
@pytest.fixture(scope="module")
def chat(tiny_model):
    from agentfly_cli.chat.templates import ChatTemplate

    return ChatTemplate.load(str(tiny_model))


def _call(name: str, /, **arguments: Any) -> str:
    return "<tool_call>\n" + json.dumps({"name": name, "arguments": arguments}) + "\n</tool_call>"


def test_engine_chains_get_their_own_envs_and_return_them(chat):
    from agentfly_cli.backends.scripted import ScriptedBackend
    from agentfly_cli.chat.parsers import get_parser
    from agentfly_cli.components.tools import tool
    from agentfly_cli.rollout.engine import RolloutEngine
    from agentfly_cli.settings.rollout import RolloutSettings
    from envs_builtin.scratchpad import SCRATCHPAD, notes_list, notes_write

    made: list[ScratchpadEnv] = []
    chains = 6
    arrived = 0
    gate: asyncio.Event | None = None  # opens once every chain holds its env; made in go()

    def factory() -> ScratchpadEnv:
        made.append(ScratchpadEnv())
        return made[-1]

    @tool(env="scratchpad")
    async def whoami(env: ScratchpadEnv) -> str:
        """Which env this is, once every chain holds one."""
        nonlocal arrived
        arrived += 1
        assert gate is not None
        if arrived == chains:
            gate.set()
        await asyncio.wait_for(gate.wait(), 10)
        return str(made.index(env))

    spec = SCRATCHPAD.model_copy(update={"factory": factory})
    script = [
        [
            _call("notes_write", key=f"k{i}", text="x") + "\n" + _call("whoami"),
            _call("notes_list") + "\n" + _call("whoami"),
            "done",
        ]
        for i in range(chains)
    ]

    async def go():
        nonlocal gate
        gate = asyncio.Event()
        manager = ResourceManager({"scratchpad": spec})
        engine = RolloutEngine(
            ScriptedBackend(script, chat),
            chat,
            get_parser("hermes"),
            [notes_write, notes_list, whoami],
            None,
            RolloutSettings(n=1, max_turns=3, concurrency=chains),
            env_manager=manager,
        )
        async with manager:
            trajectories = await engine.run([{"question": str(i)} for i in range(chains)])
            stats = manager.stats()["scratchpad"]
        return trajectories, stats

    trajectories, stats = run(go())
    seen = []
    for i, trajectory in enumerate(trajectories):
        records = trajectory.tool_calls
        assert [r.status for r in records] == ["ok"] * 4, trajectory.error
        assert records[2].observation == f"k{i}"  # only its own note: no sharing
        assert records[1].observation == records[3].observation  # one env for the chain
        seen.append(records[1].observation)
    assert len(set(seen)) == chains  # all chains held their envs at once: all distinct
    assert len(made) == chains
    assert stats["acquired"] == chains and stats["released"] == chains
    assert stats["in_use"] == 0 and stats["idle"] == chains and stats["killed"] == 0
    assert all(env.closed for env in made)  # closed with the manager


def test_engine_chain_whose_backend_fails_kills_its_env(chat):
    from agentfly_cli.backends.scripted import ScriptedBackend
    from agentfly_cli.chat.parsers import get_parser
    from agentfly_cli.rollout.engine import RolloutEngine
    from agentfly_cli.settings.rollout import RolloutSettings
    from envs_builtin.scratchpad import SCRATCHPAD, notes_write

    made: list[ScratchpadEnv] = []

    def factory() -> ScratchpadEnv:
        made.append(ScratchpadEnv())
        return made[-1]

    spec = SCRATCHPAD.model_copy(update={"factory": factory})
    # one response only: the second turn makes the scripted backend raise
    script = [[_call("notes_write", key="a", text="x")], [_call("notes_write", key="b", text="y")]]

    async def go():
        manager = ResourceManager({"scratchpad": spec})
        engine = RolloutEngine(
            ScriptedBackend(script, chat),
            chat,
            get_parser("hermes"),
            [notes_write],
            None,
            RolloutSettings(n=1, max_turns=2),
            env_manager=manager,
        )
        async with manager:
            trajectories = await engine.run([{"question": "a"}, {"question": "b"}])
            await asyncio.sleep(0.05)  # the kills close in the background
            stats = manager.stats()["scratchpad"]
            closed_before_shutdown = [env.closed for env in made]
        return trajectories, stats, closed_before_shutdown

    trajectories, stats, closed = run(go())
    assert [t.finish_reason for t in trajectories] == ["abort", "abort"]
    assert stats["killed"] == 2 and stats["released"] == 0 and stats["in_use"] == 0
    assert closed == [True, True] and len(made) == 2


# -- the subprocess provider -------------------------------------------------------------------
def _alive(pid: int) -> bool:
    """True while the process exists and is not a zombie."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, ProcessLookupError):
        return False


async def _gone(pid: int, within: float = 10.0) -> None:
    deadline = time.monotonic() + within
    while _alive(pid):
        assert time.monotonic() < deadline, f"process {pid} is still alive"
        await asyncio.sleep(0.02)


PROC_SPEC = EnvSpec(name="proc", factory=make_proc_env, pool_max=3, start_timeout=30)


def test_process_env_keeps_state_and_surfaces_errors_with_their_type():
    async def go():
        provider = ProcessProvider()
        handle = await provider.create(PROC_SPEC, {})
        await handle.start()
        pid = handle.info["pid"]
        assert pid != os.getpid() and _alive(pid)
        assert [await handle.step("inc") for _ in range(3)] == [1, 2, 3]
        assert await handle.reset({"q": 1}) == pid
        assert await handle.env.step("inc") == 1  # the proxy the tools get
        with pytest.raises(LookupError, match="no note named 'zz'"):
            await handle.step("lookup")
        with pytest.raises(RuntimeError, match="CustomEnvError: something env-specific"):
            await handle.step("custom")
        assert await handle.healthy()
        assert await handle.step("inc") == 2  # errors do not break the env
        await handle.close()
        await handle.close()  # twice is fine
        assert not await handle.healthy()
        await _gone(pid)

    run(go())


def test_a_configuration_error_in_a_child_process_stays_a_user_error():
    """An env that cannot start for a reason the user must fix (UserError) fails its pool's
    acquire with EnvConfigError, a UserError: the rollout stops with exit 2, no retries."""
    from agentfly_cli.envs.pool import EnvConfigError, EnvPool

    async def go():
        pool = EnvPool(PROC_SPEC, ProcessProvider(), options={"missing_binary": "stockfish"})
        try:
            with pytest.raises(EnvConfigError) as caught:
                async with pool.lease():
                    pass
        finally:
            await pool.close()
        assert isinstance(caught.value, UserError)
        assert str(caught.value) == "env 'proc' cannot start: stockfish not found: install it"

    run(go())


def test_process_env_of_the_scratchpad_raises_lookup_error():
    from envs_builtin.scratchpad import SCRATCHPAD

    async def go():
        pool = EnvPool(SCRATCHPAD, ProcessProvider(), PoolLimits(pool_max=1))
        async with pool.lease({"q": 1}) as handle:
            await handle.env.step({"op": "write", "key": "a", "text": "hello"})
            assert await handle.env.step({"op": "read", "key": "a"}) == "hello"
            with pytest.raises(LookupError, match="no note named 'b'; notes: a"):
                await handle.env.step({"op": "read", "key": "b"})
            pid = handle.info["pid"]
        async with pool.lease() as handle:  # reset on release: the notes are gone
            assert handle.info["pid"] == pid
            assert await handle.env.step({"op": "list"}) == "(no notes)"
        await pool.close()
        assert_settled(pool)
        await _gone(pid)

    run(go())


def test_a_crashing_process_env_is_replaced_and_others_are_unaffected():
    async def go():
        pool = EnvPool(PROC_SPEC, ProcessProvider(), PoolLimits(pool_max=3, warm_size=2))
        assert await pool.start() == 2
        async with pool.lease() as crashing, pool.lease() as other:
            doomed = crashing.info["pid"]
            await other.env.step("inc")
            with pytest.raises(EnvProcessDied, match="exit code 3"):
                await crashing.env.step("crash")
            assert not await crashing.healthy()
            with pytest.raises(EnvProcessDied, match="process is gone"):
                await crashing.env.step("inc")
            assert await other.env.step("inc") == 2  # the other env lives on
        stats = pool.stats()
        assert stats.restarts == 1 and stats.released == 1
        await eventually(lambda: pool.stats().idle == 2, within=20)  # replaced
        async with pool.lease() as a, pool.lease() as b:
            pids = {a.info["pid"], b.info["pid"]}
        assert doomed not in pids and all(_alive(p) for p in pids)
        await pool.close()
        assert_settled(pool)
        for pid in pids | {doomed}:
            await _gone(pid)

    run(go(), limit=60)


def test_a_hanging_step_cancelled_by_a_timeout_kills_the_process():
    async def go():
        handle = await ProcessProvider().create(PROC_SPEC, {})
        await handle.start()
        pid = handle.info["pid"]
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(handle.step("hang"), 0.2)
        await _gone(pid)
        assert not await handle.healthy()
        with pytest.raises(EnvProcessDied):
            await handle.step("inc")
        await handle.close()

    run(go())


def test_a_process_env_start_that_hangs_is_killed():
    async def go():
        spec = PROC_SPEC.model_copy(update={"start_timeout": 0.5})
        pool = EnvPool(spec, ProcessProvider(), options={"hang_start": True})
        started = time.monotonic()
        with pytest.raises(EnvStartError, match="did not start within 0.5 s"):
            await pool.acquire()
        assert time.monotonic() - started < 10
        await pool.close()
        assert_settled(pool)

    run(go())


def test_closing_a_process_env_leaves_no_process():
    async def go():
        handle = await ProcessProvider().create(PROC_SPEC, {})
        await handle.start()
        pid = handle.info["pid"]
        await handle.close()
        assert not os.path.exists(f"/proc/{pid}") or not _alive(pid)
        await _gone(pid)
        # unhealthy after a hand-made SIGKILL as well
        other = await ProcessProvider().create(PROC_SPEC, {})
        await other.start()
        os.kill(other.info["pid"], 9)
        await _gone(other.info["pid"])
        assert not await other.healthy()
        await other.kill()

    run(go())


def test_an_unpicklable_factory_is_a_clear_type_error():
    spec = EnvSpec(name="lambda", factory=lambda: ProcEnv())

    async def go():
        with pytest.raises(TypeError, match="'lambda' cannot run in a subprocess.*module level"):
            await ProcessProvider().create(spec, {})
        pool = EnvPool(spec, ProcessProvider())
        with pytest.raises(EnvStartError, match="TypeError"):
            await pool.acquire()
        await pool.close()
        assert_settled(pool)

    run(go())


def test_the_env_process_dies_with_its_parent(tmp_path):
    script = tmp_path / "parent.py"
    script.write_text(
        textwrap.dedent(
            """
            import asyncio, os, sys
            from agentfly_cli.envs.base import EnvSpec
            from agentfly_cli.envs.providers.process import ProcessProvider
            from tests.helpers.envs_for_tests import make_proc_env

            async def main():
                spec = EnvSpec(name="orphan", factory=make_proc_env)
                handle = await ProcessProvider().create(spec, {})
                await handle.start()
                print(await handle.step("pid"), flush=True)
                # the env is busy in a step, so it does not see its socket close either
                asyncio.create_task(handle.step("hang"))
                await asyncio.sleep(0.2)
                os._exit(0)  # no atexit hooks, no close: only the kernel can clean up

            asyncio.run(main())
            """
        )
    )
    environment = dict(os.environ, PYTHONPATH=os.pathsep.join([REPO_ROOT, *sys.path]))
    errors = tmp_path / "stderr.txt"  # a file, not a pipe: a surviving child would hold a pipe
    with open(errors, "w") as stderr:
        done = subprocess.run(
            [sys.executable, str(script)],
            stdout=subprocess.PIPE,
            stderr=stderr,
            text=True,
            timeout=60,
            env=environment,
            cwd=REPO_ROOT,
        )
    assert done.returncode == 0, errors.read_text()
    child = int(done.stdout.strip().splitlines()[-1])
    deadline = time.monotonic() + 10
    try:
        while _alive(child):
            assert time.monotonic() < deadline, f"env process {child} outlived its parent"
            time.sleep(0.05)
    finally:
        if _alive(child):  # do not leave it behind when the test fails
            os.kill(child, 9)


def test_manager_rejects_options_its_env_factory_does_not_take():
    from envs_builtin.python_sandbox import PYTHON
    from tests.helpers.sandbox_modes import SANDBOX

    with pytest.raises(UserError, match=r"envs.python.options: .*'memory_gb'.*takes: .*memory_mb"):
        ResourceManager({"python": PYTHON}, {"python": EnvPoolSettings(options={"memory_gb": 3})})
    good = EnvPoolSettings(options={"memory_mb": 300, "sandbox": SANDBOX})  # none: no bubblewrap
    ResourceManager({"python": PYTHON}, {"python": good})
