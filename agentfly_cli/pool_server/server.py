"""The pool server behind ``agentfly env up``: one warm env pool, served over a socket.

Rollouts and training connect to it by address (``envs.<name>.address``). A connection first
says hello (with the token, for TCP) in one small frame within ``HELLO_TIMEOUT`` seconds:
nothing larger is buffered before that. Each connection then holds at most one env; when the
connection closes without a ``release`` (a crashed or cancelled client, a hung step the client
gave up on), the env is killed. The server closes every env on ``shutdown``, SIGTERM and
Ctrl-C, and removes its record.

Run it with ``python -m agentfly_cli.pool_server.server NAME --config JSON`` (``agentfly env up``
does this in the background).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import hmac
import json
import logging
import os
import secrets
import signal
import sys
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from agentfly_cli.envs.base import EnvSpec
from agentfly_cli.envs.pool import EnvPool
from agentfly_cli.envs.process_identity import own_identity
from agentfly_cli.envs.providers import make_provider
from agentfly_cli.envs.remote import OPENING_KEY, PROTOCOL_VERSION
from agentfly_cli.envs.state import (
    ServerRecord,
    check_server_name,
    remove_record,
    state_dir,
    write_record,
)
from agentfly_cli.envs.timeouts import checked_seconds
from agentfly_cli.envs.wire import FrameError, describe_error, encode, read_frame, write_frame
from agentfly_cli.settings.envs import EnvPoolSettings

log = logging.getLogger("agentfly.env_server")
HELLO_TIMEOUT = 10.0
HELLO_MAX_BYTES = 4096  # the most an unauthenticated peer can make the server buffer


class PoolServer:
    """Serves one :class:`EnvPool` at ``address`` (``unix:///path`` or ``tcp://host:port``)."""

    def __init__(
        self, spec: EnvSpec, config: EnvPoolSettings, address: str, token: str = ""
    ) -> None:
        self.spec = spec
        self.config = config
        self.address = address
        self.token = token
        self.provider = make_provider(
            config.provider, **({"address": config.ray_address} if config.provider == "ray" else {})
        )
        self.pool = EnvPool(spec, self.provider, config.pool_limits(spec), config.options)
        self._stop = asyncio.Event()
        self._clients: set[asyncio.Task] = set()
        self._server: asyncio.base_events.Server | None = None
        self.record: ServerRecord | None = None

    def stop(self) -> None:
        self._stop.set()

    async def serve(self, record: ServerRecord | None = None) -> None:
        """Warm the pool, listen, mark the record ready, and serve until stopped."""
        self.record = record
        try:
            await self.pool.start()
            self._server = await self._listen()
            if record is not None:
                record.ready = True
                record.address = self.address
                write_record(record)
            log.info("serving env '%s' at %s", self.spec.name, self.address)
            await self._stop.wait()
        finally:
            await self._shutdown()

    async def _listen(self) -> asyncio.base_events.Server:
        parsed = urlparse(self.address)
        if parsed.scheme == "unix":
            path = Path(parsed.path)
            path.unlink(missing_ok=True)
            server = await asyncio.start_unix_server(self._client, path)
            path.chmod(0o600)
            return server
        if parsed.scheme == "tcp":
            if not self.token:
                raise ValueError("a tcp pool server needs a token")
            server = await asyncio.start_server(self._client, parsed.hostname, parsed.port or 0)
            port = server.sockets[0].getsockname()[1]
            self.address = f"tcp://{parsed.hostname}:{port}"
            return server
        raise ValueError(f"bad address {self.address!r}; use unix:///PATH or tcp://HOST:PORT")

    async def _shutdown(self) -> None:
        if self._server is not None:
            self._server.close()
        for task in list(self._clients):
            task.cancel()
        await asyncio.gather(*self._clients, return_exceptions=True)
        await self.pool.close()
        await self.provider.shutdown()
        parsed = urlparse(self.address)
        if parsed.scheme == "unix":
            Path(parsed.path).unlink(missing_ok=True)
        log.info("env '%s' server stopped: %s", self.spec.name, self.pool.stats().as_dict())

    # -- one client ------------------------------------------------------------------------
    async def _client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._clients.add(task)
        handle = None
        try:
            if not await self._hello(reader, writer):
                return
            while True:
                try:
                    message = await read_frame(reader)
                except (EOFError, ConnectionError, FrameError):
                    return
                op = message.get("op") if isinstance(message, dict) else None
                if op == "shutdown":
                    await self._reply(writer, True, None)
                    self.stop()
                    return
                request = asyncio.ensure_future(self._handle(op, message, handle))
                if not await self._until_done_or_hangup(request, reader):
                    request.cancel()
                    with contextlib.suppress(BaseException):
                        await request
                    if not request.cancelled() and request.exception() is None:
                        handle = request.result()[2]  # it finished as the client left
                    return  # the env it was using is killed below
                ok, result, handle = request.result()
                await self._reply(writer, ok, result)
        except Exception as exc:  # a client's trouble never takes the server down
            log.warning("client connection failed: %s: %s", type(exc).__name__, exc)
        finally:
            self._clients.discard(task)
            if handle is not None:
                with contextlib.suppress(ValueError):  # already closed by an interrupted release
                    await self.pool.release(handle, broken=True)
            writer.close()

    @staticmethod
    async def _until_done_or_hangup(request: asyncio.Future, reader: asyncio.StreamReader) -> bool:
        """Wait for ``request``; False when the client hung up (or broke the protocol) first.

        A client never sends while a request is outstanding, so any byte or EOF now means it
        gave up on the request.
        """
        hangup = asyncio.ensure_future(reader.read(1))
        try:
            await asyncio.wait({request, hangup}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            if not hangup.done():
                hangup.cancel()
            with contextlib.suppress(asyncio.CancelledError, ConnectionError):
                await hangup
        return hangup.cancelled()

    async def _hello(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bool:
        try:
            hello = await asyncio.wait_for(
                read_frame(reader, max_size=HELLO_MAX_BYTES), HELLO_TIMEOUT
            )
        except (asyncio.TimeoutError, EOFError, ConnectionError, FrameError):
            return False
        if not isinstance(hello, dict) or hello.get("op") != "hello":
            await self._reply(writer, False, _error("ProtocolError", "say hello first"))
            return False
        if self.token and not hmac.compare_digest(str(hello.get("token", "")), self.token):
            await self._reply(writer, False, _error("PermissionError", "wrong or missing token"))
            return False
        info = {"env": self.spec.name, "pid": os.getpid(), "version": PROTOCOL_VERSION}
        await self._reply(writer, True, info)
        return True

    async def _handle(self, op: Any, message: dict, handle: Any) -> tuple[bool, Any, Any]:
        """Run one request; returns (ok, result or error, the connection's env handle)."""
        try:
            if op == "stats":
                return True, self.describe(), handle
            if op == "acquire":
                if handle is not None:
                    return False, _error("ProtocolError", "this connection holds an env"), handle
                timeout = checked_seconds(message.get("timeout"))
                handle = await self.pool.acquire(message.get("task"), timeout)
                reply = dict(handle.info)
                if handle.opening is not None:  # what reset(task) said, for an opening env
                    reply[OPENING_KEY] = handle.opening
                return True, reply, handle
            if handle is None:
                return False, _error("ProtocolError", f"'{op}' needs an env: acquire first"), None
            if op == "step":
                return True, await handle.step(message.get("action")), handle
            if op == "reset":
                return True, await handle.reset(message.get("task")), handle
            if op == "healthy":
                return True, bool(await handle.healthy()), handle
            if op == "release":
                await self.pool.release(handle)
                return True, None, None
            return False, _error("ProtocolError", f"unknown request {op!r}"), handle
        except Exception as exc:
            return False, describe_error(exc), handle

    async def _reply(self, writer: asyncio.StreamWriter, ok: bool, result: Any) -> None:
        message = {"ok": True, "result": result} if ok else {"ok": False, "error": result}
        try:
            encode(message, "json")
        except (TypeError, ValueError, FrameError) as exc:
            message = {"ok": False, "error": describe_error(exc)}
        with contextlib.suppress(ConnectionError):
            await write_frame(writer, message)

    def describe(self) -> dict[str, Any]:
        return {
            "env": self.spec.name,
            "address": self.address,
            "stats": self.pool.stats().as_dict(),
            "settings": vars(self.pool.settings),
            **self.provider.describe(),
        }


def _error(type_name: str, message: str) -> dict[str, str]:
    return {"type": type_name, "message": message}


def default_address(name: str) -> str:
    return f"unix://{state_dir() / f'{name}.sock'}"


async def run_server(
    name: str,
    config: EnvPoolSettings,
    *,
    host: str | None = None,
    port: int = 0,
    plugin_host: Any = None,
) -> None:
    """Serve the env ``name`` (looked up in ``plugin_host``; default: the installed plugins)
    until SIGTERM, SIGINT or a ``shutdown`` request."""
    if plugin_host is None:
        from agentfly_cli.plugin_host.plugins import get_plugin_host

        plugin_host = get_plugin_host()
    check_server_name(name)
    spec = plugin_host.components.envs.get(name)
    token = secrets.token_hex(16) if host else ""
    address = f"tcp://{host}:{port}" if host else default_address(name)
    server = PoolServer(spec, config, address, token)
    settings = server.pool.settings
    record = ServerRecord(
        name=name,
        pid=os.getpid(),
        address=address,
        provider=config.provider,
        size=settings.warm_size,
        pool_max=settings.pool_max,
        token=token,
        log=str(state_dir() / f"{name}.log"),
    )
    identity = own_identity()  # so that `env down` never signals a process that reused our pid
    if identity is not None:
        record.start_time, record.cmdline = identity.start_time, identity.cmdline
    write_record(record)
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, server.stop)
    try:
        await server.serve(record)
    except BaseException as exc:
        record.error = f"{type(exc).__name__}: {exc}"
        write_record(record)
        raise
    remove_record(name, pid=os.getpid())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m agentfly_cli.pool_server.server")
    parser.add_argument("name")
    parser.add_argument("--config", default="{}", help="EnvPoolSettings as JSON")
    parser.add_argument("--host", default=None)
    parser.add_argument("--port", type=int, default=0)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    config = EnvPoolSettings.model_validate(json.loads(args.config))
    try:
        asyncio.run(run_server(args.name, config, host=args.host, port=args.port))
    except Exception as exc:
        log.error("the env server failed: %s: %s", type(exc).__name__, exc)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
