"""The subprocess provider: each env lives in its own Python process.

A crash, a hang or a leak inside the env kills only that process. The env's factory travels by
pickle (by reference, so it must be importable: a module-level class or function), and requests
and replies go over a private socket pair. A request that is cancelled or times out leaves the
channel in an unknown state, so the process is killed and the env reported unhealthy; the pool
then replaces it.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import os
import pickle
import signal
import socket
import sys
import weakref
from collections.abc import Mapping
from typing import Any

from agentfly_cli.envs.base import EnvSpec
from agentfly_cli.envs.providers.base import EnvHandle, EnvProvider, EnvProxy
from agentfly_cli.envs.wire import FrameError, read_frame, rebuild_error, write_frame

_LIVE: weakref.WeakSet[ProcessEnvHandle] = weakref.WeakSet()


class EnvProcessDied(RuntimeError):
    """The env's process is gone (crashed, killed, or killed by us after a hang)."""


class ProcessEnvHandle(EnvHandle):
    """One env in a child process."""

    def __init__(self, spec: EnvSpec, payload: bytes, health_timeout: float = 10.0) -> None:
        self.spec = spec
        self.env = EnvProxy(self)
        self.info: dict[str, Any] = {"provider": "process"}
        self._payload = payload
        self._health_timeout = health_timeout
        self._proc: asyncio.subprocess.Process | None = None
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None
        self._lock = asyncio.Lock()
        self._broken: str | None = None
        self._closed = False

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc else None

    async def start(self) -> None:
        parent_sock, child_sock = socket.socketpair()
        try:
            self._proc = await asyncio.create_subprocess_exec(
                sys.executable,
                "-m",
                "agentfly_cli.envs.worker",
                str(child_sock.fileno()),
                str(os.getpid()),
                pass_fds=[child_sock.fileno()],
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.DEVNULL,
                start_new_session=True,  # Ctrl-C reaches us; we close the env in order
                env=_child_environment(),
            )
        except BaseException:
            parent_sock.close()
            raise
        finally:
            child_sock.close()
        _LIVE.add(self)
        self.info["pid"] = self._proc.pid
        self._reader, self._writer = await asyncio.open_unix_connection(sock=parent_sock)
        await self._call("create", self._payload)
        await self._call("start")

    async def reset(self, task: Mapping[str, Any] | None = None) -> Any:
        return await self._call("reset", dict(task) if task is not None else None)

    async def step(self, action: Any) -> Any:
        return await self._call("step", action)

    async def healthy(self) -> bool:
        if self._broken or self._closed or self._proc is None or self._proc.returncode is not None:
            return False
        try:
            return bool(await asyncio.wait_for(self._call("healthy"), self._health_timeout))
        except (Exception, asyncio.TimeoutError):
            return False

    async def close(self) -> None:
        if self._closed:
            return
        try:
            if not self._broken and self._proc is not None and self._proc.returncode is None:
                with contextlib.suppress(Exception):
                    await self._call("close")
                with contextlib.suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(self._proc.wait(), 2.0)
        finally:
            await self.kill()

    async def kill(self) -> None:
        self._closed = True
        self._broken = self._broken or "closed"
        self._signal_kill()
        if self._writer is not None:
            self._writer.close()
        if self._proc is not None and self._proc.returncode is None:
            with contextlib.suppress(Exception, asyncio.TimeoutError):
                await asyncio.wait_for(self._proc.wait(), 5.0)
        _LIVE.discard(self)

    def _signal_kill(self) -> None:
        """SIGKILL the env's process group (the env's own children too); never raises."""
        if self._proc is not None and self._proc.returncode is None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self._proc.pid, signal.SIGKILL)

    async def _call(self, op: str, payload: Any = None) -> Any:
        async with self._lock:
            if self._broken:
                raise EnvProcessDied(f"env '{self.spec.name}' process is gone ({self._broken})")
            assert self._reader is not None and self._writer is not None
            try:
                await write_frame(self._writer, (op, payload), "pickle")
                status, value = await read_frame(self._reader, "pickle")
            except asyncio.CancelledError:
                self._broken = f"killed: a '{op}' request was interrupted"
                self._signal_kill()
                raise
            except (EOFError, ConnectionError, FrameError, OSError) as exc:
                self._broken = f"died during '{op}'"
                code = await self._exit_code()
                raise EnvProcessDied(
                    f"env '{self.spec.name}' process (pid {self.pid}) died during '{op}'"
                    + (f" with exit code {code}" if code is not None else f": {exc}")
                ) from None
        if status == "error":
            raise rebuild_error(value["type"], value["message"])
        return value

    async def _exit_code(self) -> int | None:
        if self._proc is None:
            return None
        with contextlib.suppress(asyncio.TimeoutError):
            return await asyncio.wait_for(self._proc.wait(), 1.0)
        return None


class ProcessProvider(EnvProvider):
    """Envs in child processes of this one."""

    name = "process"

    async def create(self, spec: EnvSpec, options: Mapping[str, Any]) -> EnvHandle:
        try:
            payload = pickle.dumps((spec.factory, dict(options)))
        except (pickle.PicklingError, TypeError, AttributeError) as exc:
            raise TypeError(
                f"env '{spec.name}' cannot run in a subprocess: its factory or options cannot be "
                f"pickled ({exc}); define the factory at module level or use provider: local"
            ) from None
        return ProcessEnvHandle(spec, payload)


def _child_environment() -> dict[str, str]:
    """This process's environment, with ``sys.path`` so the child imports what we import."""
    environment = dict(os.environ)
    paths = [p for p in sys.path if p]
    environment["PYTHONPATH"] = os.pathsep.join(paths)
    return environment


@atexit.register
def _kill_survivors() -> None:
    """At interpreter exit, no env process is left behind (the kernel's death signal is the
    backstop for a hard kill)."""
    for handle in list(_LIVE):
        handle._signal_kill()
