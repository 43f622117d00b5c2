"""Calling tools: validation, execution policy, and every error path."""

from __future__ import annotations

import asyncio
import dataclasses
import enum
import threading
import time

import pydantic
import pytest

from agentfly_cli import Tool, ToolResult, tool
from agentfly_cli.components.tools import ToolErrorKind, truncate_observation
from agentfly_cli.envs.base import BaseEnv


@tool
def add(a: int, b: int = 0) -> int:
    """Add two integers."""
    return a + b


@tool
async def async_add(a: int, b: int) -> int:
    """Add two integers, asynchronously."""
    await asyncio.sleep(0)
    return a + b


class Shade(enum.Enum):
    LIGHT = "light"
    DARK = "dark"


class Box(pydantic.BaseModel):
    width: int
    height: int


def run(coro):
    return asyncio.run(coro)


def test_sync_and_async_functions():
    sync_result = run(add(a=2, b=3))
    async_result = run(async_add(a=2, b=3))
    assert isinstance(sync_result, ToolResult)
    assert (sync_result.observation, sync_result.status) == ("5", "ok")
    assert (async_result.observation, async_result.status) == ("5", "ok")
    assert sync_result.tool == "add" and sync_result.error_kind is None
    assert sync_result.info["latency_s"] >= 0


def test_bare_and_parametrised_decorators_give_tools():
    def f(x: str) -> str:
        return x

    assert isinstance(tool(f), Tool)
    assert isinstance(tool()(f), Tool)
    assert tool(name="g")(f).name == "g"


def test_arguments_are_converted_to_their_types():
    @tool
    def describe(shade: Shade, box: Box, sizes: list[int]) -> str:
        assert isinstance(shade, Shade) and isinstance(box, Box)
        return f"{shade.value} {box.width}x{box.height} {sum(sizes)}"

    result = run(describe(shade="dark", box={"width": 2, "height": 3}, sizes=[1, 2]))
    assert result.observation == "dark 2x3 3"


@pytest.mark.parametrize(
    ("arguments", "fragments"),
    [
        ({}, ["missing required argument 'a'"]),
        ({"a": 1, "c": 2}, ["unknown argument 'c'"]),
        ({"a": "one"}, ["argument 'a'", "integer", "'one'"]),
        ({"a": 1.5}, ["argument 'a'"]),
        ({"a": [1]}, ["argument 'a'"]),
        ({"a": 1, "b": None}, ["argument 'b'"]),
    ],
)
def test_bad_arguments_name_the_argument(arguments, fragments):
    result = run(add.invoke(arguments))
    assert result.status == "error"
    assert result.error_kind == ToolErrorKind.INVALID_ARGUMENTS
    assert result.observation.startswith("invalid arguments for tool 'add'")
    for fragment in fragments:
        assert fragment in result.observation
    assert "expected: a: integer, b: integer (optional)" in result.observation


def test_nested_argument_errors_give_the_path():
    @tool
    def area(box: Box) -> int:
        return box.width * box.height

    result = run(area.invoke({"box": {"width": "wide"}}))
    assert "argument 'box.width'" in result.observation
    assert "missing required argument 'box.height'" in result.observation


def test_enum_and_literal_arguments_are_checked():
    @tool
    def paint(shade: Shade) -> str:
        return shade.value

    result = run(paint.invoke({"shade": "purple"}))
    assert result.error_kind == ToolErrorKind.INVALID_ARGUMENTS
    assert "'light'" in result.observation and "'dark'" in result.observation


def test_arguments_as_json_text():
    assert run(add.invoke('{"a": 4, "b": 5}')).observation == "9"
    broken = run(add.invoke('{"a": 4,'))
    assert broken.error_kind == ToolErrorKind.INVALID_JSON
    assert "not valid JSON" in broken.observation
    not_object = run(add.invoke("[1, 2]"))
    assert not_object.error_kind == ToolErrorKind.INVALID_ARGUMENTS
    assert "must be a JSON object" in not_object.observation


def test_exception_becomes_error_observation_naming_the_tool():
    @tool
    def explode(x: int) -> int:
        raise ZeroDivisionError("cannot divide")

    result = run(explode(x=1))
    assert result.status == "error"
    assert result.error_kind == ToolErrorKind.EXCEPTION
    assert result.observation == "tool 'explode' failed: ZeroDivisionError: cannot divide"
    assert result.info["exception"] == "ZeroDivisionError"


def test_async_exception_too():
    @tool
    async def explode() -> None:
        raise RuntimeError()

    result = run(explode())
    assert result.observation == "tool 'explode' failed: RuntimeError: (no message)"


def test_sync_timeout_does_not_block_the_loop():
    release = threading.Event()

    @tool(timeout=0.2)
    def stuck() -> str:
        release.wait(5)
        return "late"

    async def scenario():
        ticks = 0

        async def ticker():
            nonlocal ticks
            while True:
                await asyncio.sleep(0.01)
                ticks += 1

        task = asyncio.create_task(ticker())
        result = await stuck()
        task.cancel()
        return result, ticks

    result, ticks = run(scenario())
    release.set()
    assert result.error_kind == ToolErrorKind.TIMEOUT
    assert result.observation == "tool 'stuck' timed out after 0.2 s"
    assert ticks >= 5  # the event loop kept running while the sync tool blocked


def test_async_timeout_and_per_call_override():
    @tool(timeout=5)
    async def slow() -> str:
        await asyncio.sleep(2)
        return "done"

    result = run(slow.invoke({}, timeout=0.05))
    assert result.error_kind == ToolErrorKind.TIMEOUT
    assert "0.05 s" in result.observation


def test_sync_tools_run_concurrently_in_threads():
    main_thread = threading.get_ident()
    seen = []

    @tool
    def blocking(i: int) -> int:
        seen.append(threading.get_ident())
        time.sleep(0.2)
        return i

    async def many():
        return await asyncio.gather(*(blocking(i=i) for i in range(16)))

    started = time.perf_counter()
    results = run(many())
    elapsed = time.perf_counter() - started
    assert [r.observation for r in results] == [str(i) for i in range(16)]
    assert main_thread not in seen
    assert elapsed < 16 * 0.2 / 2  # far from serial: the calls overlapped


def test_json_serialisable_return_values():
    @dataclasses.dataclass
    class Hit:
        title: str
        score: float

    @tool
    def various(kind: str):
        return {
            "str": "plain text",
            "int": 7,
            "none": None,
            "dict": {"b": [1, 2], "a": "é"},
            "list": [1, "two", None],
            "model": Box(width=1, height=2),
            "dataclass": Hit("x", 0.5),
            "enum": Shade.DARK,
            "bool": True,
        }[kind]

    expected = {
        "str": "plain text",
        "int": "7",
        "none": "",
        "dict": '{"b": [1, 2], "a": "é"}',
        "list": '[1, "two", null]',
        "model": '{"width": 1, "height": 2}',
        "dataclass": '{"title": "x", "score": 0.5}',
        "enum": '"dark"',
        "bool": "true",
    }
    for kind, observation in expected.items():
        result = run(various(kind=kind))
        assert result.ok and result.observation == observation, kind


def test_unserialisable_return_is_an_error():
    @tool
    def handle() -> object:
        return threading.Lock()

    result = run(handle())
    assert result.error_kind == ToolErrorKind.BAD_RETURN
    assert "not JSON-serialisable" in result.observation and "handle" in result.observation


def test_returning_a_tool_result_keeps_it():
    @tool
    def custom() -> ToolResult:
        return ToolResult("partial", "error", {"why": "custom"}, error_kind="exception")

    result = run(custom())
    assert (result.observation, result.status, result.info["why"]) == ("partial", "error", "custom")


def test_long_observations_are_truncated_with_a_marker():
    @tool(max_observation_chars=100)
    def long() -> str:
        return "a" * 500 + "END"

    result = run(long())
    assert result.info["truncated"] is True
    assert "[truncated 403 of 503 characters]" in result.observation
    assert result.observation.startswith("a" * 67) and result.observation.endswith("END")
    assert len(result.observation) < 200
    untouched = run(long.invoke({}, max_observation_chars=None))
    assert len(untouched.observation) == 503 and "truncated" not in untouched.info


@pytest.mark.parametrize("limit", [1, 2, 10, 99])
def test_truncate_observation_limits(limit):
    text = "x" * 100
    cut, truncated = truncate_observation(text, limit)
    assert truncated
    assert cut.count("x") == limit


def test_terminal_tools_mark_their_results():
    @tool(terminal=True)
    def finish(answer: str) -> str:
        return answer

    assert finish.terminal
    result = run(finish(answer="42"))
    assert result.terminal and result.observation == "42"
    assert not run(add(a=1)).terminal


class Counter:
    def __init__(self, start: int = 0):
        self.count = start

    @tool
    def increment(self, by: int = 1) -> int:
        """Increase the counter."""
        self.count += by
        return self.count

    @tool(name="peek")
    async def current(self) -> int:
        """Read the counter."""
        return self.count


def test_methods_bind_per_instance():
    first, second = Counter(), Counter(100)
    assert first.increment is first.increment
    assert first.increment is not second.increment
    assert "self" not in first.increment.parameters["properties"]
    assert run(first.increment(by=2)).observation == "2"
    assert run(first.increment()).observation == "3"
    assert run(second.increment()).observation == "101"
    assert (first.count, second.count) == (3, 101)
    assert run(second.current()).observation == "101"
    assert second.current.name == "peek"


def test_unbound_method_tool_refuses_to_run():
    unbound = Counter.increment
    assert isinstance(unbound, Tool) and not unbound.is_bound
    with pytest.raises(TypeError, match="use it from an instance"):
        run(unbound())


class Memory(BaseEnv):
    def __init__(self):
        self.items: list[str] = []

    async def step(self, action):
        self.items.append(action)
        return len(self.items)


@tool(env="memory")
async def remember(env: Memory, item: str) -> int:
    """Remember an item."""
    return await env.step(item)


def test_env_is_passed_to_the_tool():
    env = Memory()
    assert run(remember(env=env, item="a")).observation == "1"
    assert run(remember.invoke({"item": "b"}, env=env)).observation == "2"
    assert env.items == ["a", "b"]


def test_missing_env_is_an_error_observation():
    result = run(remember(item="a"))
    assert result.error_kind == ToolErrorKind.MISSING_ENV
    assert "needs a 'memory' environment" in result.observation


def test_model_cannot_inject_the_env():
    result = run(remember.invoke({"item": "a", "env": "fake"}))
    assert result.error_kind == ToolErrorKind.INVALID_ARGUMENTS
    assert "unknown argument 'env'" in result.observation


def test_call_sync_convenience():
    assert add.call_sync({"a": 1, "b": 1}).observation == "2"
