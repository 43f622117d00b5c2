"""Real coding-agent CLIs, unmodified, through the gateway on loopback: Claude Code (the
Anthropic Messages API, streamed) and Codex CLI (the OpenAI Responses API, streamed), each
installed from the npm registry by ``make install-agent-clis``.

The model is a backend that plays a tool cycle (a call, then a final answer once the prompt
holds the call's result), so that each harness runs its whole loop: several requests with its
own tools offered, the call parsed from the model's format into the dialect's blocks or items,
the harness running its tool and sending the result back. Every captured trajectory must pass
the token-exactness check, and the harness's second request must continue its first as one
segment. The gateway requires an API key, which each harness sends in its own header.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from agentfly_cli.backends.base import Backend, Generation
from agentfly_cli.chat.parsers import get_parser
from agentfly_cli.chat.templates import ChatTemplate
from agentfly_cli.serve.app import build_app
from agentfly_cli.serve.auth import Access
from agentfly_cli.serve.gateway import Gateway
from agentfly_cli.serve.server import serving_in_thread
from tests.serve.test_serve_capture import call

pytestmark = pytest.mark.slow

BIN = Path(__file__).resolve().parents[2] / "build" / "agent-clis" / "node_modules" / ".bin"
KEY = "sk-agentfly-test-0123456789"
TASK = "Create the file hello.txt containing hi"


def cli(name: str) -> str:
    """The installed CLI's path, or a skip that says how to install it."""
    path = BIN / name
    if not path.exists():
        found = shutil.which(name)
        if found is None:
            pytest.skip(f"{name} is not installed: run `make install-agent-clis` (npm)")
        return found
    return str(path)


class ToolCycle(Backend):
    """Replies by the state of the conversation it is sent: ``script[k]`` once the prompt
    holds k tool results, so retries and side requests get the same answer."""

    name = "tool-cycle"

    def __init__(self, chat: ChatTemplate, script: list[str]) -> None:
        self.chat, self.script, self.prompts = chat, script, []

    async def generate(self, prompt_ids, params, context=None):
        self.prompts.append(list(prompt_ids))
        results = self.chat.decode(prompt_ids).count("<tool_response>")
        ids = self.chat.encode_response(self.script[min(results, len(self.script) - 1)])
        return Generation(ids, [-0.5] * len(ids), "stop")


def run_harness(tiny_model, tmp_path: Path, script: list[str], command, session: str):
    """Serve the tool cycle behind an API key and run ``command(url, work, home)`` (the argv
    and the environment it adds) in ``tmp_path/work``; the finished process, the backend, the
    session's ended episode and the chat template."""
    chat = ChatTemplate.load(str(tiny_model))
    backend = ToolCycle(chat, script)
    gateway = Gateway(backend, chat, get_parser("hermes"), "tiny")
    work, home = tmp_path / "work", tmp_path / "home"
    work.mkdir()
    home.mkdir()
    with serving_in_thread(build_app(gateway, None, Access(api_key=KEY))) as url:
        argv, env = command(url, work, home)
        done = subprocess.run(argv, cwd=work, env={**os.environ, "HOME": str(home), **env},
                              capture_output=True, text=True, timeout=600,
                              stdin=subprocess.DEVNULL)  # fmt: skip
        episode = gateway.close_episode(session, reward=1.0)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    return done, backend, episode, chat


def check_capture(backend: ToolCycle, episode, chat: ChatTemplate, tool: str) -> None:
    """Two or more requests, one token-exact segment holding the parsed call, its result
    sent back as a delta, then the final answer."""
    assert len(backend.prompts) >= 2
    [trajectory] = episode.trajectories()
    trajectory.check()
    first, second = backend.prompts[0], backend.prompts[-1]
    assert second[: len(first)] == first and trajectory.ids[: len(second)] == second
    assert "<tool_response>" in chat.decode(second[len(first) :])
    assert [c.name for c in trajectory.tool_calls] == [tool]
    assert trajectory.num_turns == 2 and trajectory.reward == 1.0


def test_claude_code_runs_its_tool_loop_through_the_messages_route(tiny_model, tmp_path):
    claude, target = cli("claude"), tmp_path / "work" / "hello.txt"

    def command(url, work, home):
        argv = [claude, "-p", TASK, "--model", "tiny", "--allowedTools", "Write",
                "--max-turns", "4"]  # fmt: skip
        return argv, {"ANTHROPIC_BASE_URL": f"{url}/s/claude-1", "ANTHROPIC_API_KEY": KEY,
                      "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
                      "DISABLE_AUTOUPDATER": "1"}  # fmt: skip

    script = [call("Write", file_path=str(target), content="hi"), "Done."]
    done, backend, episode, chat = run_harness(tiny_model, tmp_path, script, command, "claude-1")
    assert target.read_text() == "hi" and "Done." in done.stdout
    check_capture(backend, episode, chat, "Write")


def test_codex_runs_its_tool_loop_through_the_responses_route(tiny_model, tmp_path):
    codex, target = cli("codex"), tmp_path / "work" / "hello.txt"

    def command(url, work, home):
        provider = (f'model_providers.agentfly={{name="agentfly", base_url="{url}/s/codex-1/v1",'
                    ' wire_api="responses", env_key="AGENTFLY_KEY"}')  # fmt: skip
        argv = [codex, "exec", "--skip-git-repo-check", "-m", "tiny",
                "-c", "model_provider=agentfly", "-c", provider,
                "--dangerously-bypass-approvals-and-sandbox", TASK]  # fmt: skip
        return argv, {"CODEX_HOME": str(home), "AGENTFLY_KEY": KEY}

    script = [call("exec_command", cmd="printf hi > hello.txt"), "Done."]
    done, backend, episode, chat = run_harness(tiny_model, tmp_path, script, command, "codex-1")
    assert target.read_text() == "hi" and "Done." in done.stdout
    check_capture(backend, episode, chat, "exec_command")
