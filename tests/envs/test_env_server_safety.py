"""Pool servers under abuse: recycled pids, path-like names, unauthenticated floods, timeouts."""

from __future__ import annotations

import asyncio
import json
import math
import os
import socket
import struct
import subprocess
import threading
import time
import tracemalloc
from pathlib import Path

import pytest
from typer.testing import CliRunner

from agentfly_cli.cli.app import build_app
from agentfly_cli.envs.process_identity import identify, own_identity
from agentfly_cli.envs.remote import Connection, resolve_address
from agentfly_cli.envs.state import ServerRecord, read_records, write_record
from agentfly_cli.errors import UserError
from agentfly_cli.pool_server.server import PoolServer
from agentfly_cli.settings.envs import EnvPoolSettings
from envs_builtin.scratchpad import SCRATCHPAD

runner = CliRunner()
HELLO_MAX_BYTES = 4096  # the server's limit on the first frame (server.HELLO_MAX_BYTES)


def agentfly(*arguments: str):
    return runner.invoke(build_app(), list(arguments))


@pytest.fixture
def state_dir(tmp_path, monkeypatch) -> Path:
    folder = tmp_path / "state"
    monkeypatch.setenv("AGENTFLY_STATE_DIR", str(folder))
    return folder


@pytest.fixture
def bystander():
    """An unrelated process, as one that got a crashed server's pid."""
    process = subprocess.Popen(["sleep", "60"])
    yield process
    process.kill()
    process.wait()


# -- a recycled pid is never signalled -----------------------------------------------------------
def _stale_record(kind: str, pid: int, state_dir: Path) -> ServerRecord:
    """A record naming ``pid``: an older version's (no identity) or a crashed server's."""
    address = f"unix://{state_dir}/scratchpad.sock"
    record = ServerRecord(name="scratchpad", pid=pid, address=address, ready=True, pool_max=2)
    if kind == "crashed":
        identity = identify(pid)
        assert identity is not None
        record.start_time = identity.start_time - 1  # it started before its pid was reused
        record.cmdline = "python -m agentfly_cli.pool_server.server scratchpad --config {}"
    return record


@pytest.mark.parametrize("kind", ["legacy", "crashed"])
def test_env_down_never_signals_a_process_that_reused_the_servers_pid(state_dir, bystander, kind):
    write_record(_stale_record(kind, bystander.pid, state_dir))
    down = agentfly("env", "down", "scratchpad", "--json")
    assert down.exit_code == 0, down.output
    [result] = json.loads(down.output)
    time.sleep(0.2)
    assert bystander.poll() is None, f"env down killed an unrelated process: {result}"
    assert "not signalled" in result["stopped_by"], result
    assert read_records() == []


@pytest.mark.parametrize("kind", ["legacy", "crashed"])
def test_env_ls_shows_a_reused_pid_as_stale_and_forgets_it(state_dir, bystander, kind):
    write_record(_stale_record(kind, bystander.pid, state_dir))
    [row] = json.loads(agentfly("env", "servers", "--json").output)
    assert row["status"] == "stale", row
    assert f"pid {bystander.pid} now belongs to another process" in row["error"]
    assert json.loads(agentfly("env", "servers", "--json").output) == []
    assert bystander.poll() is None


def test_server_state_tells_the_server_from_a_process_with_its_pid(state_dir):
    from agentfly_cli.envs.state import server_state
    from agentfly_cli.pool_server.server import HELLO_MAX_BYTES as limit

    assert limit == HELLO_MAX_BYTES
    me = own_identity()
    assert me is not None
    record = ServerRecord(
        name="x", pid=os.getpid(), address="", start_time=me.start_time, cmdline=me.cmdline
    )
    assert server_state(record) == "alive"
    record.start_time = me.start_time + 1
    assert server_state(record) == "stale"
    record.start_time, record.cmdline = me.start_time, me.cmdline + " other"
    assert server_state(record) == "stale"
    assert server_state(ServerRecord(name="x", pid=2**22 + 7, address="")) == "dead"


# -- names are names, not paths ------------------------------------------------------------------
@pytest.mark.parametrize(
    "name", ["../victim", "a/b", "..", "", ".hidden", "x" * 65, "sp ace", "tab\there"]
)
def test_server_names_that_are_paths_or_odd_are_one_line_errors(state_dir, name):
    for command in (["env", "up", name], ["env", "down", name]):
        result = agentfly(*command)
        assert result.exit_code == 2, (command, result.output)
        assert "not a valid pool server name" in result.output, result.output
        assert len(result.output.strip().splitlines()) == 1 and "Traceback" not in result.output
    with pytest.raises(UserError, match="not a valid pool server name"):
        resolve_address(name)


def test_env_down_with_a_path_touches_nothing_outside_the_state_folder(state_dir, tmp_path):
    state_dir.mkdir(parents=True)
    victim = tmp_path / "victim.json"
    victim.write_text(
        json.dumps({"name": "../victim", "pid": 2**22 + 7, "address": f"unix://{tmp_path}/v.sock"})
    )
    (tmp_path / "v.sock").write_text("")
    result = agentfly("env", "down", "../victim")
    assert result.exit_code == 2 and "not a valid pool server name" in result.output
    assert victim.exists() and (tmp_path / "v.sock").exists()


def test_a_record_cannot_make_env_ls_delete_a_file_elsewhere(state_dir, tmp_path):
    state_dir.mkdir(parents=True)
    elsewhere = tmp_path / "precious.sock"
    elsewhere.write_text("keep me")
    record = {"name": "../precious", "pid": 2**22 + 7, "address": f"unix://{elsewhere}"}
    (state_dir / "ghost.json").write_text(json.dumps(record))
    [row] = json.loads(agentfly("env", "servers", "--json").output)
    assert (row["name"], row["status"]) == ("ghost", "dead")  # the file's name is its name
    assert elsewhere.read_text() == "keep me"
    assert os.listdir(state_dir) == []


# -- authentication comes before buffering -------------------------------------------------------
async def _serving(address: str, token: str = "", **config):
    server = PoolServer(SCRATCHPAD, EnvPoolSettings(**config), address, token)
    task = asyncio.create_task(server.serve())
    for _ in range(500):
        if server._server is not None:
            return server, task
        await asyncio.sleep(0.01)
    raise AssertionError("the server did not start")


def _flood(address: str, claimed: int, payload: bytes, out: dict) -> None:
    """A peer that announces a ``claimed``-byte frame and sends ``payload`` without a hello."""
    host, port = address.removeprefix("tcp://").rsplit(":", 1)
    with socket.create_connection((host, int(port))) as peer:
        peer.settimeout(5)
        sent = 0
        try:
            peer.sendall(struct.pack(">I", claimed))
            view = memoryview(payload)
            for start in range(0, len(view), 2**16):
                sent += peer.send(view[start : start + 2**16])
        except OSError:
            pass
        out["sent"] = sent
        try:
            out["closed"] = peer.recv(1) == b""
        except ConnectionResetError:
            out["closed"] = True
        except OSError:
            out["closed"] = False


def test_tcp_server_refuses_a_big_unauthenticated_frame_without_buffering_it():
    payload = bytes(16 * 2**20)  # allocated before the measurement starts

    async def main():
        server, task = await _serving("tcp://127.0.0.1:0", token="s3cret")
        out: dict = {}
        tracemalloc.start()
        try:
            began = time.monotonic()
            flood = threading.Thread(target=_flood, args=(server.address, 60 * 2**20, payload, out))
            flood.start()
            while flood.is_alive():
                await asyncio.sleep(0.01)
            closed_after = time.monotonic() - began
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        assert out["closed"], "the server kept an unauthenticated 60 MB frame open"
        assert closed_after < 4.0  # closed at the header, not after the hello timeout (10 s)
        assert peak < 2 * 2**20, f"the server buffered {peak / 2**20:.1f} MB for a stranger"
        assert out["sent"] < len(payload)

        connection = Connection(server.address, "s3cret")  # and it serves real clients on
        assert (await connection.open())["env"] == "scratchpad"
        big = {"question": "x" * (16 * HELLO_MAX_BYTES)}  # after the hello, large frames pass
        await connection.request({"op": "acquire", "task": big, "timeout": 5})
        written = await connection.request(
            {"op": "step", "action": {"op": "write", "key": "k", "text": "v"}}
        )
        assert "saved" in written
        await connection.request({"op": "release"})
        connection.close()
        server.stop()
        await asyncio.wait_for(task, 10)

    asyncio.run(main())


def test_a_hello_larger_than_the_limit_is_refused_even_with_the_token():
    async def main():
        server, task = await _serving("tcp://127.0.0.1:0", token="s3cret")
        connection = Connection(server.address, "s3cret" + " " * HELLO_MAX_BYTES)
        with pytest.raises(ConnectionError):
            await connection.open(timeout=5)
        server.stop()
        await asyncio.wait_for(task, 10)

    asyncio.run(main())


# -- bad timeouts are error replies --------------------------------------------------------------
@pytest.mark.parametrize("busy", [False, True], ids=["env-free", "pool-busy"])
def test_nan_infinite_or_negative_acquire_timeouts_are_error_replies(tmp_path, busy):
    async def main():
        server, task = await _serving(f"unix://{tmp_path}/s.sock", warm_size=1, pool_max=1)
        holder = None
        if busy:
            holder = Connection(server.address, "")
            await holder.open()
            await holder.request({"op": "acquire", "timeout": 5})
        for timeout in (math.nan, math.inf, -math.inf, -1, "5", True):
            connection = Connection(server.address, "")
            await connection.open()
            with pytest.raises(ValueError, match="'timeout' must be a"):
                await asyncio.wait_for(connection.request({"op": "acquire", "timeout": timeout}), 3)
            assert (await connection.request({"op": "stats"}))["env"] == "scratchpad"
            connection.close()
        stats = server.pool.stats()
        assert (stats.in_use, stats.waiting, stats.timeouts) == (int(busy), 0, 0)
        if holder is not None:
            await holder.request({"op": "release"})
            holder.close()
        server.stop()
        await asyncio.wait_for(task, 10)

    asyncio.run(main())


def test_env_down_still_signals_the_real_server_when_it_does_not_answer(state_dir):
    """The identity check lets the recorded server itself be signalled: a frozen server that
    cannot answer `shutdown` is killed."""
    import signal

    from agentfly_cli.envs.state import pid_alive, read_record, server_state

    up = agentfly("env", "up", "scratchpad", "--json")
    assert up.exit_code == 0, up.output
    pid = json.loads(up.output)["pid"]
    record = read_record("scratchpad")
    assert record is not None and record.start_time is not None
    assert "agentfly_cli.pool_server.server" in record.cmdline and server_state(record) == "alive"
    os.kill(pid, signal.SIGSTOP)  # it cannot answer, nor act on SIGTERM
    try:
        down = agentfly("env", "down", "scratchpad", "--timeout", "0.5", "--json")
        assert down.exit_code == 0, down.output
        assert json.loads(down.output)[0]["stopped_by"] == "SIGKILL"
        deadline = time.monotonic() + 5
        while pid_alive(pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not pid_alive(pid)
    finally:
        if pid_alive(pid):
            os.kill(pid, signal.SIGKILL)
