"""The child side of the subprocess provider: one env, served over a private socket.

Started as ``python -m agentfly_cli.envs.worker FD PARENT_PID``. It asks the kernel to kill it
when its parent dies, so an env process never outlives the run that started it.
"""

from __future__ import annotations

import asyncio
import ctypes
import os
import pickle
import signal
import socket
import sys
from typing import Any

from agentfly_cli.envs.base import Env
from agentfly_cli.envs.wire import describe_error, read_frame, write_frame

PR_SET_PDEATHSIG = 1


def _die_with_parent(parent_pid: int) -> None:
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except (OSError, AttributeError):
        pass  # not Linux: the parent's close and atexit hooks still kill us
    if os.getppid() != parent_pid:  # the parent died before prctl took effect
        os._exit(1)


async def _handle(env: Any, op: str, payload: Any) -> tuple[Any, Any]:
    """Run one request; returns (env, result)."""
    if op == "create":
        factory, options = pickle.loads(payload)
        created = factory(**options)
        if not isinstance(created, Env):
            raise TypeError(
                f"the env factory returned {type(created).__name__}, which lacks the Env methods"
            )
        return created, None
    if env is None:
        raise RuntimeError("no env: 'create' must come first")
    if op == "ping":
        return env, os.getpid()
    if op == "healthy":
        return env, bool(await env.healthy())
    if op == "start":
        return env, await env.start()
    if op == "reset":
        return env, await env.reset(payload)
    if op == "step":
        return env, await env.step(payload)
    if op == "close":
        return env, await env.close()
    raise ValueError(f"unknown request {op!r}")


async def serve(fd: int) -> None:
    sock = socket.socket(fileno=fd)
    reader, writer = await asyncio.open_unix_connection(sock=sock)
    env: Any = None
    try:
        while True:
            try:
                op, payload = await read_frame(reader, "pickle")
            except (EOFError, ConnectionError):
                return
            try:
                env, result = await _handle(env, op, payload)
                reply: tuple = ("ok", result)
                try:
                    await write_frame(writer, reply, "pickle")
                except (pickle.PicklingError, TypeError, AttributeError) as exc:
                    await write_frame(writer, ("error", describe_error(exc)), "pickle")
            except Exception as exc:
                await write_frame(writer, ("error", describe_error(exc)), "pickle")
            if op == "close":
                env = None
                return
    finally:
        if env is not None:
            try:
                await asyncio.wait_for(env.close(), 5)
            except BaseException:
                pass
        writer.close()


def main(argv: list[str]) -> None:
    fd, parent_pid = int(argv[0]), int(argv[1])
    _die_with_parent(parent_pid)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle
    asyncio.run(serve(fd))


if __name__ == "__main__":
    main(sys.argv[1:])
