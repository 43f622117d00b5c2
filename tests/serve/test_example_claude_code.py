"""examples/claude_code_agent: the real Claude Code CLI as a trained agent. Its tool loop
through the gateway (a Bash call that writes answer.txt, its result, DONE) gives the file's
text as the answer, in one token-exact segment; `agentfly recipes check` plays each task's gold
replies to Claude Code and they beat junk; `agentfly train --model tiny` runs two steps
through it. Slow: each episode is a `claude -p` process (`make install-agent-clis`)."""

from __future__ import annotations

import json

import pytest

from agentfly_cli.chat.parsers import get_parser
from agentfly_cli.chat.templates import ChatTemplate
from agentfly_cli.serve.app import build_app
from agentfly_cli.serve.gateway import Gateway
from agentfly_cli.serve.server import serving_in_thread
from tests.helpers.paths import REPO_ROOT, load_script
from tests.helpers.recipe_checks import agentfly
from tests.serve.test_serve_agent_clis import ToolCycle, cli
from tests.serve.test_serve_capture import call

pytestmark = pytest.mark.slow

RECIPE = REPO_ROOT / "examples" / "claude_code_agent" / "recipe.yaml"


@pytest.fixture(autouse=True)
def claude_installed(monkeypatch):
    monkeypatch.setenv("AGENTFLY_CLAUDE", cli("claude"))


def test_claude_code_writes_the_answer_file_and_the_episode_is_one_exact_segment(tiny_model):
    example = load_script("examples/claude_code_agent/agent.py")
    chat = ChatTemplate.load(str(tiny_model))
    backend = ToolCycle(chat, [call("Bash", command="printf 391 > answer.txt"), "DONE"])
    gateway = Gateway(backend, chat, get_parser("hermes"), "policy")
    with serving_in_thread(build_app(gateway)) as url:
        answer = example.agent({"question": "What is 17 * 23?"}, f"{url}/s/cc-e1/v1")
        episode = gateway.close_episode("cc-e1", reward=1.0)
    assert answer == "391"
    [trajectory] = episode.trajectories()
    trajectory.check()
    assert [c.name for c in trajectory.tool_calls] == ["Bash"] and trajectory.num_turns == 2
    assert len(backend.prompts) == 2 and len(backend.prompts[0]) < 4096  # the short prompt


def test_recipes_check_plays_the_gold_replies_to_claude_code(tiny_model):
    result = agentfly("recipes", "check", RECIPE, "--model", tiny_model, "--limit", "2")
    assert result.exit_code == 0, result.output
    assert "every gold answer scores above every junk answer" in result.output


def test_training_runs_through_claude_code(tiny_model, tmp_path):
    run_dir = tmp_path / "run"
    result = agentfly(
        "train", RECIPE, "--model", tiny_model, "--out", run_dir, "--quiet",
        "--set", "trainer.steps=2", "--set", "trainer.tasks_per_step=2", "--set", "rollout.n=2",
        "--set", "trainer.telemetry.sinks=[jsonl]", "--set", "trainer.eval.every=0",
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    lines = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [line["step"] for line in lines] == [1, 2]
    assert all(0.0 <= line["reward/mean"] <= 1.0 for line in lines)
