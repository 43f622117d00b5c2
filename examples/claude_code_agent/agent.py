"""Claude Code as the agent: the real CLI (`@anthropic-ai/claude-code`), unmodified, solving a
small task in a folder of its own; the result is read back from the folder.

Each episode gets a fresh temporary folder (its working directory and its HOME, so that
concurrent episodes share no Claude Code settings or history), runs `claude -p` against the
episode's gateway URL (the Anthropic Messages API, streamed), and returns what the harness left
in `answer.txt`. The recipe's reward compares that with the task's answer. Trained with
`agentfly train examples/claude_code_agent/recipe.yaml`; every request Claude Code makes is
recorded token-exactly (see docs/serve.md, "Real agent CLIs").

Claude Code's default prompt is about 33k tokens; a short system prompt and the Bash tool alone
make it about 1.3k, which fits a small model's context (SmolLM2: 8,192).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

SYSTEM = (
    "You work in the current folder. Use the Bash tool to write your answer into the file "
    "answer.txt (only the number), then say DONE."
)
INSTALLED = Path(__file__).resolve().parents[2] / "build" / "agent-clis" / "node_modules" / ".bin"


def claude_binary() -> str:
    """`$AGENTFLY_CLAUDE`, the one `make install-agent-clis` installed, or `claude` on PATH."""
    for candidate in (os.environ.get("AGENTFLY_CLAUDE"), str(INSTALLED / "claude")):
        if candidate and Path(candidate).is_file():
            return candidate
    found = shutil.which("claude")
    if found is None:
        raise RuntimeError(
            "Claude Code is not installed: run `make install-agent-clis` (npm), or set "
            "AGENTFLY_CLAUDE to the claude binary"
        )
    return found


def agent(task: dict, base_url: str, max_turns: int = 3, timeout_s: float = 300) -> str | None:
    """Run Claude Code on ``task["question"]``; the text it wrote to answer.txt, or None."""
    with tempfile.TemporaryDirectory(prefix="agentfly-claude-") as folder:
        work, home = Path(folder, "work"), Path(folder, "home")
        work.mkdir()
        home.mkdir()
        env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "HOME": str(home),
            "ANTHROPIC_BASE_URL": base_url.removesuffix("/").removesuffix("/v1"),
            "ANTHROPIC_API_KEY": "unused",  # the episode's URL is its capability
            "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
            "DISABLE_AUTOUPDATER": "1",
        }
        prompt = f"{task['question']} Write only the number into answer.txt."
        command = [claude_binary(), "-p", prompt, "--model", "policy",
                   "--system-prompt", SYSTEM, "--tools", "Bash", "--allowedTools", "Bash",
                   "--max-turns", str(max_turns)]  # fmt: skip
        subprocess.run(command, cwd=work, env=env, stdin=subprocess.DEVNULL,
                       capture_output=True, timeout=timeout_s, check=False)  # fmt: skip
        answer = work / "answer.txt"
        return answer.read_text(errors="replace").strip() if answer.is_file() else None
