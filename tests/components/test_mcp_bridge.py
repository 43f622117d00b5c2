"""The MCP bridge: an MCP server's tools as agent tools, over stdio and streamable HTTP.

The server is tests/fixtures/mcp_server.py (mcp 2.x). Each test tags its servers with a unique
argument, so that leaked server processes can be found in /proc afterwards.
"""

from __future__ import annotations

import asyncio
import json
import os
import shlex
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from typer.testing import CliRunner

pytest.importorskip("mcp")

from agentfly_cli.cli.app import build_app  # noqa: E402
from agentfly_cli.components.mcp_tools import (  # noqa: E402
    McpSessionEnv,
    is_mcp_spec,
    mcp_tools,
    parse_target,
    tool_name,
)
from agentfly_cli.components.schema import JsonSchemaArguments  # noqa: E402
from agentfly_cli.errors import UserError  # noqa: E402
from agentfly_cli.trajectory import read_trajectories  # noqa: E402
from tests.helpers.paths import FIXTURES  # noqa: E402

SERVER = FIXTURES / "mcp_server.py"
runner = CliRunner()


def agentfly(*arguments):
    return runner.invoke(build_app(), [str(a) for a in arguments])


def server_command(tag: str, *extra: str) -> str:
    return shlex.join([sys.executable, str(SERVER), "--tag", tag, *extra])


def live_servers(tag: str) -> list[int]:
    """Pids of processes whose command line carries ``tag``."""
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if tag.encode() in cmdline and str(SERVER).encode() in cmdline:
            pids.append(int(entry.name))
    return pids


def wait_gone(tag: str, seconds: float = 5.0) -> list[int]:
    deadline = time.monotonic() + seconds
    while (pids := live_servers(tag)) and time.monotonic() < deadline:
        time.sleep(0.05)
    return pids


@pytest.fixture(scope="module")
def tag() -> str:
    """One per module, so that the server's listing is fetched once (it is cached by command)."""
    return f"t{uuid.uuid4().hex[:10]}"


def call(name: str, **arguments) -> str:
    return "<tool_call>\n" + json.dumps({"name": name, "arguments": arguments}) + "\n</tool_call>"


# -- specs, names and schemas ---------------------------------------------------------------------
def test_parse_specs():
    target = parse_target("mcp:npx -y @x/server --root '/a b'")
    assert target.command == ("npx", "-y", "@x/server", "--root", "/a b")
    assert target.url is None and target.prefix == "" and target.select is None
    assert target.env_name.startswith("mcp-") and len(target.env_name) == 12
    url = parse_target("mcp[fs]:http://127.0.0.1:8000/mcp#read_file")
    assert (url.url, url.prefix, url.select) == ("http://127.0.0.1:8000/mcp", "fs", "read_file")
    assert url.env_name.startswith("mcp-fs-")
    assert parse_target("mcp:python s.py#add").command == ("python", "s.py")
    assert parse_target("mcp:python s.py").env_name == parse_target("mcp:python  s.py#x").env_name
    odd = parse_target("mcp:python s.py '--tag=a#b'#add")
    assert odd.select == "add" and McpSessionEnv(odd.key).target.command == odd.command
    assert odd.command == ("python", "s.py", "--tag=a#b")
    assert parse_target("mcp:python s.py '--tag=a#b'").select is None
    assert is_mcp_spec("mcp:x") and is_mcp_spec("mcp[p]:x")
    assert not is_mcp_spec("my_tools.py:search") and not is_mcp_spec("calculator")
    with pytest.raises(UserError, match="name the server"):
        parse_target("mcp:  ")
    with pytest.raises(UserError, match="cannot split"):
        parse_target("mcp:python 'unclosed")


def test_tool_names_are_cleaned():
    assert tool_name("", "echo.text") == "echo_text"
    assert tool_name("fs", "read/file") == "fs_read_file"
    assert len(tool_name("", "x" * 100)) == 64


def test_json_schema_arguments_validate_like_function_tools():
    import pydantic

    schema = {
        "type": "object",
        "title": "args",
        "properties": {
            "n": {"type": "integer", "title": "N"},
            "ok": {"type": "boolean"},
            "point": {"$ref": "#/$defs/Point"},
        },
        "required": ["n"],
        "$defs": {"Point": {"type": "object", "properties": {"x": {"type": "number"}}}},
    }
    spec = JsonSchemaArguments(schema, label="demo")
    assert "title" not in spec.parameters and spec.parameters["additionalProperties"] is False
    assert spec.parameters["properties"]["point"]["properties"]["x"] == {"type": "number"}
    assert spec.validate({"n": "3", "ok": "true"}) == {"n": 3, "ok": True}
    with pytest.raises(pydantic.ValidationError) as info:
        spec.validate({"ok": 1, "extra": 2, "point": {"x": "far"}})
    from agentfly_cli.components.schema import format_validation_error

    text = format_validation_error("demo", info.value)
    for part in (
        "missing required argument 'n'",
        "unknown argument 'extra'",
        "argument 'ok': 1 is not of type 'boolean'",
        "argument 'point.x': 'far' is not of type 'number'",
    ):
        assert part in text
    assert JsonSchemaArguments({"type": "object"}, label="any").validate({"z": 1}) == {"z": 1}


# -- tools over stdio ---------------------------------------------------------------------------
def test_listing_builds_tools_with_schemas(tag):
    tools = {t.name: t for t in mcp_tools(f"mcp:{server_command(tag)}")}
    assert sorted(tools) == ["add", "counter_increment", "echo_text", "fail", "sleep"]
    add = tools["add"]
    assert add.description == "Add two integers."
    assert add.parameters["required"] == ["a", "b"]
    assert add.parameters["properties"]["a"] == {"type": "integer"}
    assert tools["echo_text"].remote_name == "echo.text"
    assert add.env == parse_target(f"mcp:{server_command(tag)}").env_name
    assert add.env_spec.name == add.env and add.env_spec.create().fresh_session is True
    assert {t.env for t in tools.values()} == {add.env}  # one session serves them all
    prefixed = mcp_tools(f"mcp[calc]:{server_command(tag)}#add")
    assert [t.name for t in prefixed] == ["calc_add"]
    with pytest.raises(UserError, match="has no tool 'nope'; its tools: add, "):
        mcp_tools(f"mcp:{server_command(tag)}#nope")
    assert wait_gone(tag) == []


def test_session_env_calls_isolates_and_survives_timeouts(tag):
    async def scenario():
        env = McpSessionEnv(server_command(tag))
        other = McpSessionEnv(server_command(tag), fresh_session=False)
        await asyncio.gather(env.start(), other.start())
        try:
            assert len(live_servers(tag)) == 2
            assert await env.step({"tool": "add", "arguments": {"a": 2, "b": 3}}) == {
                "text": "5",
                "is_error": False,
            }
            counts = [await env.step({"tool": "counter_increment"}) for _ in range(2)]
            assert [c["text"] for c in counts] == ["counter=1", "counter=2"]
            assert (await other.step({"tool": "counter_increment"}))["text"] == "counter=1"
            failed = await env.step({"tool": "fail", "arguments": {"reason": "no"}})
            assert failed["is_error"] and "fail tool refused: no" in failed["text"]
            with pytest.raises(asyncio.TimeoutError):
                await asyncio.wait_for(
                    env.step({"tool": "sleep", "arguments": {"seconds": 5}}), 0.3
                )
            assert (await env.step({"tool": "counter_increment"}))["text"] == "counter=3"
            assert await env.healthy()
            await env.reset(None)  # used: the next trajectory gets a fresh session
            await other.reset(None)  # fresh_session=False: kept
            assert (await env.step({"tool": "counter_increment"}))["text"] == "counter=1"
            assert (await other.step({"tool": "counter_increment"}))["text"] == "counter=2"
            with pytest.raises(ValueError, match="an MCP action is"):
                await env.step({"arguments": {}})
        finally:
            await asyncio.gather(env.close(), other.close())
        await env.close()  # twice is fine
        assert not await env.healthy()

    asyncio.run(scenario())
    assert wait_gone(tag) == []


def test_a_server_that_never_answers_times_out_and_is_stopped(tag):
    from agentfly_cli.components.mcp_tools import McpSessionError
    from agentfly_cli.errors import UserError

    env = McpSessionEnv(server_command(tag, "--hang"), connect_timeout=1.0)
    started = time.perf_counter()
    with pytest.raises(McpSessionError, match=r"did not answer within 1 s") as caught:
        asyncio.run(env.start())
    # the server listed its tools before: a session that fails now fails its tool call (an
    # error observation), not the whole rollout as a configuration error would
    assert not isinstance(caught.value, UserError)
    assert time.perf_counter() - started < 8
    assert live_servers(tag) == []  # stopped before start() gave up


def test_tools_call_and_show_through_the_cli(tag):
    spec = f"mcp:{server_command(tag)}"
    shown = agentfly("tools", "show", spec, "--json")
    assert shown.exit_code == 0, shown.output
    names = [s["function"]["name"] for s in json.loads(shown.stdout)]
    assert names == ["add", "counter_increment", "fail", "sleep", "echo_text"]
    ok = agentfly("tools", "call", f"{spec}#add", "--args", '{"a": 20, "b": "22"}', "--json")
    assert ok.exit_code == 0, ok.output
    assert json.loads(ok.stdout)["observation"] == "42"
    failed = agentfly("tools", "call", f"{spec}#fail", "--json")
    assert failed.exit_code == 1
    result = json.loads(failed.stdout)
    assert result["error_kind"] == "exception"
    assert result["observation"] == "tool 'fail' failed: fail tool refused: as requested"
    several = agentfly("tools", "call", spec)
    assert several.exit_code == 2 and "pick one with" in several.output
    assert wait_gone(tag) == []


@pytest.mark.parametrize(
    ("command", "message"),
    [
        ("no-such-mcp-server --stdio", "command 'no-such-mcp-server' not found on PATH"),
        ("CRASH", "exited before it answered; its stderr ends: mcp_server: cannot open the "),
        ("http://127.0.0.1:9/mcp", "cannot reach MCP server at http://127.0.0.1:9/mcp"),
    ],
)
def test_servers_that_cannot_start_are_one_line_errors(tag, command, message):
    if command == "CRASH":
        command = server_command(tag, "--crash")
    result = agentfly("tools", "call", f"mcp:{command}#add")
    assert result.exit_code == 2
    assert message in result.output
    assert len(result.output.strip().splitlines()) == 1
    assert "Traceback" not in result.output


# -- rollouts -------------------------------------------------------------------------------------
@pytest.fixture
def task_files(tmp_path):
    data = tmp_path / "data.jsonl"
    rows = [{"question": "What is 2 + 3?", "answer": "5"}, {"question": "4 + 4?", "answer": "8"}]
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    script = tmp_path / "script.jsonl"
    lines = [
        [
            call("counter_increment") + call("add", a=2, b=3),
            call("counter_increment") + call("fail", reason="bad luck"),
            call("add", a="two", b=3) + call("nope"),
            call("answer", answer="5"),
        ],
        [call("counter_increment"), call("add", a=4, b=4), call("answer", answer="8")],
    ]
    script.write_text("".join(json.dumps({"responses": r}) + "\n" for r in lines))
    return data, script


def rollout(tiny_model, task_files, tmp_path, tools, *extra):
    data, script = task_files
    out = tmp_path / "out.jsonl"
    result = agentfly(
        "rollout",
        "--model", tiny_model,
        "--backend", "scripted",
        "--script", script,
        "--data", data,
        "--tools", tools,
        "--reward", "math_equal",
        "--parser", "hermes",
        "--n", "2",
        "--max-turns", "5",
        "--out", out,
        "--set", "rollout.max_errors=8",
        "--quiet",
        *extra,
    )  # fmt: skip
    return result, out


def observations(trajectory, name):
    return [c.observation for c in trajectory.tool_calls if c.name == name]


def test_scripted_rollout_isolates_sessions_per_trajectory(tiny_model, task_files, tmp_path, tag):
    spec = f"mcp:{server_command(tag)}"
    result, out = rollout(tiny_model, task_files, tmp_path, f"{spec},answer", "--limit", "1")
    assert result.exit_code == 0, result.output
    trajectories = read_trajectories(out)
    assert len(trajectories) == 2
    for trajectory in trajectories:
        trajectory.check()
        assert trajectory.reward == 1.0
        assert trajectory.finish_reason == "terminal_tool"
    first = [t for t in trajectories if t.task_index == 0]
    for trajectory in first:  # each chain counts from 1 in its own session
        assert observations(trajectory, "counter_increment") == ["counter=1", "counter=2"]
        assert observations(trajectory, "add")[0] == "5"
        failed = [c for c in trajectory.tool_calls if c.name == "fail"][0]
        assert (failed.status, failed.error_kind) == ("error", "exception")
        assert failed.observation == "tool 'fail' failed: fail tool refused: bad luck"
        bad = [c for c in trajectory.tool_calls if c.name == "add"][1]
        assert bad.error_kind == "invalid_arguments"
        assert "argument 'a': 'two' is not of type 'integer'" in bad.observation
        unknown = [c for c in trajectory.tool_calls if c.name == "nope"][0]
        assert unknown.error_kind == "unknown_tool"
    assert "counter_increment" in result.stdout  # the summary's tool table
    assert wait_gone(tag) == []  # every server process stopped with the rollout


def test_sessions_are_reused_when_fresh_session_is_off(tiny_model, task_files, tmp_path, tag):
    spec = f"mcp:{server_command(tag)}"
    env = parse_target(spec).env_name
    result, out = rollout(
        tiny_model, task_files, tmp_path, f"{spec},answer",
        "--n", "1",
        "--set", "rollout.concurrency=1",
        "--set", f"envs.{env}.options.fresh_session=false",
        "--set", f"envs.{env}.pool_max=1",
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    trajectories = sorted(read_trajectories(out), key=lambda t: t.task_index)
    counts = [observations(t, "counter_increment") for t in trajectories]
    assert counts == [["counter=1", "counter=2"], ["counter=3"]]  # one session, kept
    assert wait_gone(tag) == []


def test_rollout_errors_for_bad_servers_are_one_line(tiny_model, task_files, tmp_path, tag):
    result, _ = rollout(tiny_model, task_files, tmp_path, "mcp:no-such-mcp-server,answer")
    assert result.exit_code == 2
    assert "command 'no-such-mcp-server' not found on PATH" in result.output
    spec = f"mcp:{server_command(tag)}"
    clash, _ = rollout(tiny_model, task_files, tmp_path, f"{spec},{spec}#add,answer")
    assert clash.exit_code == 2
    assert "the name 'add' is given by both" in clash.output
    assert wait_gone(tag) == []


# -- streamable HTTP ------------------------------------------------------------------------------
@pytest.fixture
def http_server(tag):
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    process = subprocess.Popen(
        [sys.executable, str(SERVER), "--tag", tag, "--http", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 20
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), 0.2).close()
            break
        except OSError:
            if process.poll() is not None or time.monotonic() > deadline:
                process.kill()
                pytest.fail("the HTTP MCP server did not start")
            time.sleep(0.05)
    yield f"http://127.0.0.1:{port}/mcp"
    process.terminate()
    process.wait(10)


def test_streamable_http_tools_and_rollout(http_server, tiny_model, task_files, tmp_path):
    ok = agentfly("tools", "call", f"mcp:{http_server}#add", "--args", '{"a": 1, "b": 2}')
    assert ok.exit_code == 0, ok.output
    assert ok.stdout.strip() == "3"
    result, out = rollout(tiny_model, task_files, tmp_path, f"mcp:{http_server},answer")
    assert result.exit_code == 0, result.output
    trajectories = read_trajectories(out)
    assert [t.reward for t in trajectories] == [1.0] * 4
    for trajectory in trajectories:
        trajectory.check()
        assert observations(trajectory, "add")[0] in ("5", "8")
