"""examples/langgraph_agent: an unmodified LangGraph agent (ChatOpenAI, ToolNode) whose model
writes CALC:/ANSWER: lines, which the gateway (``chat.parser: line``) turns into OpenAI tool
calls of the graph's own tools. Scripted replies on the tiny model here; SmolLM2 sampling
under ``-m slow``."""

from __future__ import annotations

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

pytest.importorskip("langgraph", reason="langgraph is a dev dependency")
pytest.importorskip("langchain_openai", reason="langchain-openai is a dev dependency")

EXAMPLE = REPO_ROOT / "examples" / "langgraph_agent"
RECIPE = load_config(str(EXAMPLE / "recipe.yaml"))


def run_example(tiny_model, texts: list[str], session: str):
    example = load_script("examples/langgraph_agent/agent.py")
    chat = ChatTemplate.load(str(tiny_model), observation=RECIPE.chat.observation)
    backend = Replies(chat, texts)
    parser = get_parser(RECIPE.chat.parser, RECIPE.chat.parser_options)
    gateway = Gateway(backend, chat, parser, "policy")
    with serving_in_thread(build_app(gateway)) as url:
        answer = example.agent({"question": "What is 17 * 23?"}, f"{url}/s/{session}/v1")
        episode = gateway.close_episode(session, reward=1.0)
    return answer, episode, backend, chat


def test_the_graph_runs_its_tools_from_the_models_lines_and_the_capture_is_exact(tiny_model):
    answer, episode, backend, chat = run_example(tiny_model, ["CALC: 17*23", "ANSWER: 391"], "g1")
    assert answer == "391"  # the graph ended at its `answer` tool, whose result it returns
    [trajectory] = episode.trajectories()  # LangChain's second request extended the first
    trajectory.check()
    first, second = backend.prompts
    assert trajectory.ids[: len(second)] == second and second[: len(first)] == first
    delta = chat.decode(second[len(first) :])  # the calculator's result, as the recipe says
    assert "RESULT: 391" in delta and "tool" not in delta, delta
    assert [t.role for t in trajectory.turns] == ["prompt", "assistant", "observation", "assistant"]


def test_a_graph_that_never_answers_stops_at_its_turn_limit(tiny_model):
    answer, episode, backend, _ = run_example(tiny_model, ["CALC: 1+1"] * 4, "g2")
    assert answer is None and len(backend.prompts) == 4  # four model turns, then the limit
    [trajectory] = episode.trajectories()
    trajectory.check()


@pytest.mark.slow
def test_smollm2_runs_the_langgraph_agent_through_the_gateway(tmp_path):
    rows = rollout_agent_example(EXAMPLE / "recipe.yaml", tmp_path / "graph.jsonl")
    multi_turn = [row for row in rows if [t["role"] for t in row["turns"]].count("assistant") >= 2]
    assert multi_turn and max(row["reward"] for row in rows) == 1.0
