"""An agent framework from PyPI through the gateway: the OpenAI Agents SDK runs a tool-using
agent (its own function tool, its own loop) against a session URL, and the gateway records the
episode as one token-exact segment."""

from __future__ import annotations

import asyncio

import pytest

from agentfly_cli.chat.parsers import get_parser
from agentfly_cli.chat.templates import ChatTemplate
from agentfly_cli.serve.app import build_app
from agentfly_cli.serve.gateway import Gateway
from agentfly_cli.serve.server import serving_in_thread
from tests.serve.test_serve_capture import Replies, call

agents = pytest.importorskip("agents", reason="the OpenAI Agents SDK is a dev dependency")


def test_an_openai_agents_sdk_agent_runs_and_is_captured(tiny_model):
    from openai import AsyncOpenAI

    chat = ChatTemplate.load(str(tiny_model))
    backend = Replies(chat, [call("calculator", expression="17 * 23"), "It is 391."])
    gateway = Gateway(backend, chat, get_parser("hermes"), "tiny")
    seen: list[str] = []

    @agents.function_tool
    def calculator(expression: str) -> str:
        """Evaluate an arithmetic expression."""
        seen.append(expression)
        return str(eval(expression, {"__builtins__": {}}))  # test input only

    agents.set_tracing_disabled(True)
    with serving_in_thread(build_app(gateway)) as url:
        client = AsyncOpenAI(base_url=f"{url}/s/sdk-1/v1", api_key="none")
        model = agents.OpenAIChatCompletionsModel(model="tiny", openai_client=client)
        agent = agents.Agent(name="calc", instructions="Use the calculator.", tools=[calculator],
                             model=model)  # fmt: skip
        result = asyncio.run(agents.Runner.run(agent, "What is 17 * 23?"))
        episode = gateway.close_episode("sdk-1", reward=1.0)
    assert result.final_output == "It is 391." and seen == ["17 * 23"]
    [trajectory] = episode.trajectories()  # the SDK's second request extended the first
    trajectory.check()
    first, second = backend.prompts
    assert second[: len(first)] == first and trajectory.ids[: len(second)] == second
    assert "391" in chat.decode(second[len(first) :])  # the tool result, as a delta
    assert trajectory.num_turns == 2 and trajectory.reward == 1.0
