"""The installed components: the plugin host, its registries, and tools and rewards to call.

Light to import (the plugin host loads its plugins on first use; tools, rewards and MCP load
when a function below runs), so ``agentfly --help`` stays fast.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any

from agentfly_cli.plugin_host.lazy_exports import lazy_exports
from agentfly_cli.plugin_host.plugins import (
    LOAD_PLUGINS_ENV,
    PluginHost,
    PluginInfo,
    get_plugin_host,
)
from agentfly_cli.plugin_host.registry import Entry, Registry, conflict_message

if TYPE_CHECKING:
    from agentfly_cli.components.rewards import Reward, RewardResult
    from agentfly_cli.components.tools import Tool, ToolResult

__all__ = [
    "LOAD_PLUGINS_ENV",
    "Entry",
    "PluginHost",
    "PluginInfo",
    "Registry",
    "Reward",
    "RewardResult",
    "Tool",
    "ToolResult",
    "call_tool_async",
    "conflict_of",
    "get_plugin_host",
    "is_bad_input",
    "is_mcp_server",
    "provenance_fields",
    "resolve_reward",
    "resolve_tool",
    "resolve_tools",
    "score_reward_async",
]

# the component types, imported on first use
__getattr__ = lazy_exports(
    globals(),
    {
        "Tool": "agentfly_cli.components.tools",
        "ToolResult": "agentfly_cli.components.tools",
        "Reward": "agentfly_cli.components.rewards",
        "RewardResult": "agentfly_cli.components.rewards",
    },
)


def provenance_fields(entry: Entry) -> dict[str, Any]:
    """Where ``entry`` comes from: its plugin, distribution, version, built in or not."""
    origin = entry.provenance
    return {
        "plugin": origin.plugin,
        "distribution": origin.distribution,
        "version": origin.version,
        "builtin": origin.builtin,
    }


def conflict_of(registry: Registry, entry: Entry) -> str | None:
    """The conflict message for ``entry``'s name, if another plugin registered it too."""
    entries = registry.conflicts().get(entry.name)
    if not entries:
        return None
    return conflict_message(registry.singular, entry.name, entries[0], entries[1])


def resolve_tool(spec: str) -> Tool:
    """A registered tool by name, a ``module:attr`` / ``file.py:attr`` tool, or the one tool
    of an ``mcp:...#tool`` entry; an unknown one is a UserError."""
    from agentfly_cli.plugin_host.loading import resolve_tool as resolve

    return resolve(spec)


def resolve_tools(spec: str) -> list[Tool]:
    """The tools of one ``tools:`` entry: one tool, or every tool of an ``mcp:`` server."""
    from agentfly_cli.plugin_host.loading import resolve_tools as resolve

    return resolve(spec)


def is_mcp_server(spec: str) -> bool:
    """``spec`` names a whole MCP server (``mcp:<command or URL>`` with no ``#tool``)."""
    from agentfly_cli.components.mcp_tools import is_mcp_spec, parse_target

    return is_mcp_spec(spec) and parse_target(spec).select is None


def resolve_reward(spec: str) -> Reward:
    """A registered reward by name, or a ``module:attr`` / ``file.py:attr`` reward."""
    from agentfly_cli.plugin_host.loading import resolve_reward as resolve

    return resolve(spec)


async def call_tool_async(
    tool: Tool,
    arguments: dict[str, Any],
    *,
    task: dict[str, Any],
    timeout: float | None = None,
    options: dict[str, Any] | None = None,
) -> ToolResult:
    """Run ``tool`` once; an env tool gets its own env (made with ``options``, reset with
    ``task``) that is closed afterwards. ``timeout``: seconds instead of the tool's."""
    override: dict[str, Any] = {} if timeout is None else {"timeout": timeout}
    if tool.env is None:
        return await tool.invoke(arguments, **override)
    from agentfly_cli.envs.base import standalone_env
    from agentfly_cli.envs.manager import check_options

    spec = tool.env_spec or get_plugin_host().components.envs.get(tool.env)
    if options:
        check_options(spec, options)
        spec = spec.model_copy(update={"factory": functools.partial(spec.factory, **options)})
    async with standalone_env(spec, task) as env:
        return await tool.invoke(arguments, env=env, **override)


def is_bad_input(result: ToolResult) -> bool:
    """The call failed on its arguments (bad JSON or arguments the schema refuses)."""
    from agentfly_cli.components.tools import ToolErrorKind

    return result.error_kind in (ToolErrorKind.INVALID_ARGUMENTS, ToolErrorKind.INVALID_JSON)


async def score_reward_async(reward: Reward, prediction: str, row: dict[str, Any]) -> RewardResult:
    """Score ``prediction`` against the dataset fields ``row``; a reward that raises (its
    ``on_error="raise"``) gives a failed score of 0, not an exception."""
    from agentfly_cli.components.rewards import RewardResult
    from agentfly_cli.errors import RewardError

    try:
        return await reward.score(prediction, None, row)
    except RewardError as exc:
        return RewardResult(0.0, {}, reward.name, failed=True, error=str(exc))
