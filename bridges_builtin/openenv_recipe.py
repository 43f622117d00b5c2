"""The settings of an ``openenv:URL`` recipe: seeded episodes of the server at URL as tasks."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from agentfly_cli.errors import UserError
from agentfly_cli.recipes.families import tasks_file, whole_option, write_tasks
from agentfly_cli.rollout.check_answers import is_function_ref
from bridges_builtin.openenv_client import TRANSPORTS, OpenEnvError, schema

DEFAULT_SIZE = 100
SYSTEM_PROMPT = (
    "You act in an environment. Read what it says, then take one action per turn on one line "
    "as ACT: <action>."
)


def text_field(action_schema: Mapping[str, Any]) -> str | None:
    """The action's one string field (besides ``metadata``), or None when it has not one."""
    properties = action_schema.get("properties") or {}
    texts = [
        name
        for name, spec in properties.items()
        if name != "metadata" and isinstance(spec, Mapping) and spec.get("type") == "string"
    ]
    return texts[0] if len(texts) == 1 else None


def server_url(param: str | None, options: Mapping[str, Any]) -> str:
    """The server's URL: ``--set openenv.url=...``, else ``http://`` + the recipe's HOST:PORT
    (a recipe name holds no ``/``: the loader would take it for a file)."""
    url = options.get("url")
    if url is None and param and ":" in param and "/" not in param:
        url = f"http://{param}"
    if not isinstance(url, str) or not url.startswith(("http://", "https://")):
        raise UserError(
            f"openenv:{param}: give the server as openenv:HOST:PORT (openenv:127.0.0.1:8000) "
            "or --set openenv.url=http(s)://..."
        )
    return url.rstrip("/")


def check_section(param: str | None, options: Mapping[str, Any]) -> dict[str, Any]:
    """The recipe's ``check``: ``--set openenv.gold=MODULE:FUNCTION``, else the one line that
    ``recipes check`` says (the server ships no gold answers)."""
    gold = options.get("gold")
    if gold is None:
        return {
            "missing": f"no gold answers for openenv:{param} (the server ships none); pass "
            "--set openenv.gold=MODULE:FUNCTION (the task row -> its responses, e.g. "
            "['ACT: 3']) or --gold TEMPLATE"
        }
    if not isinstance(gold, str) or not is_function_ref(gold):
        raise UserError(
            f"--set openenv.gold={gold!r}: give MODULE:FUNCTION or FILE.py:FUNCTION (the task "
            "row -> its gold responses)"
        )
    return {"gold": gold}


def build(param: str | None, options: Mapping[str, Any]) -> dict[str, Any]:
    """The settings of ``openenv:<url>``, after asking the server for its action schema."""
    url = server_url(param, options)
    transport = options.get("transport", "ws")
    if transport not in TRANSPORTS:
        raise UserError(f"--set openenv.transport={transport!r}: give ws or http")
    size = whole_option("openenv", options, "size", DEFAULT_SIZE, 2)
    seed = whole_option("openenv", options, "seed", 0, 0)
    sessions = whole_option("openenv", options, "sessions", 1, 1)
    turns = whole_option("openenv", options, "max_turns", 10, 1)
    field = options.get("field")
    if field is None:  # the action's text field, from the server's schema
        try:
            field = text_field(schema(url).get("action") or {})
        except OpenEnvError as error:
            raise UserError(
                f"openenv:{param}: {error}; start the server first (or give --set openenv.field)"
            ) from error
    observe = options.get("observe")
    check = check_section(param, options)
    key = {"url": url, "transport": transport, "size": size, "seed": seed, "field": field,
           "observe": observe}  # fmt: skip
    rows = [
        {
            "id": f"openenv-s{seed + i}",
            "url": url,
            "transport": transport,
            "seed": seed + i,
            "field": field,
            "observe": observe,
        }  # fmt: skip
        for i in range(size)
    ]
    path = write_tasks(tasks_file("openenv", url, key), lambda: rows)
    return {
        "name": f"openenv:{param}",
        "description": f"the OpenEnv server at {url} ({transport}): it speaks first, ACT: "
        "lines, the server's own reward",
        "model": "smollm2",
        "backend": {"name": "hf"},
        "data": {"path": str(path), "holdout": 0.1, "holdout_seed": 0},
        "tools": ["openenv_act"],
        "reward": "env_reward",
        # each env holds one server session: never more than the server has
        "envs": {"openenv": {"pool_max": sessions}},
        "chat": {
            "parser": "line",
            "parser_options": {"commands": {"ACT": {"tool": "openenv_act", "argument": "action"}}},
            "observation": {"role": "user", "template": "{observation}"},
            "system_prompt": SYSTEM_PROMPT,
        },
        "rollout": {
            "opening_env": "openenv",
            "n": 8,
            "max_turns": turns,
            "max_tokens_per_turn": 32,
            "max_total_tokens": 2048,
            "max_errors": 3,
            "temperature": 1.0,
            "stop": ["\n"],
        },
        "check": check,
        "trainer": {
            "steps": 20,
            "tasks_per_step": 4,
            "micro_batch_tokens": 1024,
            "algorithm": {"advantage": "grpo", "policy_loss": "ppo"},
            "backend": {"name": "torch", "lr": 8.0e-6, "gradient_checkpointing": True},
        },
    }
