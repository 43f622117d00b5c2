"""The settings of an ``openenv:URL`` recipe: seeded episodes of the server at URL as tasks.

A plain server is played with ``ACT:`` lines (the ``openenv_act`` tool); an MCP tool server
(``--set openenv.mode=mcp``, or found by its ``/schema``: OpenEnv's ``CallToolAction``) has its
tools listed once here and written to each row as the row's ``tools``, whose calls go to the
episode's own server session (``rollout.task_tools.on_call: env``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from agentfly_cli.errors import UserError
from agentfly_cli.recipes.families import tasks_file, whole_option, write_tasks
from agentfly_cli.rollout.check_answers import is_function_ref
from bridges_builtin.openenv_client import TRANSPORTS, OpenEnvError, schema
from bridges_builtin.openenv_mcp import is_mcp_schema, list_tools

DEFAULT_SIZE = 100
MODES = ("act", "mcp")
SYSTEM_PROMPT = (
    "You act in an environment. Read what it says, then take one action per turn on one line "
    "as ACT: <action>."
)
MCP_SYSTEM_PROMPT = (
    "You act in an environment through its tools. Read what it says, then call one tool per "
    "turn; each result comes back to you."
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
            "['ACT: 3'] or an MCP tool call) or --gold TEMPLATE"
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
    mode, field = server_mode(param, url, options)
    observe = options.get("observe")
    check = check_section(param, options)
    tools = mcp_tools(param, url, transport) if mode == "mcp" else None
    key = {"url": url, "transport": transport, "size": size, "seed": seed, "field": field,
           "observe": observe, **({"mode": mode, "tools": tools} if tools else {})}  # fmt: skip
    rows = [
        {
            "id": f"openenv-s{seed + i}",
            "url": url,
            "transport": transport,
            "seed": seed + i,
            "field": field,
            "observe": observe,
            **({"mode": "mcp", "tools": tools} if tools else {}),
        }  # fmt: skip
        for i in range(size)
    ]
    path = write_tasks(tasks_file("openenv", url, key), lambda: rows)
    settings = _settings(param, url, transport, path, sessions, turns, check)
    return mcp_settings(settings, url, len(tools)) if tools else settings


def server_mode(param: str | None, url: str, options: Mapping[str, Any]) -> tuple[str, Any]:
    """The recipe's mode (``act`` or ``mcp``) and the action's text field: as given, else read
    from the server's ``/schema`` (an MCP server's action is OpenEnv's ``CallToolAction``)."""
    mode, field = options.get("mode"), options.get("field")
    if mode is not None and mode not in MODES:
        raise UserError(f"--set openenv.mode={mode!r}: give act (ACT: lines) or mcp (the "
                        "server's tools)")  # fmt: skip
    if mode == "mcp" or field is not None:
        return mode or "act", field
    try:
        action = schema(url).get("action") or {}
    except OpenEnvError as error:
        raise UserError(
            f"openenv:{param}: {error}; start the server first (or give --set openenv.field)"
        ) from error
    if mode is None and is_mcp_schema(action):
        return "mcp", None
    return "act", text_field(action)


def mcp_tools(param: str | None, url: str, transport: str) -> list[dict[str, Any]]:
    """The MCP server's tools as OpenAI function schemas (one ``list_tools`` session); one
    UserError line for a server that is down, answers no tool list, or lists none."""
    if transport != "ws":
        raise UserError(f"openenv:{param}: an MCP tool server needs --set openenv.transport=ws "
                        "(over http each call would get a fresh server env)")  # fmt: skip
    try:
        tools = list_tools(url)
    except OpenEnvError as error:
        raise UserError(f"openenv:{param}: {error}; start the MCP server first") from error
    if not tools:
        raise UserError(
            f"openenv:{param}: the MCP server at {url} lists no tools (list_tools gave none); "
            "register its tools, or play it with ACT: lines (--set openenv.mode=act)"
        )
    return tools


def mcp_settings(settings: dict[str, Any], url: str, count: int) -> dict[str, Any]:
    """An ACT: recipe's settings made an MCP tool recipe: the row's tools, rendered by a
    tool-calling template, parsed as Hermes calls, run on the episode's own session."""
    settings["description"] = (
        f"the OpenEnv MCP server at {url} ({count} tools): it speaks first, the model calls its "
        "tools, the server's own reward"
    )
    settings["tools"] = []
    settings["chat"] = {"template": "chatml-tools", "parser": "hermes",
                        "system_prompt": MCP_SYSTEM_PROMPT}  # fmt: skip
    rollout = settings["rollout"]
    rollout.pop("stop")  # a call spans lines
    rollout.update(task_tools={"on_call": "env", "env": "openenv"}, max_tokens_per_turn=64,
                   max_total_tokens=4096)  # fmt: skip
    settings["trainer"]["micro_batch_tokens"] = 4096
    return settings


def _settings(
    param: str | None,
    url: str,
    transport: str,
    path: Any,
    sessions: int,
    turns: int,
    check: dict[str, Any],
) -> dict[str, Any]:
    """The settings of an ``ACT:`` recipe on the server at ``url``."""
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
