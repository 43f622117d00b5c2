"""The built-in tools, rewards and environment, reached through the plugin registry."""

from __future__ import annotations

import asyncio

import pytest

from agentfly_cli.components.tools import ToolErrorKind
from agentfly_cli.envs.base import Env, standalone_env
from agentfly_cli.plugin_host.plugins import load_plugins


@pytest.fixture(scope="module")
def components():
    return load_plugins(only={"agentfly-cli"}).components


def run(coro):
    return asyncio.run(coro)


@pytest.mark.parametrize(
    ("expression", "observation"),
    [("2**10 + 3*7", "1045"), ("7/2", "3.5"), ("2^10", "1024"), ("sqrt(16)", "4")],
)
def test_calculator(components, expression, observation):
    result = run(components.tools.get("calculator")(expression=expression))
    assert result.ok and result.observation == observation


@pytest.mark.timeout(10)
@pytest.mark.parametrize("expression", ["9**9**9**9", "10**10**10", "factorial(10**6)"])
def test_calculator_refuses_huge_numbers_at_once(components, expression):
    result = run(components.tools.get("calculator")(expression=expression))
    assert result.status == "error" and result.error_kind == ToolErrorKind.EXCEPTION
    assert "calculator" in result.observation and "too large" in result.observation
    assert result.info["latency_s"] < 1.0


@pytest.mark.parametrize("expression", ["__import__('os').system('true')", "open('x')", "x"])
def test_calculator_refuses_code(components, expression):
    result = run(components.tools.get("calculator")(expression=expression))
    assert result.status == "error"


def test_answer_is_terminal(components):
    answer = components.tools.get("answer")
    assert answer.terminal
    result = run(answer(answer=" 408 "))
    assert result.terminal and result.observation == "408"


@pytest.mark.parametrize(
    ("name", "prediction", "gold", "expected"),
    [
        ("exact_match", "408", 408, 1.0),
        ("exact_match", "408 ", "408", 1.0),
        ("exact_match", "Paris", "paris", 0.0),
        ("qa_em", "The Paris!", "paris", 1.0),
        ("qa_em", "Lyon", ["Paris", "Lyon"], 1.0),
        ("qa_f1", "the cat sat", "a cat sat down", 0.8),
        ("math_equal", "The answer is \\frac{1}{2}", "0.5", 1.0),
        ("math_equal", "43", 42, 0.0),
    ],
)
def test_builtin_rewards(components, name, prediction, gold, expected):
    result = run(components.rewards.get(name).score(prediction, None, {"answer": gold}))
    assert not result.failed, result.error
    assert result.reward == pytest.approx(expected)


def test_qa_f1_reports_precision_and_recall(components):
    result = run(components.rewards.get("qa_f1")("the cat sat", answer="a cat sat down"))
    assert result.extras == {"precision": 1.0, "recall": pytest.approx(2 / 3)}


def test_env_reward_is_the_environments_own_score(components):
    from agentfly_cli.trajectory import Trajectory

    env_reward = components.rewards.get("env_reward")
    assert env_reward.fields == []  # it reads no dataset field, and no answer
    reports = [
        {"turn": -1, "source": "env:game", "reward": 0.5, "done": False, "info": {}},
        {"turn": 0, "source": "tool:move", "reward": None, "done": False, "info": {"score": 3}},
        {"turn": 1, "source": "tool:move", "reward": 0.25, "done": True, "info": {}},
    ]
    live = run(env_reward.score(None, Trajectory(env_reports=reports), {"question": "q"}))
    assert (live.reward, live.extras) == (0.75, {"reports": 3, "rewarded": 2, "done": True})
    saved = run(env_reward.score(None, {"env_reports": reports[:1]}, {}))  # a saved JSONL line
    assert saved.reward == 0.5
    for nothing in (None, Trajectory()):  # outside a rollout, or nothing reported
        result = run(env_reward.score("an answer", nothing, {}))
        assert not result.failed and result.reward == 0.0 and result.extras["reports"] == 0


def test_builtin_rewards_need_the_answer_field(components):
    result = run(components.rewards.get("exact_match")("408", question="q"))
    assert result.failed and "'answer'" in result.error


def test_scratchpad_env_and_its_tools(components):
    spec = components.envs.get("scratchpad")
    write, read, listing = (
        components.tools.get(n) for n in ("notes_write", "notes_read", "notes_list")
    )
    assert {write.env, read.env, listing.env} == {"scratchpad"}

    async def scenario():
        async with standalone_env(spec) as first, standalone_env(spec) as second:
            assert isinstance(first, Env)
            await write(env=first, key="plan", text="multiply")
            mine = await read(env=first, key="plan")
            theirs = await read(env=second, key="plan")
            names = await listing(env=first)
            await first.reset({})
            after_reset = await read(env=first, key="plan")
            return mine, theirs, names, after_reset, first

    mine, theirs, names, after_reset, env = run(scenario())
    assert mine.observation == "multiply"
    assert theirs.status == "error" and "no note named 'plan'" in theirs.observation
    assert names.observation == "plan"
    assert after_reset.status == "error"
    assert env.closed and not run(env.healthy())


def test_scratchpad_limits(components):
    spec = components.envs.get("scratchpad")
    write = components.tools.get("notes_write")

    async def scenario():
        async with standalone_env(spec) as env:
            too_long = await write(env=env, key="k", text="x" * 5000)
            for i in range(64):
                await write(env=env, key=f"k{i}", text="x")
            too_many = await write(env=env, key="one-more", text="x")
            return too_long, too_many

    too_long, too_many = run(scenario())
    assert "limit is 4000" in too_long.observation
    assert "at most 64 notes" in too_many.observation
