"""The client side of a pool server: leases over a socket, one connection per lease.

A lease is a connection: ``acquire`` takes an env on the server (its reply: where the env lives,
and under ``opening`` what its ``reset(task)`` returned, a JSON value), ``step``/``reset`` drive
it, ``release`` returns it. If the client crashes, is cancelled or simply disconnects, the server
sees the connection close and kills the env, so a lease can never leak. Messages are JSON.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Mapping
from typing import Any
from urllib.parse import urlparse

from agentfly_cli.envs import pool as pool_errors
from agentfly_cli.envs.lease_limit import LeaseClock
from agentfly_cli.envs.pool import AcquireTimeout, PoolStats
from agentfly_cli.envs.providers.base import EnvHandle, EnvProxy
from agentfly_cli.envs.wire import FrameError, read_frame, rebuild_error, write_frame
from agentfly_cli.errors import UserError
from agentfly_cli.settings.envs import EnvPoolSettings, PoolLimits

PROTOCOL_VERSION = 1
#: the key of an ``acquire`` reply that carries the env's reset return (beside where it lives)
OPENING_KEY = "opening"
_POOL_ERRORS = {"AcquireTimeout", "EnvStartError", "PoolClosed", "EnvPoolError", "LeaseExpired"}


class ServerGone(ConnectionError):
    """The pool server closed the connection or cannot be reached."""


def resolve_address(address: str, token: str | None = None) -> tuple[str, str]:
    """``(url, token)`` for an address: a URL as is, or the name of a local pool server."""
    if "://" in address:
        return address, token or ""
    from agentfly_cli.envs.state import read_record

    record = read_record(address)
    if record is None:
        raise UserError(
            f"no pool server named '{address}' runs here; start one with `agentfly env up "
            f"{address}`, or give its address as unix:///PATH or tcp://HOST:PORT"
        )
    return record.address, token or record.token


async def open_stream(url: str) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    parsed = urlparse(url)
    if parsed.scheme == "unix":
        return await asyncio.open_unix_connection(parsed.path)
    if parsed.scheme == "tcp" and parsed.hostname and parsed.port:
        return await asyncio.open_connection(parsed.hostname, parsed.port)
    raise UserError(f"bad pool server address {url!r}; use unix:///PATH or tcp://HOST:PORT")


def _error_from_reply(error: Mapping[str, str]) -> Exception:
    type_name, message = error.get("type", "Error"), error.get("message", "")
    if type_name in _POOL_ERRORS:
        return getattr(pool_errors, type_name)(message)
    return rebuild_error(type_name, message)


class Connection:
    """One authenticated connection to a pool server; requests go one at a time."""

    def __init__(self, url: str, token: str) -> None:
        self.url = url
        self.token = token
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None
        self._lock = asyncio.Lock()
        self.broken: str | None = None

    async def open(self, timeout: float = 10.0) -> dict[str, Any]:
        try:
            self._reader, self._writer = await asyncio.wait_for(open_stream(self.url), timeout)
        except (OSError, asyncio.TimeoutError) as exc:
            raise ServerGone(f"cannot reach the pool server at {self.url}: {exc}") from None
        hello = {"op": "hello", "token": self.token, "version": PROTOCOL_VERSION}
        return await asyncio.wait_for(self.request(hello), timeout)

    async def request(self, message: Mapping[str, Any]) -> Any:
        async with self._lock:
            if self.broken or self._reader is None or self._writer is None:
                raise ServerGone(f"the connection to {self.url} is closed ({self.broken})")
            try:
                await write_frame(self._writer, dict(message))
                reply = await read_frame(self._reader)
            except asyncio.CancelledError:
                self.close("a request was interrupted")
                raise
            except (EOFError, ConnectionError, FrameError, OSError) as exc:
                self.close("the server closed it")
                raise ServerGone(f"the pool server at {self.url} closed the connection") from exc
        if not reply.get("ok"):
            raise _error_from_reply(reply.get("error") or {})
        return reply.get("result")

    def close(self, reason: str = "closed") -> None:
        self.broken = self.broken or reason
        if self._writer is not None:
            self._writer.close()


class RemoteEnvHandle(EnvHandle):
    """An env held on a pool server for as long as its connection stays open."""

    def __init__(self, connection: Connection, info: Mapping[str, Any]) -> None:
        self.connection = connection
        self.env = EnvProxy(self)
        self.info = {**info, "server": connection.url}

    async def start(self) -> None:
        return None

    async def reset(self, task: Mapping[str, Any] | None = None) -> Any:
        return await self.connection.request({"op": "reset", "task": task})

    async def step(self, action: Any) -> Any:
        return await self.connection.request({"op": "step", "action": action})

    async def healthy(self) -> bool:
        if self.connection.broken:
            return False
        try:
            return bool(await self.connection.request({"op": "healthy"}))
        except Exception:
            return False

    async def close(self) -> None:
        await self.kill()

    async def kill(self) -> None:
        self.connection.close()


class RemotePool:
    """The client's view of a pool server, with the same ``start/lease/stats/close`` as a pool."""

    def __init__(self, name: str, config: EnvPoolSettings) -> None:
        self.name = name
        self.config = config
        self.url = ""
        self._token = ""
        self._stats = PoolStats()
        self._acquire_timeout = config.acquire_timeout or PoolLimits().acquire_timeout
        self._open: set[Connection] = set()
        # a limit of the client's own (the server may have one too): past it, the connection
        # closes and the server kills the env
        self._leases = LeaseClock(name, config.lease_timeout, self._reclaim)

    async def start(self) -> int:
        """Find the server and check that it serves this env; fail early and clearly."""
        assert self.config.address is not None
        self.url, self._token = resolve_address(self.config.address, self.config.token)
        connection = Connection(self.url, self._token)
        try:
            hello = await connection.open()
        except (ServerGone, PermissionError, ValueError) as exc:
            raise UserError(
                f"envs.{self.name}.address: {exc}; is `agentfly env up {self.name}` running?"
            ) from None
        finally:
            connection.close()
        if hello.get("env") != self.name:
            raise UserError(
                f"envs.{self.name}.address: the server at {self.url} serves env "
                f"'{hello.get('env')}', not '{self.name}'"
            )
        return 0

    @contextlib.asynccontextmanager
    async def lease(
        self, task: Mapping[str, Any] | None = None, timeout: float | None = None
    ) -> AsyncIterator[EnvHandle]:
        timeout = self._acquire_timeout if timeout is None else timeout
        connection = Connection(self.url, self._token)
        self._open.add(connection)
        self._stats.waiting += 1
        try:
            await connection.open()
            request = {"op": "acquire", "task": dict(task) if task is not None else None}
            info = await asyncio.wait_for(
                connection.request({**request, "timeout": timeout}), timeout + 30
            )
        except BaseException as exc:
            connection.close()
            self._open.discard(connection)
            if isinstance(exc, AcquireTimeout):
                self._stats.timeouts += 1
            elif not isinstance(exc, asyncio.CancelledError):
                self._stats.failed += 1
            raise
        finally:
            self._stats.waiting -= 1
        info = dict(info or {})
        opening = info.pop(OPENING_KEY, None)  # what the env's reset said (a server of 0.x: none)
        remote = RemoteEnvHandle(connection, info)
        remote.opening = opening
        handle = self._leases.grant(remote)
        self._stats.acquired += 1
        self._stats.in_use += 1
        try:
            yield handle
        except BaseException:
            if self._leases.take_back(handle)[1]:
                self._stats.expired += 1
            else:
                self._stats.killed += 1
            raise
        else:
            if self._leases.take_back(handle)[1]:
                self._stats.expired += 1
            else:
                try:
                    await connection.request({"op": "release"})
                    self._stats.released += 1
                except Exception:
                    self._stats.restarts += 1
        finally:
            self._stats.in_use -= 1
            connection.close()  # the server kills an env whose lease closes unreleased
            self._open.discard(connection)

    def stats(self) -> PoolStats:
        return PoolStats(**self._stats.as_dict())

    @staticmethod
    def _reclaim(handle: EnvHandle) -> None:
        assert isinstance(handle, RemoteEnvHandle)
        handle.connection.close("the lease expired")  # the server kills the env

    async def close(self) -> None:
        self._leases.stop()
        for connection in list(self._open):
            connection.close("the client shut down")
        self._open.clear()


async def server_request(
    address: str, message: Mapping[str, Any], token: str | None = None, timeout: float = 5.0
) -> Any:
    """One request on a fresh connection (``stats``, ``shutdown``), for ``agentfly env``."""
    url, token = resolve_address(address, token)
    connection = Connection(url, token)
    try:
        await connection.open(timeout)
        return await asyncio.wait_for(connection.request(message), timeout)
    finally:
        connection.close()
