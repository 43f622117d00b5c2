"""OpenEnv's MCP tool environments, spoken as ``/ws`` step messages (never ``POST /mcp``,
which is stateless).

An MCP server (``MCPEnvironment``, or ``create_app(Env, CallToolAction, CallToolObservation)``)
takes two actions in a step: ``{"type": "list_tools"}``, answered by ``{"tools": [{"name",
"description", "input_schema"}]}``, and ``{"type": "call_tool", "tool_name": NAME,
"arguments": {...}}``, answered by ``{"tool_name", "result", "error"}``, where ``result`` is
FastMCP's call result (``content`` blocks, ``is_error``) and ``error`` the framework's
``{"error_type", "message"}``. This module lists the tools (as OpenAI function schemas), builds
the call action, and reads its answer as a :class:`ToolResult`.
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Mapping
from typing import Any

from agentfly_cli.components.tools import ToolErrorKind, ToolResult
from bridges_builtin.openenv_client import OpenEnvError, WsSession

#: the framework's error types (openenv-core's ToolErrorType) as our error kinds
ERROR_KINDS = {
    "invalid_args": ToolErrorKind.INVALID_ARGUMENTS,
    "tool_not_found": ToolErrorKind.UNKNOWN_TOOL,
    "timeout": ToolErrorKind.TIMEOUT,
    "execution_error": ToolErrorKind.EXCEPTION,
    "transport_error": "openenv",
}


def is_mcp_schema(action_schema: Mapping[str, Any]) -> bool:
    """Whether a server's ``/schema`` action is OpenEnv's ``CallToolAction`` (an MCP server)."""
    properties = action_schema.get("properties") or {}
    return "tool_name" in properties and "arguments" in properties


def call_action(name: str, arguments: Mapping[str, Any]) -> dict[str, Any]:
    """The step action that calls tool ``name``."""
    return {"type": "call_tool", "tool_name": name, "arguments": dict(arguments)}


def function_schema(tool: Mapping[str, Any]) -> dict[str, Any]:
    """One listed MCP tool as an OpenAI function schema (its ``input_schema``: the parameters)."""
    parameters = tool.get("input_schema") or tool.get("inputSchema") or {}
    parameters = {k: v for k, v in parameters.items() if k not in ("title", "$schema")}
    parameters.setdefault("type", "object")
    parameters.setdefault("properties", {})
    return {
        "type": "function",
        "function": {
            "name": str(tool.get("name", "")),
            "description": str(tool.get("description") or ""),
            "parameters": parameters,
        },
    }


async def _list(url: str, timeout: float) -> list[dict[str, Any]]:
    session = WsSession(url, timeout)
    try:
        result = await session.step({"type": "list_tools"})
    finally:
        await session.close()
    observation = result.get("observation") or {}
    tools = observation.get("tools") if isinstance(observation, Mapping) else None
    if not isinstance(tools, list):
        raise OpenEnvError(f"OpenEnv server {url}/ws answered list_tools with {observation!r:.200}"
                           ", not a tool list: is it an MCP environment?")  # fmt: skip
    return [function_schema(t) for t in tools if isinstance(t, Mapping)]


def list_tools(url: str, timeout: float = 30.0) -> list[dict[str, Any]]:
    """The server's tools as OpenAI function schemas: one ``/ws`` session, closed after. Runs
    in its own thread, so it works whether or not the caller has an event loop running."""
    box: dict[str, Any] = {}

    def run() -> None:
        try:
            box["tools"] = asyncio.run(_list(url, timeout))
        except BaseException as error:  # handed to the caller's thread
            box["error"] = error

    thread = threading.Thread(target=run, name="openenv-list-tools", daemon=True)
    thread.start()
    thread.join()
    if "error" in box:
        raise box["error"]
    return box["tools"]


def _content_text(result: Any) -> str:
    """The text of FastMCP's call result: its text blocks, else its data, else its JSON."""
    if not isinstance(result, Mapping):
        return "" if result is None else str(result)
    blocks = result.get("content")
    if isinstance(blocks, list):
        texts = [b.get("text") for b in blocks if isinstance(b, Mapping)]
        texts = [text for text in texts if isinstance(text, str)]
        if texts:
            return "\n".join(texts)
    for key in ("data", "structured_content", "structuredContent"):
        if result.get(key) is not None:
            value = result[key]
            return value if isinstance(value, str) else json.dumps(value, default=str)
    return json.dumps(dict(result), sort_keys=True, default=str)


def tool_result(step: Mapping[str, Any]) -> ToolResult:
    """A ``call_tool`` step's answer as the model's observation: the tool's text, or its error
    (counted, of the framework's kind), with the server's reward and done on the reward channel."""
    observation = step.get("observation") or {}
    if not isinstance(observation, Mapping):
        observation = {"result": observation}
    reward, done = step.get("reward"), bool(step.get("done", False))
    info: dict[str, Any] = {}
    if done or isinstance(reward, (int, float)):
        number = isinstance(reward, (int, float)) and not isinstance(reward, bool)
        info = {"done": done, "reward": float(reward) if number else None}
    error = observation.get("error")
    result = observation.get("result")
    if isinstance(error, Mapping):
        kind = ERROR_KINDS.get(str(error.get("error_type")), ToolErrorKind.EXCEPTION)
        return ToolResult.error(str(error.get("message") or error), kind, **info)
    if isinstance(result, Mapping) and (result.get("is_error") or result.get("isError")):
        return ToolResult.error(_content_text(result), ToolErrorKind.EXCEPTION, **info)
    return ToolResult(_content_text(result) or "(the tool said nothing)", info=info)
