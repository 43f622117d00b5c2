"""examples/agents_sdk: an unmodified OpenAI Agents SDK agent whose model writes CALC:/ANSWER:
lines, which the gateway (``chat.parser: line``) turns into OpenAI tool calls of the agent's
own function tools; its tool results reach the model as the recipe's observation settings
say. Scripted replies on the tiny model here; SmolLM2 sampling under ``-m slow``."""

from __future__ import annotations

import asyncio

import pytest

from agentfly_cli.chat.parsers import get_parser
from agentfly_cli.chat.templates import ChatTemplate
from agentfly_cli.recipes.loader import load_config
from agentfly_cli.serve.app import build_app
from agentfly_cli.serve.gateway import Gateway
from agentfly_cli.serve.server import serving_in_thread
from tests.helpers.agent_examples import rollout_agent_example
from tests.helpers.paths import REPO_ROOT, load_script
from tests.serve.test_serve_capture import Replies

pytest.importorskip("agents", reason="the OpenAI Agents SDK is a dev dependency")

EXAMPLE = REPO_ROOT / "examples" / "agents_sdk"
RECIPE = load_config(str(EXAMPLE / "recipe.yaml"))


def example_chat(tiny_model) -> ChatTemplate:
    return ChatTemplate.load(str(tiny_model), observation=RECIPE.chat.observation)


def test_the_sdk_runs_its_tools_from_the_models_lines_and_the_capture_is_exact(tiny_model):
    example = load_script("examples/agents_sdk/agent.py")
    chat = example_chat(tiny_model)
    backend = Replies(chat, ["CALC: 17*23", "ANSWER: 391"])
    parser = get_parser(RECIPE.chat.parser, RECIPE.chat.parser_options)
    gateway = Gateway(backend, chat, parser, "policy")
    with serving_in_thread(build_app(gateway)) as url:
        answer = asyncio.run(example.agent({"question": "What is 17 * 23?"}, f"{url}/s/e1/v1"))
        episode = gateway.close_episode("e1", reward=1.0)
    assert answer == "391"  # the SDK stopped at its `answer` tool, whose argument it returns
    [trajectory] = episode.trajectories()  # the SDK's second request extended the first
    trajectory.check()
    first, second = backend.prompts
    assert trajectory.ids[: len(second)] == second and second[: len(first)] == first
    # the calculator's result came back as the recipe's observation: a user turn, RESULT:
    delta = chat.decode(second[len(first) :])
    assert "RESULT: 391" in delta and "tool" not in delta, delta
    assert [t.role for t in trajectory.turns] == ["prompt", "assistant", "observation", "assistant"]


def test_without_observation_settings_the_result_is_a_tool_turn(tiny_model):
    """The same exchange with the default settings: the tool message as the template writes it
    (so the settings, not the agent, decide what the model reads)."""
    example = load_script("examples/agents_sdk/agent.py")
    chat = ChatTemplate.load(str(tiny_model))
    backend = Replies(chat, ["CALC: 6*7", "ANSWER: 42"])
    parser = get_parser(RECIPE.chat.parser, RECIPE.chat.parser_options)
    with serving_in_thread(build_app(Gateway(backend, chat, parser, "policy"))) as url:
        answer = asyncio.run(example.agent({"question": "What is 6 * 7?"}, f"{url}/s/e2/v1"))
    first, second = backend.prompts
    delta = chat.decode(second[len(first) :])
    assert answer == "42" and "RESULT:" not in delta and "42" in delta


@pytest.mark.slow
def test_smollm2_runs_the_sdk_agent_through_the_gateway(tmp_path):
    rows = rollout_agent_example(EXAMPLE / "recipe.yaml", tmp_path / "sdk.jsonl")
    multi_turn = [row for row in rows if [t["role"] for t in row["turns"]].count("assistant") >= 2]
    assert multi_turn and max(row["reward"] for row in rows) == 1.0
