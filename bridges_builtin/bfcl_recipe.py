"""The settings of a ``bfcl:CATEGORY`` recipe, and the category's entries as task rows."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from agentfly_cli.errors import UserError
from agentfly_cli.recipes.families import tasks_file, write_tasks
from bridges_builtin.bfcl_data import AST_CATEGORIES, category_rows, data_folder
from bridges_builtin.bfcl_multi import MULTI_TURN_CATEGORIES, NOT_BUILT, multi_turn_rows
from bridges_builtin.library import version

MULTI_TURN_SYSTEM_PROMPT = (
    "You are an expert in composing functions. The user asks for tasks step by step; make the "
    "function calls that do each one, read their results, and when the step is done reply "
    "without a call. If a needed value is missing, ask for it."
)
SYSTEM_PROMPT = (
    "You are an expert in composing functions. Given a question and a set of possible "
    "functions, make the function calls that answer it. If none of the functions fits, say so "
    "and call none."
)


def build(param: str | None, options: Mapping[str, Any]) -> dict[str, Any]:
    """The settings of ``bfcl:<param>``, after writing the category's rows to the cache."""
    data_folder()  # one line naming the install command when bfcl-eval is absent
    if param in MULTI_TURN_CATEGORIES or param in NOT_BUILT:
        return build_multi_turn(str(param))
    if param not in AST_CATEGORIES:
        raise UserError(
            f"bfcl category {param!r} is not one built here; pick one of: "
            + ", ".join([*AST_CATEGORIES, *MULTI_TURN_CATEGORIES])
        )
    rows = category_rows(str(param))  # one line naming the categories for an unknown one
    key = {"category": param, "bfcl-eval": version("bfcl-eval"), "layout": 2}  # 2: solution
    path = write_tasks(tasks_file("bfcl", str(param), key), lambda: rows)
    return {
        "name": f"bfcl:{param}",
        "description": f"BFCL {param} ({len(rows)} entries, {AST_CATEGORIES[param]}): each "
        "task's own tools, pythonic calls, BFCL's AST checker",
        "model": "smollm2",
        "backend": {"name": "hf"},
        "data": {"path": str(path), "holdout": 0.1, "holdout_seed": 0},
        "tools": [],
        "reward": "bfcl_ast",
        "chat": {"template": "pythonic", "parser": "pythonic", "system_prompt": SYSTEM_PROMPT},
        "rollout": {
            "task_tools": {"on_call": "end"},
            "n": 8,
            "max_turns": 1,  # BFCL scores the first reply
            "max_tokens_per_turn": 256,  # parallel calls run long
            "max_total_tokens": 4096,
            "temperature": 1.0,
        },
        "trainer": _trainer(
            micro_batch_tokens=2048,
            # the possible answers' calls, one reply per task; rows BFCL rejects are dropped.
            # SmolLM2 writes no call before it (0.0 held out), 0.375 after (docs/learning.md)
            warm_start={"enabled": True, "responses": ["{solution}"], "limit": 160},
        ),
        "check": {"gold": "bridges_builtin.bfcl_data:gold_responses"},
    }


def build_multi_turn(category: str) -> dict[str, Any]:
    """The settings of ``bfcl:multi_turn_*``: user turns after each answer, the row's tools
    run on the episode's own API instances (the ``bfcl_api`` env), BFCL's multi-turn checker."""
    rows = multi_turn_rows(category)  # one line naming the built ones for an unbuilt one
    key = {"category": category, "bfcl-eval": version("bfcl-eval")}
    path = write_tasks(tasks_file("bfcl", category, key), lambda: rows)
    return {
        "name": f"bfcl:{category}",
        "description": f"BFCL {category} ({len(rows)} entries): user turns after each answer, "
        "calls run on the episode's own API instances, BFCL's multi-turn checker",
        "model": "smollm2",
        "backend": {"name": "hf"},
        "data": {
            "path": str(path),
            "holdout": 0.1,
            "holdout_seed": 0,
            "user_turns_field": "user_turns",
        },
        "tools": [],
        "reward": "bfcl_multi_turn",
        "chat": {
            "template": "pythonic",
            "parser": "pythonic",
            "system_prompt": MULTI_TURN_SYSTEM_PROMPT,
        },
        "rollout": {
            "task_tools": {"on_call": "env", "env": "bfcl_api"},
            "n": 8,
            "max_turns": 64,  # BFCL allows 20 steps per user turn; base has up to 7 turns
            "max_tokens_per_turn": 256,
            "max_total_tokens": 8192,  # gold episodes: ~4.5k smollm2 tokens, tools included
            "temperature": 1.0,
        },
        "trainer": _trainer(micro_batch_tokens=8192),
        "check": {"gold": "bridges_builtin.bfcl_multi:gold_multi_turn"},
    }


def _trainer(micro_batch_tokens: int, warm_start: dict | None = None) -> dict[str, Any]:
    """The trainer section both kinds of BFCL recipe share (GRPO on SmolLM2)."""
    return {
        "steps": 20,
        "tasks_per_step": 4,
        "micro_batch_tokens": micro_batch_tokens,
        "algorithm": {"advantage": "grpo", "policy_loss": "ppo"},
        "backend": {"name": "torch", "lr": 8.0e-6, "gradient_checkpointing": True},
        "warm_start": warm_start or {"enabled": False},
    }
