"""smolagents (from PyPI) through the gateway: its ToolCallingAgent runs a tool and answers
with its ``final_answer`` tool against a session URL. It rewrites its history as text ("Calling
tools: [...]", "Observation: ...") instead of echoing the OpenAI messages, so each request
starts a new segment: every segment token-exact, all sharing the episode's reward and group."""

from __future__ import annotations

import pytest

from agentfly_cli.chat.parsers import get_parser
from agentfly_cli.chat.templates import ChatTemplate
from agentfly_cli.serve.app import build_app
from agentfly_cli.serve.gateway import Gateway
from agentfly_cli.serve.server import serving_in_thread
from tests.serve.test_serve_capture import Replies, call

smolagents = pytest.importorskip("smolagents", reason="smolagents is a dev dependency")


@pytest.mark.filterwarnings("ignore:Function .calculator. has decorators")
def test_a_smolagents_tool_calling_agent_runs_and_each_rewrite_is_a_segment(tiny_model):
    chat = ChatTemplate.load(str(tiny_model))
    replies = [call("calculator", expression="17 * 23"), call("final_answer", answer="391")]
    backend = Replies(chat, replies)
    gateway = Gateway(backend, chat, get_parser("hermes"), "tiny")
    seen: list[str] = []

    @smolagents.tool
    def calculator(expression: str) -> str:
        """Evaluate an arithmetic expression.

        Args:
            expression: the expression, such as 2*3.
        """
        seen.append(expression)
        return str(eval(expression, {"__builtins__": {}}))  # test input only

    with serving_in_thread(build_app(gateway)) as url:
        model = smolagents.OpenAIServerModel(
            model_id="policy", api_base=f"{url}/s/sa-1/v1", api_key="none"
        )
        agent = smolagents.ToolCallingAgent(
            tools=[calculator], model=model, max_steps=4, verbosity_level=0
        )
        answer = agent.run("What is 17 * 23?")
        episode = gateway.close_episode("sa-1", reward=1.0)
    assert str(answer) == "391" and seen == ["17 * 23"]
    first, second = backend.prompts
    # the second prompt does not extend the first reply: smolagents wrote its call as text
    assert second[: len(first)] == first
    assert "Calling tools:" in chat.decode(second[len(first) :])
    segments = episode.trajectories()
    assert len(segments) == 2
    for index, segment in enumerate(segments):
        segment.check()  # the sampled ids, exactly, with their logprobs, behind a mask
        assert segment.reward == 1.0 and segment.group_id == segments[0].group_id
        assert segment.ids[: len(backend.prompts[index])] == backend.prompts[index]
        assert segment.num_turns == 1
