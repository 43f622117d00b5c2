"""Environments that speak first (``rollout.opening_env``): the env's reset gives the first user
message (and a system prompt, and a report), rendered by the chat template token-exactly."""

from __future__ import annotations

import asyncio
import json

import pytest

from agentfly_cli.backends.scripted import ScriptedBackend
from agentfly_cli.chat.parsers import get_parser
from agentfly_cli.chat.templates import ChatTemplate
from agentfly_cli.components.tools import ToolResult, tool
from agentfly_cli.envs.base import EnvSpec
from agentfly_cli.envs.manager import ResourceManager
from agentfly_cli.rollout.engine import RolloutEngine
from agentfly_cli.settings.envs import EnvPoolSettings
from agentfly_cli.settings.rollout import RolloutSettings
from rewards_builtin.env_reward import env_reward
from tests.helpers.envs_for_tests import make_guess_env

GUESS = EnvSpec(name="guess", factory=make_guess_env, pool_max=8, warm_size=0)
SYSTEM = "You play word games."
EXAMPLES = [{"role": "user", "content": "Guess: c_t"}, {"role": "assistant", "content": "cat"}]


@tool(env="guess")
async def guess(env, word: str) -> ToolResult:
    """Guess the word.

    Args:
        word: The guess.
    """
    result = await env.step(word)
    info = {"reward": result["reward"], "done": result["done"], "word": word}
    return ToolResult(result["observation"], info=info)


def call(name: str, **arguments) -> str:
    return "<tool_call>\n" + json.dumps({"name": name, "arguments": arguments}) + "\n</tool_call>"


@pytest.fixture(scope="module")
def chat(tiny_model) -> ChatTemplate:
    return ChatTemplate.load(str(tiny_model))


def engine_for(chat, script, *, manager=None, reward=None, system_prompt=None, examples=(),
               **settings) -> RolloutEngine:  # fmt: skip
    options = {"n": 1, "max_turns": 4, "opening_env": "guess", **settings}
    return RolloutEngine(
        ScriptedBackend(script, chat), chat, get_parser("hermes"), [guess], reward,
        RolloutSettings(**options), system_prompt=system_prompt, examples=examples,
        env_specs={"guess": GUESS}, env_manager=manager,
    )  # fmt: skip


def rollout(engine, tasks):
    return asyncio.run(engine.run(tasks))


def first_prompt(trajectory) -> list[int]:
    prompt = trajectory.turns[0]
    assert prompt.role == "prompt"
    return trajectory.ids[prompt.start : prompt.end]


def test_a_string_opening_is_the_first_user_message_token_exactly(chat):
    engine = engine_for(chat, [["I give up."]], system_prompt=SYSTEM, examples=EXAMPLES)
    task = {"question": "the row's own question", "opening": "Guess my 3-letter word."}
    [trajectory] = rollout(engine, [task])
    trajectory.check()
    expected = [
        {"role": "system", "content": SYSTEM},
        *EXAMPLES,
        {"role": "user", "content": "Guess my 3-letter word."},
    ]
    assert trajectory.messages[:4] == expected
    assert first_prompt(trajectory) == chat.render_prompt(expected, [guess.schema])
    assert "the row's own question" not in chat.decode(trajectory.ids)
    assert trajectory.finish_reason == "answer" and trajectory.env_reports == []


def test_a_dict_opening_gives_the_system_prompt_and_a_report(chat):
    opening = {"observation": "Guess my word.", "system_prompt": "Be brief.",
               "info": {"letters": 3}, "reward": 0.25}  # fmt: skip
    task = {"opening": opening, "target": "cat"}  # no question: the env speaks first
    [own] = rollout(engine_for(chat, [["dog"]]), [task])
    own.check()
    expected = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Guess my word."},
    ]
    assert first_prompt(own) == chat.render_prompt(expected, [guess.schema])
    assert own.env_reports == [
        {"turn": -1, "source": "env:guess", "reward": 0.25, "done": False, "info": {"letters": 3}}
    ]
    assert own.env_reward == 0.25
    # the recipe's system prompt wins over the env's
    [recipe] = rollout(engine_for(chat, [["dog"]], system_prompt=SYSTEM), [task])
    expected[0]["content"] = SYSTEM
    assert first_prompt(recipe) == chat.render_prompt(expected, [guess.schema])


def test_tool_reports_fill_the_reward_channel_and_done_ends_the_chain(chat):
    script = [[call("guess", word="dog"), call("guess", word="cat"), "never sampled"]]
    engine = engine_for(chat, script, reward=env_reward)
    [trajectory] = rollout(engine, [{"opening": "Guess.", "target": "cat"}])
    trajectory.check()
    assert trajectory.finish_reason == "env_done" and trajectory.num_turns == 2
    assert [(r["turn"], r["source"], r["reward"], r["done"]) for r in trajectory.env_reports] == [
        (0, "tool:guess", 0.0, False),
        (1, "tool:guess", 1.0, True),
    ]
    assert trajectory.env_reports[1]["info"] == {"word": "cat"}
    # the call's record keeps what the tool reported, without the engine's own keys
    assert trajectory.tool_calls[1].info == {"reward": 1.0, "done": True, "word": "cat"}
    assert trajectory.env_reward == 1.0
    # the built-in env_reward scores the env's own score; no answer was given
    assert trajectory.prediction is None
    assert trajectory.reward == 1.0
    assert trajectory.reward_extras == {"reports": 2, "rewarded": 2, "done": True}


def test_a_reset_that_returns_nothing_is_one_clear_error_for_that_chain(chat):
    engine = engine_for(chat, [["cat"], ["cat"]])
    broken, fine = rollout(engine, [{"question": "no opening"}, {"opening": "Guess."}])
    assert broken.finish_reason == "abort" and broken.num_turns == 0
    assert "env 'guess' (rollout.opening_env) returned nothing from reset(task)" in broken.error
    assert fine.finish_reason == "answer" and fine.prediction == "cat"


def test_an_opening_that_is_done_ends_the_chain_at_its_prompt(chat):
    engine = engine_for(chat, [["never sampled"]])
    opening = {"observation": "Game over.", "done": True, "reward": -1.0}
    [trajectory] = rollout(engine, [{"opening": opening}])
    trajectory.check()
    assert trajectory.finish_reason == "env_done" and trajectory.num_turns == 0
    assert [t.role for t in trajectory.turns] == ["prompt"] and trajectory.env_reward == -1.0


@pytest.mark.parametrize(
    ("opening", "message"),
    [
        (3, "returned a int from reset"),
        ({"text": "x"}, "unknown key(s) text"),
        ({"observation": 3}, "'observation' must be a string"),
        ({"observation": "x", "reward": "high"}, "'reward' must be a finite number"),
        ({"observation": "x", "done": "yes"}, "'done' must be true or false"),
    ],
)
def test_an_opening_of_the_wrong_shape_names_the_env_and_the_key(chat, opening, message):
    [trajectory] = rollout(engine_for(chat, [["x"]]), [{"opening": opening}])
    assert trajectory.finish_reason == "abort"
    assert "env 'guess'" in trajectory.error and message in trajectory.error


def test_the_tools_share_the_opening_envs_lease(chat):
    script = [[call("guess", word="dog"), call("guess", word="owl"), "done"]]
    manager = ResourceManager({"guess": GUESS})
    engine = engine_for(chat, script, manager=manager)

    async def main():
        async with manager:
            trajectories = await engine.run([{"opening": "Guess.", "target": "cat"}])
            return trajectories, manager.stats()["guess"]

    [trajectory], stats = asyncio.run(main())
    # one env saw the reset and both guesses: its count went on from the opening's lease
    assert [c.observation for c in trajectory.tool_calls] == ["wrong (1 guesses)",
                                                              "wrong (2 guesses)"]  # fmt: skip
    assert stats["acquired"] == 1 and stats["released"] == 1


@pytest.mark.parametrize("where", ["process", "server"])
def test_the_opening_travels_from_other_processes(chat, tmp_path, where):
    """The same first prompt when the env lives in a child process or on a pool server."""
    from agentfly_cli.pool_server.server import PoolServer

    opening = {"observation": "Guess my word.", "system_prompt": "Be brief.", "reward": 0.5}
    expected = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Guess my word."},
    ]

    async def main():
        server = task = None
        if where == "server":
            address = f"unix://{tmp_path / 'guess.sock'}"
            server = PoolServer(GUESS, EnvPoolSettings(pool_max=2), address, "")
            task = asyncio.create_task(server.serve())
            while server._server is None:
                await asyncio.sleep(0.01)
            config = EnvPoolSettings(address=address)
        else:
            config = EnvPoolSettings(provider="process")
        try:
            manager = ResourceManager({"guess": GUESS}, {"guess": config})
            engine = engine_for(chat, [[call("guess", word="cat")]], manager=manager)
            async with manager:
                return await engine.run([{"opening": opening, "target": "cat"}])
        finally:
            if server is not None:
                server.stop()
                await asyncio.wait_for(task, 10)

    [trajectory] = asyncio.run(main())
    trajectory.check()
    assert first_prompt(trajectory) == chat.render_prompt(expected, [guess.schema])
    assert trajectory.finish_reason == "env_done" and trajectory.env_reward == 1.5


# -- a run's settings ----------------------------------------------------------------------------
def test_opening_env_is_checked_when_the_run_is_built(tiny_model):
    from agentfly_cli.errors import UserError
    from agentfly_cli.recipes.loader import load_config
    from agentfly_cli.rollout.from_settings import resolve_run

    def settings(**more):
        return load_config("calculator", model=str(tiny_model), **more)

    row = {"question": "q", "answer": "1"}
    with pytest.raises(
        UserError, match=r"^rollout.opening_env: 'nosuch' is not an env of this run"
    ):
        resolve_run(settings(**{"rollout.opening_env": "nosuch"}), tasks=[row])
    with pytest.raises(UserError, match="^tasks row 1: needs a 'question' field"):
        resolve_run(settings(), tasks=[{"answer": "1"}])
    # a registered env that no tool uses may speak first; rows then need no question
    opening = settings(**{"rollout.opening_env": "scratchpad"})
    resolved = resolve_run(opening, tasks=[{"answer": "1"}])
    assert "scratchpad" in resolved.envs.specs and resolved.tasks == [{"answer": "1"}]
    agent = settings(**{"rollout.opening_env": "scratchpad", "agent": "agent.py:run"})
    with pytest.raises(UserError, match="^rollout.opening_env: an agent program writes its own"):
        resolve_run(agent, tasks=[row])
    bad_turns = [{**row, "later": "not a list"}]
    with pytest.raises(UserError, match=r"^tasks row 1: 'later' must be a list"):
        resolve_run(settings(**{"data.user_turns_field": "later"}), tasks=bad_turns)


def test_the_engine_refuses_an_opening_env_it_was_not_given(chat):
    with pytest.raises(ValueError, match="rollout.opening_env 'elsewhere' is not an env given"):
        RolloutEngine(
            ScriptedBackend([["x"]], chat), chat, get_parser("hermes"), [guess], None,
            RolloutSettings(opening_env="elsewhere"), env_specs={"guess": GUESS},
        )  # fmt: skip
