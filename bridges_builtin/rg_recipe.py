"""The settings of a ``reasoning_gym:...`` recipe: its tasks written once to the cache, one
worked example per generator, the plain ``ANSWER:`` line protocol SmolLM2-135M can follow,
the generator's own scorer as the reward, and its curriculum levels as ``trainer.curriculum``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from agentfly_cli.files.json_files import iter_json_lines
from agentfly_cli.recipes.families import tasks_file, write_tasks
from bridges_builtin import rg_tasks
from bridges_builtin.library import version

# SmolLM2-135M on chain_sum's 50 held-out tasks x 4: this prompt 188 of 200 replies with an
# ANSWER: line (mean reward 0.055); "Answer with one line: ANSWER: <your answer>" 157 (0.045)
SYSTEM = "Solve the task. Then write your final answer on one line: ANSWER: <answer>"
SYSTEM_MULTILINE = (
    "Solve the task. Then write ANSWER: and your final answer, which may span several lines, "
    "and nothing after it."
)
GOLD = "ANSWER: {answer}"
#: answers a verifier must score below the gold answer (the self-check's junk)
JUNK = ["ANSWER: qzx-not-an-answer", "I cannot solve this."]
MAX_EXAMPLES = 3


def build(param: str | None, options: Mapping[str, Any]) -> dict[str, Any]:
    """The settings of ``reasoning_gym:PARAM`` (its tasks written first, or found written)."""
    rg_tasks.library()
    sources = rg_tasks.parse_sources(param or "")
    parsed = rg_tasks.parse_options(options)
    key = {
        "param": [(s.name, s.weight) for s in sources],
        "options": {"size": parsed.size, "seed": parsed.seed, "levels": parsed.levels,
                    "config": dict(parsed.config)},
        "reasoning_gym": version("reasoning-gym"),
        "format": 1,
    }  # fmt: skip
    path = write_tasks(
        tasks_file("reasoning_gym", param or "", key), lambda: rg_tasks.rows(sources, parsed)
    )
    rows = [row for _, row in iter_json_lines(path, "delete the file to build it again")]
    return settings(param or "", sources, parsed, str(path), rows)


def settings(param, sources, options, path: str, rows: list[dict]) -> dict[str, Any]:
    """The recipe's settings over its written ``rows``."""
    multiline = any(row["rg"].get("multiline") for row in rows)
    longest = max(len(row["answer"] or "") for row in rows)
    question = max(len(row["question"]) for row in rows)
    turn_tokens = min(1024, max(48, longest // 2 + 16))  # SmolLM2: about 3 characters a token
    levels = sorted({row["level"] for row in rows})
    examples = _examples(sources, options)
    names = "+".join(s.name for s in sources)
    data = {
        "name": f"reasoning_gym-{param}"[:80],
        "description": f"reasoning-gym {names}: the ANSWER: line, scored by the generator",
        "model": "smollm2",
        "backend": {"name": "hf"},
        "data": {"path": path, "holdout": 0.1, "holdout_seed": 0},
        "tools": [],
        "reward": "reasoning_gym_score",
        "chat": {
            "parser": "line",
            "parser_options": {"commands": {"ANSWER": {"tool": None}}},
            "system_prompt": SYSTEM_MULTILINE if multiline else SYSTEM,
            "examples": examples,
        },
        "rollout": {
            "n": 8,
            "max_turns": 1,
            "max_tokens_per_turn": turn_tokens,
            "max_total_tokens": min(8192, 512 + question // 2 + turn_tokens + _length(examples)),
            "temperature": 1.0,
            "stop": [] if multiline else ["\n"],
        },
        "trainer": {
            "steps": 20,
            "tasks_per_step": 4,
            "micro_batch_tokens": 2048,
            "algorithm": {"advantage": "grpo", "policy_loss": "ppo"},
            "backend": {"name": "torch", "lr": 8.0e-6, "warmup_steps": 4},
            # `--warm-start`: fine-tune on the gold answers of the first training tasks first
            "warm_start": {"responses": [GOLD], "limit": 160, "balance": "level"},
        },
        "check": {"gold": GOLD, "junk": list(JUNK)},
    }
    if len(levels) > 1:
        data["trainer"]["curriculum"] = {"field": "level", "levels": levels}
    return data


def _examples(sources, options) -> list[dict[str, str]]:
    """One worked example (user question, assistant ANSWER: line) per generator, the first
    ``MAX_EXAMPLES`` that have a single gold answer."""
    messages: list[dict[str, str]] = []
    for source in sources:
        if len(messages) >= 2 * MAX_EXAMPLES:
            break
        config = rg_tasks.config_of(options, sources, source.name)
        shown = rg_tasks.example(source.name, options, config)
        if shown is not None:
            messages += [
                {"role": "user", "content": shown["question"]},
                {"role": "assistant", "content": f"ANSWER: {shown['answer']}"},
            ]
    return messages


def _length(examples: list[dict[str, str]]) -> int:
    return sum(len(m["content"]) for m in examples) // 2
