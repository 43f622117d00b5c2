"""With ``--agent``, the trajectory a reward receives carries the tool calls the gateway parsed
(and the results the agent sent back for them)."""

from __future__ import annotations

import asyncio
import json

import pytest

from agentfly_cli.backends.scripted import ScriptedBackend
from agentfly_cli.chat.parsers import get_parser
from agentfly_cli.chat.templates import ChatTemplate
from agentfly_cli.components.rewards import reward
from agentfly_cli.envs.manager import ResourceManager
from agentfly_cli.rollout.agent_engine import AgentEngine
from agentfly_cli.settings.agent import AgentSettings
from agentfly_cli.settings.rollout import RolloutSettings
from tests.chat.test_chat_templates import TOOLS  # the calculator's schema

pytest.importorskip("openai", reason="the openai SDK is a dev dependency")
pytest.importorskip("starlette", reason="the gateway needs the serve extra")


def call(name: str, **arguments) -> str:
    return "<tool_call>\n" + json.dumps({"name": name, "arguments": arguments}) + "\n</tool_call>"


def calculator_agent(task, base_url):
    """Asks, runs the calculator call it is given, answers with the model's last text."""
    from openai import OpenAI

    client = OpenAI(base_url=base_url, api_key="none", max_retries=0)
    messages = [{"role": "user", "content": task["question"]}]
    first = client.chat.completions.create(model="m", messages=messages, tools=TOOLS)
    message = first.choices[0].message
    messages.append(message.model_dump(exclude_none=True))
    for tool_call in message.tool_calls or []:
        expression = json.loads(tool_call.function.arguments)["expression"]
        result = str(eval(expression, {"__builtins__": {}}))  # the agent's own tool
        messages.append({"role": "tool", "tool_call_id": tool_call.id, "content": result})
    second = client.chat.completions.create(model="m", messages=messages, tools=TOOLS)
    return second.choices[0].message.content


@reward
def used_the_calculator(trajectory, prediction) -> dict:
    calls = [(c.name, c.arguments, c.observation) for c in trajectory.tool_calls]
    return {"reward": float(bool(calls) and prediction == "391"), "calls": calls}


def test_a_reward_reads_the_calls_the_gateway_parsed(tiny_model):
    chat = ChatTemplate.load(str(tiny_model))
    backend = ScriptedBackend([[call("calculator", expression="17 * 23"), "391"]], chat)
    engine = AgentEngine(
        backend, chat, get_parser("hermes"), calculator_agent, used_the_calculator,
        RolloutSettings(n=1), AgentSettings(entry="x:y"), env_manager=ResourceManager({}),
    )  # fmt: skip
    [trajectory] = asyncio.run(engine.run([{"question": "What is 17 * 23?"}]))
    trajectory.check()
    assert trajectory.error is None and trajectory.prediction == "391"
    assert trajectory.reward_extras["calls"] == [("calculator", {"expression": "17 * 23"}, "391")]
    assert trajectory.reward == 1.0
    assert [c.turn for c in trajectory.tool_calls] == [0]
