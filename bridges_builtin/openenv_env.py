"""A client env for any OpenEnv server, with its one action tool ``openenv_act``.

One :class:`OpenEnvEnv` holds one session with the server named by the task (``task["url"]``,
``task["transport"]``: ``ws`` keeps one server environment per session, ``http`` is stateless).
``reset(task)`` resets the server's environment with the task's ``seed``; its observation is the
episode's first message (the env speaks first). Each ``openenv_act`` call is one server step:
the action is ``{task["field"]: text}`` when the task names the action's text field, else the
text read as a JSON object. A task of ``mode: mcp`` plays an MCP tool server: each call of one
of the row's tools (``{"tool": NAME, "arguments": {...}}``, from ``on_call: env``) is one
``call_tool`` step (bridges_builtin/openenv_mcp.py). The server's reward and done go to the
reward channel; ``done`` ends the episode. The session is closed at release; an unreachable
server is one error.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from agentfly_cli.components.tools import ToolResult, tool
from agentfly_cli.envs.base import BaseEnv, EnvSpec
from agentfly_cli.errors import UserError
from bridges_builtin.openenv_client import TRANSPORTS, OpenEnvError, session
from bridges_builtin.openenv_mcp import call_action, tool_result


def observation_text(observation: Any, field: str | None = None) -> str:
    """The text of a server observation: its ``field``, its one string field, or JSON."""
    if not isinstance(observation, Mapping):
        return str(observation)
    if field and isinstance(observation.get(field), str):
        return observation[field]
    texts = [value for value in observation.values() if isinstance(value, str)]
    if len(texts) == 1:
        return texts[0]
    return json.dumps(dict(observation), sort_keys=True, default=str)


def _action(text: str, field: str | None) -> dict[str, Any]:
    if field:
        return {field: text}
    try:
        action = json.loads(text)
    except json.JSONDecodeError:
        action = None
    if not isinstance(action, dict):
        raise ValueError(f"the action must be a JSON object (the server's action), not {text!r}")
    return action


class OpenEnvEnv(BaseEnv):
    """One session with an OpenEnv server per episode."""

    def __init__(self) -> None:
        self._session: Any = None
        self.field: str | None = None
        self.observe: str | None = None
        self.mcp = False  # the task's mode is mcp: steps are the row's tool calls
        self.done = False

    async def reset(self, task: Mapping[str, Any] | None = None) -> dict[str, Any] | None:
        await self.close()
        self.done = False
        if not task:
            return None
        url, transport = task.get("url"), task.get("transport", "ws")
        if not isinstance(url, str) or not url.startswith(("http://", "https://")):
            raise UserError(f"task field 'url' must be an http(s) URL, not {url!r}")
        if transport not in TRANSPORTS:
            raise UserError(f"task field 'transport' must be ws or http, not {transport!r}")
        self.field, self.observe = task.get("field"), task.get("observe")
        self.mcp = task.get("mode") == "mcp"
        self._session = session(url.rstrip("/"), transport, float(task.get("timeout", 30.0)))
        options = {"seed": task["seed"]} if isinstance(task.get("seed"), int) else {}
        result = await self._session.reset(options)
        return {
            "observation": observation_text(result["observation"], self.observe),
            "info": {"url": url, "transport": transport, **options},
        }

    async def step(self, action: Any) -> dict[str, Any] | ToolResult:
        if self._session is None:
            raise RuntimeError("no OpenEnv session: the env was not reset with a task")
        if self.done:
            return {"observation": "The episode is over.", "done": True}
        if self.mcp and isinstance(action, Mapping) and "tool" in action:
            return await self._call_tool(str(action["tool"]), action.get("arguments") or {})
        payload = action if isinstance(action, dict) else _action(str(action), self.field)
        result = await self._session.step(payload)
        self.done = bool(result.get("done", False))
        reward = result.get("reward")
        return {
            "observation": observation_text(result["observation"], self.observe),
            "done": self.done,
            "reward": float(reward) if isinstance(reward, (int, float)) else None,
        }

    async def _call_tool(self, name: str, arguments: Mapping[str, Any]) -> ToolResult:
        """One MCP ``call_tool`` step: the tool's text or its error, with reward and done."""
        try:
            step = await self._session.step(call_action(name, arguments))
        except OpenEnvError as error:  # the server is gone or broke: the episode ends
            self.done = True
            return ToolResult.error(str(error), "openenv", done=True)
        result = tool_result(step)
        self.done = bool(result.info.get("done"))
        return result

    async def close(self) -> None:
        current, self._session = self._session, None
        if current is not None:
            await current.close()

    async def healthy(self) -> bool:
        return True


OPENENV = EnvSpec(
    name="openenv",
    factory=OpenEnvEnv,
    description="a session with an OpenEnv server (HTTP or WebSocket); the server speaks "
    "first, takes openenv_act steps (or, an MCP server, the row's tool calls) and reports its "
    "own reward",
    pool_max=1,
    resources={"cpu": 0.01, "memory_mb": 5},
)


@tool(env="openenv")
async def openenv_act(env: OpenEnvEnv, action: str) -> ToolResult:
    """Send one action to the environment (its text, or a JSON object of its fields)."""
    try:
        result = await env.step(action)
    except OpenEnvError as error:
        # the server is gone or broke: one error, and the episode ends (no reward)
        return ToolResult.error(str(error), "openenv", done=True)
    except ValueError as error:
        return ToolResult.error(str(error), "bad_action")
    info: dict[str, Any] = {}
    if result["done"] or result.get("reward") is not None:
        info = {"done": result["done"], "reward": result.get("reward")}
    return ToolResult(result["observation"] or "(the environment said nothing)", info=info)
