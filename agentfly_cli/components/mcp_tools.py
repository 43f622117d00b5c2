"""The MCP bridge: the tools of any MCP server as agent tools.

Name a server in a run's tools as ``mcp:<command line>`` (a stdio server, launched with this
process's environment and working directory) or ``mcp:<http(s) URL>`` (streamable HTTP).
``mcp[fs]:...`` prefixes the tool names (``fs_read_file``); ``...#add`` keeps one tool.

At resolve time the bridge connects once to list the server's tools and builds a
:class:`~agentfly_cli.components.tools.Tool` from each tool's JSON Schema (arguments are
checked before the server sees them). Calls go through an env, ``mcp-<hash>``: each trajectory
leases its own client session (:class:`McpSessionEnv`) from a pool, so a stateful server is isolated
per trajectory, sessions are reused (fresh ones after use, by default) and none leak.

Uses the ``mcp`` 2.x SDK (``mcp.Client``), imported only when an ``mcp:`` tool is used.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
import hashlib
import json
import logging
import os
import re
import shlex
import shutil
import sys
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from agentfly_cli import settings
from agentfly_cli.envs.base import BaseEnv, EnvSpec
from agentfly_cli.errors import UserError

log = logging.getLogger(__name__)

SPEC = re.compile(r"^mcp(?:\[(?P<prefix>[A-Za-z0-9_-]*)\])?:(?P<target>.*)$", re.DOTALL)
CONNECT_TIMEOUT = 60.0  # seconds to launch (or reach) a server and finish the handshake
CLOSE_TIMEOUT = 10.0
_INVALID_NAME_CHARS = re.compile(r"[^A-Za-z0-9_-]")
_SDK_ERROR_PREFIX = re.compile(r"^Error executing tool \S+: ")  # the Python SDK's wording


class McpServerError(UserError):
    """An MCP server that cannot be launched, reached, or listed."""


class McpSessionError(RuntimeError):
    """A trajectory's session could not be opened, although the server listed its tools."""


def is_mcp_spec(spec: str) -> bool:
    """Whether a tools entry names an MCP server (``mcp:...`` or ``mcp[prefix]:...``)."""
    return SPEC.match(spec.strip()) is not None


@dataclass(frozen=True)
class McpTarget:
    """A parsed ``mcp:`` tools entry."""

    spec: str  # as written
    command: tuple[str, ...] = ()  # a stdio server's argv
    url: str | None = None  # or a streamable HTTP endpoint
    prefix: str = ""
    select: str | None = None  # keep only this tool

    @property
    def key(self) -> str:
        """The server, normalised (what McpSessionEnv takes)."""
        return self.url or shlex.join(self.command)

    @property
    def env_name(self) -> str:
        digest = hashlib.sha1(f"{self.key}\0{os.getcwd()}".encode()).hexdigest()[:8]
        return f"mcp-{self.prefix}-{digest}" if self.prefix else f"mcp-{digest}"

    @property
    def display(self) -> str:
        return self.url or self.key


def parse_target(spec: str) -> McpTarget:
    """Read ``mcp[prefix]:<command or URL>[#tool]``; a bad entry is a one-line UserError."""
    match = SPEC.match(spec.strip())
    if match is None:
        raise UserError(f"{spec!r} is not an MCP server; write mcp:<command> or mcp:<url>")
    target, prefix = match["target"].strip(), match["prefix"] or ""
    select = None
    head, hash_sign, tail = target.rpartition("#")
    if hash_sign and re.fullmatch(r"[A-Za-z0-9_./-]+", tail):  # a tool name, not a quoted '#'
        target, select = head.strip(), tail
    if not target:
        raise UserError(f"{spec!r}: name the server, e.g. 'mcp:python server.py' or 'mcp:URL'")
    if re.match(r"^https?://", target, re.IGNORECASE):
        if re.search(r"\s", target):
            raise UserError(f"{spec!r}: a server URL cannot contain spaces")
        return McpTarget(spec, url=target, prefix=prefix, select=select)
    try:
        command = tuple(shlex.split(target))
    except ValueError as exc:
        raise UserError(f"{spec!r}: cannot split the command line ({exc})") from None
    return McpTarget(spec, command=command, prefix=prefix, select=select)


def _server_target(server: str) -> McpTarget:
    """The target of a normalised server (``McpTarget.key``): no prefix, no tool selection."""
    if re.match(r"^https?://", server, re.IGNORECASE):
        return McpTarget(f"mcp:{server}", url=server)
    return McpTarget(f"mcp:{server}", command=tuple(shlex.split(server)))


def _require_mcp() -> Any:
    try:
        import mcp
    except ImportError:
        raise UserError(
            "mcp: tools need the MCP SDK (mcp>=2); run: pip install 'agentfly-cli[tasks]'"
        ) from None
    return mcp


def _check_command(target: McpTarget) -> None:
    program = target.command[0]
    if shutil.which(program) is None:
        where = "no such file" if os.sep in program else "not found on PATH"
        raise McpServerError(
            f"cannot start MCP server '{target.display}': command '{program}' {where}; "
            "check the spelling, or install it"
        )


# -- one client session, owned by one task -----------------------------------------------------
class McpSession:
    """An MCP client session that lives in a task of its own.

    ``mcp.Client`` holds anyio task groups, which must be left by the task that entered them;
    the owner task enters it, waits for :meth:`close`, and leaves it. Calls may come from any
    task of the same event loop.
    """

    def __init__(self, target: McpTarget) -> None:
        self.target = target
        self.client: Any = None
        self._task: asyncio.Task | None = None
        self._stop: asyncio.Event | None = None
        self._errlog: Any = None

    @property
    def alive(self) -> bool:
        return self.client is not None and self._task is not None and not self._task.done()

    async def open(self, timeout: float = CONNECT_TIMEOUT) -> McpSession:
        """Launch or reach the server and finish the handshake, within ``timeout`` seconds."""
        mcp = _require_mcp()
        if self.target.url is None:
            _check_command(self.target)
            server: Any = mcp.StdioServerParameters(
                command=self.target.command[0],
                args=list(self.target.command[1:]),
                env=dict(os.environ),
                cwd=os.getcwd(),
            )
            debug = settings.debug_enabled()
            self._errlog = sys.stderr if debug else tempfile.TemporaryFile("w+", errors="replace")
        else:
            server = self.target.url
        ready: asyncio.Future = asyncio.get_running_loop().create_future()
        ready.add_done_callback(lambda f: f.cancelled() or f.exception())  # always retrieved
        self._stop = asyncio.Event()
        self._task = asyncio.create_task(self._own(mcp, server, ready), name="mcp-session")
        try:
            await asyncio.wait_for(asyncio.shield(ready), timeout)
        except asyncio.TimeoutError:
            tail = self._stderr_tail()
            await asyncio.shield(self.close())
            raise McpServerError(
                f"MCP server '{self.target.display}' did not answer within {timeout:g} s{tail}"
            ) from None
        except BaseException:
            await asyncio.shield(self.close())
            raise
        return self

    async def _own(self, mcp: Any, server: Any, ready: asyncio.Future) -> None:
        try:
            if self.target.url is None:  # stdio, with the server's stderr kept out of our terminal
                from mcp.client.stdio import stdio_client

                client = mcp.Client(stdio_client(server, errlog=self._errlog))
            else:
                client = mcp.Client(server)
            async with client:
                self.client = client
                ready.set_result(None)
                await self._stop.wait()
        except asyncio.CancelledError:
            if not ready.done():
                ready.cancel()
            raise
        except BaseException as exc:  # noqa: BLE001 - handed to the opener, or logged
            if not ready.done():
                ready.set_exception(self._explain(exc))
            else:
                log.debug("MCP session to %s ended: %r", self.target.display, exc)
        finally:
            self.client = None

    async def close(self, timeout: float = CLOSE_TIMEOUT) -> None:
        """End the session (a stdio server is stopped: stdin closed, then killed). Idempotent."""
        task, self._task = self._task, None
        if task is not None:
            if self._stop is not None:
                self._stop.set()
            if self.client is None:  # still connecting: stop that (the stdio teardown still runs)
                task.cancel()
            done, _ = await asyncio.wait({task}, timeout=timeout)  # never raises the task's error
            if not done:
                task.cancel()
                await asyncio.wait({task}, timeout=timeout)
        errlog, self._errlog = self._errlog, None
        if errlog is not None and errlog is not sys.stderr:
            errlog.close()

    async def list_tools(self) -> list[Any]:
        tools, cursor = [], None
        for _ in range(100):  # a server whose cursor never ends cannot hang us
            page = await self.client.list_tools(cursor=cursor)
            tools.extend(page.tools)
            cursor = page.next_cursor
            if not cursor:
                break
        return tools

    async def call(self, name: str, arguments: Mapping[str, Any]) -> dict[str, Any]:
        """Call a tool; ``{"text": observation, "is_error": bool}``."""
        if not self.alive:
            raise RuntimeError(f"the session to MCP server '{self.target.display}' is closed")
        result = await self.client.call_tool(name, dict(arguments))
        return {"text": render_result(result), "is_error": bool(result.is_error)}

    def _explain(self, exc: BaseException) -> BaseException:
        """A one-line error for a failed launch or handshake."""
        leaf = _leaf(exc)
        if isinstance(leaf, UserError):
            return leaf
        where = self.target.display
        if isinstance(leaf, FileNotFoundError):
            return McpServerError(f"cannot start MCP server '{where}': {leaf.strerror or leaf}")
        if isinstance(leaf, OSError) and self.target.url is None:
            return McpServerError(f"cannot start MCP server '{where}': {leaf}")
        detail = f"{type(leaf).__name__}: {leaf}"
        if self.target.url is not None:
            return McpServerError(
                f"cannot reach MCP server at {where} ({detail}); is it running, and is the URL "
                "its MCP endpoint (often ending in /mcp)?"
            )
        if "closed" in str(leaf).lower():
            return McpServerError(
                f"MCP server '{where}' exited before it answered{self._stderr_tail()}"
            )
        return McpServerError(
            f"MCP server '{where}' failed to start ({detail}){self._stderr_tail()}"
        )

    def _stderr_tail(self) -> str:
        errlog = self._errlog
        if errlog is None or errlog is sys.stderr:
            return ""
        try:
            errlog.flush()
            errlog.seek(0)
            lines = [line.strip() for line in errlog.read()[-4000:].splitlines() if line.strip()]
        except (OSError, ValueError):
            return ""
        return f"; its stderr ends: {lines[-1][:300]}" if lines else ""


def _leaf(exc: BaseException) -> BaseException:
    """The first real error inside (nested) exception groups."""
    while isinstance(getattr(exc, "exceptions", None), (list, tuple)) and exc.exceptions:
        group = list(exc.exceptions)  # an ExceptionGroup (the backport's too, on Python 3.10)
        exc = ([e for e in group if not isinstance(e, asyncio.CancelledError)] or group)[0]
    return exc


def render_result(result: Any) -> str:
    """A tool result's content as observation text (text blocks as they are)."""
    parts = []
    for block in result.content or []:
        kind = getattr(block, "type", "")
        if kind == "text":
            parts.append(block.text)
        elif kind in ("image", "audio"):
            parts.append(f"[{kind}: {block.mime_type}]")
        elif kind == "resource_link":
            parts.append(f"[resource: {block.uri}]")
        elif kind == "resource":
            resource = block.resource
            text = getattr(resource, "text", None)
            parts.append(text if text is not None else f"[resource: {resource.uri}]")
        else:
            parts.append(f"[{kind or type(block).__name__}]")
    if not parts and result.structured_content is not None:
        parts.append(json.dumps(result.structured_content, ensure_ascii=False))
    return "\n".join(parts)


# -- the env: one session per trajectory -------------------------------------------------------
class McpSessionEnv(BaseEnv):
    """A trajectory's MCP session. Action: ``{"tool": name, "arguments": {...}}``.

    ``fresh_session`` (default True): a session that was used is closed when its trajectory
    ends, and the next trajectory gets a new one (a stdio server is relaunched), so no state
    crosses trajectories. Set it False for stateless servers, to reuse sessions.
    """

    def __init__(
        self,
        server: str,
        fresh_session: bool = True,
        connect_timeout: float = CONNECT_TIMEOUT,
    ) -> None:
        self.target = _server_target(server)
        self.fresh_session = fresh_session
        self.connect_timeout = connect_timeout
        self._session: McpSession | None = None
        self._used = False
        self._closed = False
        self._lock: asyncio.Lock | None = None

    async def _ensure(self) -> McpSession:
        if self._lock is None:
            self._lock = asyncio.Lock()
        async with self._lock:
            if self._closed:
                raise RuntimeError("this MCP session env is closed")
            if self._session is not None and not self._session.alive:  # the server went away
                await self._drop()
            if self._session is None:
                session = McpSession(self.target)
                try:
                    await session.open(self.connect_timeout)
                except McpServerError as exc:
                    # the server answered when its tools were listed: a failure now is this
                    # call's (an error observation), not a configuration error that ends the run
                    raise McpSessionError(str(exc)) from exc
                self._session, self._used = session, False
            return self._session

    async def _drop(self) -> None:
        session, self._session = self._session, None
        if session is not None:
            await session.close()

    async def start(self) -> None:
        await self._ensure()

    async def reset(self, task: Mapping[str, Any] | None = None) -> None:
        if self._used and self.fresh_session:  # the next session starts when first needed
            await self._drop()

    async def step(self, action: Mapping[str, Any]) -> dict[str, Any]:
        if not isinstance(action, Mapping) or not isinstance(action.get("tool"), str):
            raise ValueError('an MCP action is {"tool": NAME, "arguments": {...}}')
        session = await self._ensure()
        self._used = True
        return await session.call(action["tool"], action.get("arguments") or {})

    async def healthy(self) -> bool:
        return not self._closed and (self._session is None or self._session.alive)

    async def close(self) -> None:
        self._closed = True
        await self._drop()


def session_env_spec(target: McpTarget) -> EnvSpec:
    """The env spec of a server's sessions (what its tools declare as ``env``)."""
    return EnvSpec(
        name=target.env_name,
        factory=functools.partial(McpSessionEnv, target.key),
        description=f"MCP client sessions to {target.display}",
        pool_max=64,
        warm_size=0,
        start_timeout=CONNECT_TIMEOUT,
        resources={"cpu": 0.1 if target.url else 0.5, "memory_mb": 5 if target.url else 80},
    )


# -- listing and building tools -----------------------------------------------------------------
_LISTINGS: dict[tuple[str, str], list[Any]] = {}


def list_server_tools(target: McpTarget, timeout: float = CONNECT_TIMEOUT) -> list[Any]:
    """The server's tools (``mcp.types.Tool``), from one short-lived session; cached."""
    cache_key = (target.key, os.getcwd())
    if cache_key not in _LISTINGS:

        async def listing() -> list[Any]:
            session = await McpSession(target).open(timeout)
            try:
                return await session.list_tools()
            finally:
                await session.close()

        _LISTINGS[cache_key] = _run_blocking(listing)
    return list(_LISTINGS[cache_key])


def _run_blocking(make_coroutine: Any) -> Any:
    """Run a coroutine to completion, also when this thread already runs an event loop."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(make_coroutine())
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        return pool.submit(lambda: asyncio.run(make_coroutine())).result()


def tool_name(prefix: str, name: str) -> str:
    """A valid agentfly tool name (``[A-Za-z0-9_-]{1,64}``) for an MCP tool's name."""
    clean = _INVALID_NAME_CHARS.sub("_", name) or "tool"
    return (f"{prefix}_{clean}" if prefix else clean)[:64]


def mcp_tools(spec: str) -> list[Any]:
    """The tools of the MCP server named by an ``mcp:`` tools entry."""
    from agentfly_cli.components.schema import JsonSchemaArguments
    from agentfly_cli.components.tools import Tool, ToolDefinitionError

    target = parse_target(spec)
    listed = list_server_tools(target)
    env_spec = session_env_spec(target)
    tools: dict[str, Any] = {}
    for info in listed:
        name = tool_name(target.prefix, info.name)
        if name in tools:
            raise McpServerError(
                f"MCP server '{target.display}': tools '{tools[name].remote_name}' and "
                f"'{info.name}' both become '{name}'; the server's names clash"
            )
        description = info.description or getattr(info, "title", None) or info.name
        try:
            arguments = JsonSchemaArguments(info.input_schema, label=name, description=description)
            made = Tool(
                _caller(name, info.name),
                name=name,
                description=description,
                env=env_spec.name,
                arguments=arguments,
                env_spec=env_spec,
            )
        except ToolDefinitionError as exc:
            raise McpServerError(f"MCP server '{target.display}': {exc}") from None
        made.remote_name = info.name
        tools[name] = made
    if target.select is not None:
        chosen = [t for t in tools.values() if target.select in (t.name, t.remote_name)]
        if not chosen:
            known = ", ".join(t.remote_name for t in tools.values()) or "none"
            raise UserError(
                f"MCP server '{target.display}' has no tool '{target.select}'; its tools: {known}"
            )
        return chosen
    if not tools:
        raise McpServerError(f"MCP server '{target.display}' offers no tools")
    return list(tools.values())


def _caller(name: str, remote_name: str) -> Any:
    from agentfly_cli.components.tools import ToolErrorKind, ToolResult

    async def call(env: Any, **arguments: Any) -> Any:
        reply = await env.step({"tool": remote_name, "arguments": arguments})
        if reply.get("is_error"):
            text = _SDK_ERROR_PREFIX.sub("", reply.get("text") or "") or "(no message)"
            return ToolResult.error(f"tool '{name}' failed: {text}", ToolErrorKind.EXCEPTION)
        return reply.get("text", "")

    call.__name__ = call.__qualname__ = name
    return call
