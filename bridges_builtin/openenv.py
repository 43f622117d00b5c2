"""The openenv bridge: any OpenEnv server as a recipe (``agentfly train
openenv:127.0.0.1:8000``), played through pooled client envs that speak first.

Each task is one seeded episode of the server's environment; its reset observation is the first
prompt, the model acts with ``ACT: <action>`` lines (the ``openenv_act`` tool, one server step
each) or, on an MCP tool server, calls the server's tools (each row's ``tools``, one
``call_tool`` step each), and the server's reward and done go on the reward channel
(``env_reward``). The pool is
bounded by the server's sessions (``--set openenv.sessions=N``). The client speaks the protocol
with httpx and websockets; openenv-core is needed only to run a server. See
docs/bridges/openenv.md.
"""

from __future__ import annotations

from typing import Any

from agentfly_cli.plugin_host.hookspecs import hookimpl
from agentfly_cli.plugin_host.registry import RecipeFamily

#: the options ``--set openenv.KEY=VALUE`` takes
OPTIONS = {
    "url": "the server's full URL (http(s)://...), for one that HOST:PORT cannot name",
    "mode": "act (ACT: lines, one action per step) or mcp (the server's MCP tools, listed at "
    "build time as each row's tools); default: mcp when the server's /schema action is "
    "OpenEnv's CallToolAction, else act",
    "transport": "ws (default: one server environment per session) or http (stateless)",
    "sessions": "the server's max concurrent sessions (its max_concurrent_envs; default 1)",
    "size": "episodes in all (default 100), one seed each",
    "seed": "the first episode's seed (default 0); episode i has seed + i",
    "field": "the action's text field (default: its one string field in the server's "
    "/schema; none: ACT: takes the action as JSON)",
    "observe": "the observation field shown to the model (default: its one string field)",
    "max_turns": "steps per episode at most (default 10)",
    "gold": "module:function or file.py:function (the task row -> its gold responses, e.g. "
    "['ACT: 3'], or an MCP server's tool call as the parser reads it) for `agentfly recipes "
    "check`: OpenEnv servers ship no gold answers",
}


def build(param: str | None, options: Any) -> dict[str, Any]:
    from bridges_builtin.openenv_recipe import build as build_recipe

    return build_recipe(param, options)


@hookimpl
def register_recipes(register):
    register(
        "openenv",
        RecipeFamily(build=build, param="HOST:PORT", options=OPTIONS),
        "any OpenEnv server (HTTP or WebSocket): it speaks first, ACT: lines or its MCP tools, "
        "the server's own reward; the pool is bounded by its sessions",
    )


@hookimpl
def register_envs(register):
    from bridges_builtin.openenv_env import OPENENV

    register(OPENENV)


@hookimpl
def register_tools(register):
    from bridges_builtin.openenv_env import openenv_act

    register(openenv_act)
