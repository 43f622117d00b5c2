"""OpenEnv's wire protocol, spoken with httpx and websockets (no openenv-core in this process).

An OpenEnv server (``openenv.core.env_server.create_app``) answers ``POST /reset`` and
``POST /step`` with ``{"observation": {...}, "reward": float | None, "done": bool}``, and keeps
one environment per WebSocket on ``/ws`` (messages ``{"type": "reset" | "step" | "close",
"data": {...}}``, answered by ``{"type": "observation" | "error", "data": {...}}``). Its HTTP
routes are stateless: each request gets a fresh environment, so an episode of more than one step
needs ``ws``. Every call has a timeout: a dead or stuck server is an :class:`OpenEnvError`.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx
import websockets

TRANSPORTS = ("ws", "http")
TIMEOUT = 30.0  # seconds, for each request


class OpenEnvError(RuntimeError):
    """The server could not be reached, timed out, or answered with an error."""


def _result(body: Any, url: str) -> dict[str, Any]:
    if not isinstance(body, dict) or "observation" not in body:
        raise OpenEnvError(f"OpenEnv server {url} answered {str(body)[:200]!r}, not a step result")
    return body


def schema(url: str, timeout: float = 10.0) -> dict[str, Any]:
    """The server's ``GET /schema`` (its action and observation JSON schemas)."""
    try:
        response = httpx.get(f"{url}/schema", timeout=timeout)
        response.raise_for_status()
        return response.json()
    except (httpx.HTTPError, ValueError) as error:
        raise OpenEnvError(f"no OpenEnv server answers at {url}/schema: {error}") from error


class HttpSession:
    """``POST /reset`` and ``POST /step`` (stateless: a fresh server env per request)."""

    def __init__(self, url: str, timeout: float = TIMEOUT) -> None:
        self.url, self.timeout = url, timeout
        self._client = httpx.AsyncClient(base_url=url, timeout=timeout)

    async def _post(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        try:
            response = await self._client.post(path, json=body)
        except httpx.TimeoutException as error:
            raise OpenEnvError(
                f"OpenEnv server {self.url}{path} did not answer within {self.timeout:g} s"
            ) from error
        except httpx.HTTPError as error:
            raise OpenEnvError(f"OpenEnv server {self.url}{path}: {error!r}") from error
        if response.status_code >= 400:
            raise OpenEnvError(
                f"OpenEnv server {self.url}{path} said {response.status_code}: "
                f"{response.text[:300]}"
            )
        return _result(response.json(), self.url)

    async def reset(self, options: dict[str, Any]) -> dict[str, Any]:
        return await self._post("/reset", options)

    async def step(self, action: dict[str, Any]) -> dict[str, Any]:
        return await self._post("/step", {"action": action})

    async def close(self) -> None:
        await self._client.aclose()


class WsSession:
    """One persistent server environment on ``/ws``: one of the server's sessions."""

    def __init__(self, url: str, timeout: float = TIMEOUT) -> None:
        self.url = url
        self.timeout = timeout
        self._socket: Any = None

    async def _send(self, kind: str, data: dict[str, Any]) -> dict[str, Any]:
        where = f"OpenEnv server {self.url}/ws"
        try:
            if self._socket is None:
                ws_url = "ws" + self.url[len("http") :] if self.url.startswith("http") else self.url
                self._socket = await websockets.connect(
                    f"{ws_url}/ws", open_timeout=self.timeout, close_timeout=2
                )
            await self._socket.send(json.dumps({"type": kind, "data": data}))
            raw = await asyncio.wait_for(self._socket.recv(), self.timeout)
        except websockets.ConnectionClosed as error:
            raw = await self._last_word()  # a full server says why, then closes: our send
            await self.close()  # may find it closed before that reply is read
            if raw is None:
                raise OpenEnvError(
                    f"{where} closed the session ({error}): is it at its max concurrent "
                    "sessions? set --set openenv.sessions to the server's max_concurrent_envs"
                ) from error
        except TimeoutError as error:
            await self.close()
            raise OpenEnvError(f"{where} did not answer within {self.timeout:g} s") from error
        except (OSError, websockets.WebSocketException) as error:
            await self.close()
            raise OpenEnvError(f"{where}: {error!r}") from error
        message = json.loads(raw)
        if message.get("type") == "error":
            detail = message.get("data") or {}
            code = detail.get("code", "error")
            if code == "CAPACITY_REACHED":
                await self.close()
            raise OpenEnvError(f"{where} said {code}: {detail.get('message', '')}")
        return _result(message.get("data"), self.url)

    async def _last_word(self) -> str | None:
        """A message the server sent before it closed, still unread; None when there is none."""
        if self._socket is None:
            return None
        try:
            raw = await asyncio.wait_for(self._socket.recv(), 0.5)
        except (TimeoutError, OSError, websockets.WebSocketException):
            return None
        return raw if isinstance(raw, str) else None

    async def reset(self, options: dict[str, Any]) -> dict[str, Any]:
        return await self._send("reset", options)

    async def step(self, action: dict[str, Any]) -> dict[str, Any]:
        return await self._send("step", action)

    async def close(self) -> None:
        socket, self._socket = self._socket, None
        if socket is not None:
            try:
                await socket.send(json.dumps({"type": "close", "data": {}}))
                await socket.close()
            except (OSError, websockets.WebSocketException):
                pass


def session(url: str, transport: str, timeout: float = TIMEOUT) -> HttpSession | WsSession:
    """A client session of ``transport`` (``ws`` or ``http``) to the server at ``url``."""
    return WsSession(url, timeout) if transport == "ws" else HttpSession(url, timeout)
