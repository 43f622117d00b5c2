"""LangGraph through the gateway: a StateGraph agent (a model node on langchain-openai's
``ChatOpenAI``, LangGraph's ``ToolNode`` and ``tools_condition``) runs its own tool and answers
through a session URL, plain and streamed; its episode is one token-exact segment."""

from __future__ import annotations

import pytest

from agentfly_cli.chat.parsers import get_parser
from agentfly_cli.chat.templates import ChatTemplate
from agentfly_cli.serve.app import build_app
from agentfly_cli.serve.gateway import Gateway
from agentfly_cli.serve.server import serving_in_thread
from tests.serve.test_serve_capture import call
from tests.serve.test_serve_streaming import Dribble

pytest.importorskip("langgraph", reason="langgraph is a dev dependency")
langchain_openai = pytest.importorskip("langchain_openai", reason="a dev dependency")

from langchain_core.messages import HumanMessage, ToolMessage  # noqa: E402
from langchain_core.tools import tool  # noqa: E402
from langgraph.graph import START, MessagesState, StateGraph  # noqa: E402
from langgraph.prebuilt import ToolNode, tools_condition  # noqa: E402

RAN: list[str] = []


@tool
def calculator(expression: str) -> str:
    """Evaluate an arithmetic expression.

    Args:
        expression: the expression, e.g. 17 * 23
    """
    RAN.append(expression)
    return str(eval(expression, {"__builtins__": {}}))  # test input only


def build_agent(base_url: str, streaming: bool):
    """The graph LangGraph's docs build: the model, then tools while it calls them."""
    model = langchain_openai.ChatOpenAI(
        model="m", base_url=base_url, api_key="none", streaming=streaming, max_retries=0
    ).bind_tools([calculator])

    def agent(state: MessagesState) -> dict:
        return {"messages": [model.invoke(state["messages"])]}

    graph = StateGraph(MessagesState)
    graph.add_node("agent", agent)
    graph.add_node("tools", ToolNode([calculator]))
    graph.add_edge(START, "agent")
    graph.add_conditional_edges("agent", tools_condition)
    graph.add_edge("tools", "agent")
    return graph.compile()


@pytest.fixture(scope="module")
def tiny_chat(tiny_model):
    return ChatTemplate.load(str(tiny_model))


@pytest.mark.parametrize("streaming", [False, True])
def test_a_langgraph_agent_runs_its_tool_and_is_one_token_exact_segment(tiny_chat, streaming):
    RAN.clear()
    texts = [call("calculator", expression="17 * 23"), "It is 391."]
    backend = Dribble(tiny_chat, texts)
    gateway = Gateway(backend, tiny_chat, get_parser("hermes"), "tiny")
    ended = []
    with serving_in_thread(build_app(gateway, on_episode=ended.append)) as url:
        agent = build_agent(f"{url}/s/graph-1/v1", streaming)
        state = agent.invoke({"messages": [HumanMessage("What is 17 * 23?")]})
        gateway.close_episode("graph-1", reward=1.0)
    assert RAN == ["17 * 23"]  # LangGraph's ToolNode ran the tool the gateway parsed
    [result] = [m for m in state["messages"] if isinstance(m, ToolMessage)]
    assert result.content == "391" and state["messages"][-1].content == "It is 391."
    [trajectory] = ended[0].trajectories()  # LangChain echoed the call: the second request
    trajectory.check()  # extended the first
    assert trajectory.num_turns == 2 and trajectory.reward == 1.0
    first, second = backend.prompts
    assert second[: len(first)] == first
