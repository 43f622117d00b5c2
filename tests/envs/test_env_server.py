"""Pool servers: the wire protocol, leases over connections, `agentfly env up / servers / down`."""

from __future__ import annotations

import asyncio
import json
import os
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from agentfly_cli.cli.app import build_app
from agentfly_cli.envs.base import BaseEnv, EnvSpec
from agentfly_cli.envs.manager import ResourceManager
from agentfly_cli.envs.state import pid_alive
from agentfly_cli.errors import UserError
from agentfly_cli.pool_server.server import PoolServer
from agentfly_cli.settings.envs import EnvPoolSettings
from envs_builtin.scratchpad import SCRATCHPAD

runner = CliRunner()


class HangingEnv(BaseEnv):
    """``step("hang")`` never returns; ``step("object")`` returns something not JSON."""

    async def step(self, action):
        if action == "hang":
            await asyncio.sleep(3600)
        if action == "object":
            return object()
        return f"echo {action}"


HANGING = EnvSpec(name="hanging", factory=HangingEnv, pool_max=2, warm_size=1)


@pytest.fixture(scope="module")
def chat_template(tiny_model):
    from agentfly_cli.chat.templates import ChatTemplate

    return ChatTemplate.load(str(tiny_model))


@pytest.fixture
def state_dir(tmp_path, monkeypatch) -> Path:
    folder = tmp_path / "state"
    monkeypatch.setenv("AGENTFLY_STATE_DIR", str(folder))
    return folder


async def _serving(spec: EnvSpec, address: str, token: str = "", **config):
    server = PoolServer(spec, EnvPoolSettings(**config), address, token)
    task = asyncio.create_task(server.serve())
    for _ in range(200):
        if server._server is not None:
            return server, task
        await asyncio.sleep(0.01)
    raise AssertionError("the server did not start")


async def _stop(server, task) -> None:
    server.stop()
    await asyncio.wait_for(task, 10)


def test_leases_over_a_connection_keep_state_and_return_envs(tmp_path):
    async def main():
        address = f"unix://{tmp_path}/pad.sock"
        server, task = await _serving(SCRATCHPAD, address, warm_size=1, pool_max=2)
        manager = ResourceManager(
            {"scratchpad": SCRATCHPAD}, {"scratchpad": EnvPoolSettings(address=address)}
        )
        async with manager:
            async with manager.lease("scratchpad", {}) as first, manager.lease("scratchpad") as b:
                await first.env.step({"op": "write", "key": "k", "text": "first"})
                await b.env.step({"op": "write", "key": "k", "text": "second"})
                assert await first.env.step({"op": "read", "key": "k"}) == "first"
                assert await b.env.step({"op": "read", "key": "k"}) == "second"
                with pytest.raises(LookupError, match="no note named 'zz'"):
                    await first.env.step({"op": "read", "key": "zz"})
                assert server.pool.stats().in_use == 2
            assert manager.stats()["scratchpad"]["released"] == 2
        stats = server.pool.stats()
        assert (stats.in_use, stats.idle, stats.released, stats.killed) == (0, 2, 2, 0)
        await _stop(server, task)
        assert server.pool.stats().closed == server.pool.stats().created
        assert not Path(f"{tmp_path}/pad.sock").exists()

    asyncio.run(main())


def test_a_crashed_or_vanished_client_gets_its_env_killed(tmp_path):
    async def main():
        address = f"unix://{tmp_path}/hang.sock"
        server, task = await _serving(HANGING, address)
        manager = ResourceManager(
            {"hanging": HANGING}, {"hanging": EnvPoolSettings(address=address)}
        )
        async with manager:
            with pytest.raises(RuntimeError, match="boom"):
                async with manager.lease("hanging") as handle:
                    assert await handle.env.step("hi") == "echo hi"
                    raise RuntimeError("boom")
            async with manager.lease("hanging") as handle:  # a step the client gives up on
                with pytest.raises(asyncio.TimeoutError):
                    await asyncio.wait_for(handle.env.step("hang"), 0.3)
                assert not await handle.healthy()
            for _ in range(100):
                if server.pool.stats().killed == 2:
                    break
                await asyncio.sleep(0.02)
            assert server.pool.stats().killed == 2
            assert server.pool.stats().in_use == 0
            async with manager.lease("hanging") as handle:  # the server still serves
                assert await handle.env.step("again") == "echo again"
                with pytest.raises(TypeError, match="not JSON-serialisable"):
                    await handle.env.step("object")
                assert await handle.env.step("after") == "echo after"
        await _stop(server, task)
        stats = server.pool.stats()
        assert stats.created == stats.closed

    asyncio.run(main())


def test_tcp_servers_need_their_token(tmp_path):
    async def main():
        server, task = await _serving(SCRATCHPAD, "tcp://127.0.0.1:0", token="s3cret")
        wrong = ResourceManager(
            {"scratchpad": SCRATCHPAD},
            {"scratchpad": EnvPoolSettings(address=server.address, token="nope")},
        )
        with pytest.raises(UserError, match="wrong or missing token"):
            await wrong.start()
        right = ResourceManager(
            {"scratchpad": SCRATCHPAD},
            {"scratchpad": EnvPoolSettings(address=server.address, token="s3cret")},
        )
        async with right, right.lease("scratchpad") as handle:
            assert "saved" in await handle.env.step({"op": "write", "key": "a", "text": "b"})
        await _stop(server, task)

    asyncio.run(main())


def test_clear_errors_for_a_missing_or_mismatched_server(tmp_path, state_dir):
    async def main():
        missing = ResourceManager(
            {"scratchpad": SCRATCHPAD}, {"scratchpad": EnvPoolSettings(address="scratchpad")}
        )
        with pytest.raises(UserError, match="agentfly env up scratchpad"):
            await missing.start()
        address = f"unix://{tmp_path}/other.sock"
        server, task = await _serving(HANGING, address)
        mismatched = ResourceManager(
            {"scratchpad": SCRATCHPAD}, {"scratchpad": EnvPoolSettings(address=address)}
        )
        with pytest.raises(UserError, match="serves env 'hanging', not 'scratchpad'"):
            await mismatched.start()
        await _stop(server, task)

    asyncio.run(main())


def _cli(*arguments: str):
    return runner.invoke(build_app(), list(arguments))


def test_env_up_ls_down_and_a_rollout_through_the_server(state_dir, chat_template):
    from agentfly_cli.backends.scripted import ScriptedBackend
    from agentfly_cli.chat.parsers import get_parser
    from agentfly_cli.rollout.engine import RolloutEngine
    from agentfly_cli.settings.rollout import RolloutSettings
    from envs_builtin.scratchpad import notes_list, notes_read, notes_write

    up = _cli("env", "up", "scratchpad", "--size", "2", "--json")
    assert up.exit_code == 0, up.output
    record = json.loads(up.output)
    assert record["address"].startswith("unix://") and record["ready"]
    try:
        again = _cli("env", "up", "scratchpad")
        assert again.exit_code == 2 and "already runs" in again.output
        [row] = json.loads(_cli("env", "servers", "--json").output)
        assert (row["status"], row["stats"]["idle"], row["pool_max"]) == ("ready", 2, 2)

        def call(name, **arguments):
            return (
                "<tool_call>\n"
                + json.dumps({"name": name, "arguments": arguments})
                + "\n</tool_call>"
            )

        steps = [
            call("notes_list"),
            call("notes_write", key="x", text="t"),
            call("notes_read", key="x"),
        ]
        script = [[*steps, "done"] for _ in range(3)]
        manager = ResourceManager(
            {"scratchpad": SCRATCHPAD}, {"scratchpad": EnvPoolSettings(address="scratchpad")}
        )
        engine = RolloutEngine(
            ScriptedBackend(script, chat_template),
            chat_template,
            get_parser("hermes"),
            [notes_list, notes_write, notes_read],
            None,
            RolloutSettings(n=4, max_turns=3, seed=0),
            env_manager=manager,
        )
        tasks = [{"question": f"remember {i}"} for i in range(3)]
        trajectories = asyncio.run(engine.run(tasks))  # 12 chains share 2 envs, one at a time
        observations = [[c.observation for c in t.tool_calls] for t in trajectories]
        assert observations == [["(no notes)", "saved note 'x' (1 characters)", "t"]] * 12
        [row] = json.loads(_cli("env", "servers", "--json").output)
        assert row["stats"]["acquired"] == 12 and row["stats"]["in_use"] == 0
        assert row["stats"]["released"] == 12 and row["stats"]["created"] == 2
    finally:
        down = _cli("env", "down", "scratchpad", "--json")
    assert down.exit_code == 0, down.output
    assert json.loads(down.output)[0]["stopped_by"] == "shutdown"
    deadline = time.monotonic() + 5
    while pid_alive(record["pid"]) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not pid_alive(record["pid"])
    assert json.loads(_cli("env", "servers", "--json").output) == []
    assert not list(state_dir.glob("*.sock"))


def test_env_commands_reject_bad_input_with_one_line(state_dir):
    unknown_env = _cli("env", "up", "no_such_env")
    assert unknown_env.exit_code == 2 and "no_such_env" in unknown_env.output
    unknown_server = _cli("env", "down", "nothing")
    assert (
        unknown_server.exit_code == 2 and "no pool server named 'nothing'" in unknown_server.output
    )
    too_big = _cli("env", "up", "scratchpad", "--size", "3", "--max", "2")
    assert too_big.exit_code == 2 and "warm_size (3) exceeds pool_max (2)" in too_big.output
    bad_option = _cli("env", "up", "scratchpad", "--option", "oops")
    assert bad_option.exit_code == 2 and "KEY=VALUE" in bad_option.output
    unknown_option = _cli("env", "up", "python", "--option", "memory_gb=3")
    assert unknown_option.exit_code == 2
    assert "'memory_gb'" in unknown_option.output and "memory_mb" in unknown_option.output
    assert "Traceback" not in unknown_env.output + too_big.output


def test_a_dead_server_is_shown_then_forgotten(state_dir):
    from agentfly_cli.envs.state import ServerRecord, write_record

    write_record(ServerRecord(name="ghost", pid=2**22 + 7, address="unix:///nowhere", ready=True))
    [row] = json.loads(_cli("env", "servers", "--json").output)
    assert row["status"] == "dead"
    assert json.loads(_cli("env", "servers", "--json").output) == []
    assert os.listdir(state_dir) == []
