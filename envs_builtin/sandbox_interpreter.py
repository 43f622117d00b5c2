"""One sandboxed REPL process, driven from the host: commands in on stdin, answers out on a
private pipe, cell output drained and capped, limits watched, strays killed after each cell.

Every command carries a fresh random id that its answer must echo. The id of a command is not
known before the command is sent, so nothing a cell (or a process it starts) writes on the
answer pipe can answer a later command; lines without the id are dropped.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import secrets
import shutil
import signal
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from envs_builtin.sandbox_cgroup import Cgroup, CgroupUnavailable, Limits
from envs_builtin.sandbox_launch import as_nobody, drop_root
from envs_builtin.sandbox_processes import SandboxProcesses, first_child

REPL_SOURCE = Path(__file__).with_name("python_repl.py")
STUB = "import sys;exec(compile(sys.argv.pop(1),'<agentfly-repl>','exec'))"
POLL_S = 0.1  # how often the host checks a running cell's clocks
INTERRUPT_GRACE_S = 1.0  # after SIGINT, how long a cell may take to answer before a kill
CPU_GRACE_S = 2.0  # CPU seconds over the limit before the host kills a cell that ignores it
ANSWER_LIMIT = 1 << 22  # bytes of one protocol answer
TEXT_FIELDS = ("value", "error", "error_type")


class StartError(RuntimeError):
    """The interpreter exited or hung before it reported ready."""


class _Capture:
    """One cell's output: kept up to a byte limit, the rest counted and dropped."""

    def __init__(self, limit: int):
        self.data = bytearray()
        self.dropped = 0
        self.limit = limit
        self.done = asyncio.Event()

    def add(self, chunk: bytes) -> None:
        room = max(self.limit - len(self.data), 0)
        self.data += chunk[:room]
        self.dropped += max(len(chunk) - room, 0)

    def text(self, max_chars: int, dropped_chars: int = 0) -> str:
        text = self.data.decode("utf-8", "replace")
        more = self.dropped + dropped_chars + max(len(text) - max_chars, 0)
        if more:
            text = f"{text[:max_chars]}\n[output truncated: {more} more characters]"
        return text


@dataclass
class Launch:
    """How to start one interpreter: the command line and, for the fallback, its folder."""

    command: list[str]
    env: dict[str, str]
    sandboxed: bool
    limits: Limits
    home: str | None = None  # the fallback's private working folder, removed on stop
    tag: bytes | None = None  # marks the fallback's processes (in their environment)


@dataclass
class Outcome:
    answer: dict[str, Any] | None
    output: str
    failure: str | None = None  # "cpu" | "wall" | "exited": the interpreter was killed or died
    interrupted: bool = False


def exec_answer(answer: dict[str, Any] | None) -> dict[str, Any] | None:
    """The answer to a cell if it has the expected shape, else None."""
    if answer is None:
        return None
    dropped = answer.get("dropped_chars", 0)
    texts = all(isinstance(answer.get(key), (str, type(None))) for key in TEXT_FIELDS)
    counted = type(dropped) is int and 0 <= dropped < 1 << 62
    return answer if texts and counted else None


class Interpreter:
    """One REPL process and its pipes: commands in, answers out, output drained and capped."""

    def __init__(self, proc, answers, transport, launch: Launch, output_bytes: int):
        self.proc, self.answers, self.transport, self.launch = proc, answers, transport, launch
        self.repl_pid: int | None = None if launch.sandboxed else proc.pid  # pid 1 in bwrap
        self.cgroup: Cgroup | None = None
        self.processes = SandboxProcesses(proc.pid, {proc.pid})
        self.broken = False
        self._output_bytes = output_bytes
        self._capture = _Capture(output_bytes)
        self._marker: bytes | None = None
        self._pending = b""
        self._pump = asyncio.create_task(self._drain())

    @classmethod
    async def spawn(cls, launch: Launch, config: dict, timeout: float, output_bytes: int):
        """Start the REPL, wait for its ready answer, then bound it with a cgroup if any."""
        answer_r, answer_w = os.pipe()
        ready_id = secrets.token_hex(16)
        argv = as_nobody([*launch.command, "-I", "-c", STUB, REPL_SOURCE.read_text()])
        argv.append(json.dumps({**config, "answer_fd": answer_w, "ready_id": ready_id}))
        answers = asyncio.StreamReader(limit=ANSWER_LIMIT)
        reader = open(answer_r, "rb", buffering=0)  # the one owner of answer_r from here on
        try:
            transport, _ = await asyncio.get_running_loop().connect_read_pipe(
                lambda: asyncio.StreamReaderProtocol(answers), reader
            )
        except BaseException:
            # Through the owner: the transport asyncio made (and closed on a cancel) closes
            # ``reader`` again a loop turn later, a no-op then. os.close(answer_r) here closed
            # the number twice: by then it could be another sandbox's pipe.
            reader.close()
            os.close(answer_w)
            raise
        creating = asyncio.ensure_future(
            asyncio.create_subprocess_exec(
                *argv,
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.STDOUT,
                pass_fds=(answer_w,),
                env=launch.env,
                cwd="/",
                start_new_session=True,
                **drop_root(),
            )
        )
        try:
            proc = await asyncio.shield(creating)
        except BaseException as exc:
            transport.close()
            if isinstance(exc, asyncio.CancelledError):
                await _end_group(creating)
            if isinstance(exc, OSError):  # e.g. not executable by the unprivileged uid
                raise StartError(f"cannot run {argv[0]}: {exc}") from exc
            raise
        finally:
            os.close(answer_w)
        self = cls(proc, answers, transport, launch, output_bytes)
        try:
            ready = await asyncio.wait_for(self.read_answer(ready_id), timeout)
            if ready and ready.get("ready"):
                self._bound()
        except BaseException as exc:
            await self.stop()
            if not isinstance(exc, asyncio.TimeoutError):
                raise
            ready = None
        if not ready or not ready.get("ready"):
            await self.stop()
            raise StartError(self._capture.text(2000).strip() or f"no answer in {timeout:g} s")
        return self

    def _bound(self) -> None:
        """Find the sandbox's processes and move them into a new cgroup (before any cell ran,
        so nothing can have slipped out)."""
        if self.launch.sandboxed:
            self.repl_pid = first_child(self.proc.pid)
        keep = {self.proc.pid, self.repl_pid}
        root = self.repl_pid or self.proc.pid
        with contextlib.suppress(CgroupUnavailable):
            self.cgroup = Cgroup.create(self.launch.limits)
            try:
                self.cgroup.attach(sorted(keep - {None}))
            except OSError:
                self.cgroup.remove()  # empty: nothing was attached
                self.cgroup = None
        self.processes = SandboxProcesses(root, keep - {None}, self.cgroup)

    @property
    def alive(self) -> bool:
        return not self.broken and self.proc.returncode is None

    async def _drain(self) -> None:
        """Read fd 1/2 of the sandbox all the time, so that a chatty cell never blocks."""
        while chunk := await self.proc.stdout.read(1 << 16):
            self._feed(chunk)
        self._capture.add(self._pending)
        self._capture.done.set()

    def _feed(self, chunk: bytes) -> None:
        data, marker = self._pending + chunk, self._marker
        found = data.find(marker) if marker else -1
        if found >= 0:  # the cell's output ends here; what follows goes to the next cell
            self._capture.add(data[:found])
            self._capture.done.set()
            self._capture, self._marker, self._pending = _Capture(self._output_bytes), None, b""
            self._feed(data[found + len(marker) :])
            return
        keep = len(marker) - 1 if marker else 0  # a marker may straddle two reads
        self._capture.add(data[: len(data) - keep])
        self._pending = data[len(data) - keep :]

    async def send(self, message: Mapping[str, Any]) -> bool:
        try:
            self.proc.stdin.write((json.dumps(message) + "\n").encode())
            await self.proc.stdin.drain()
            return True
        except (BrokenPipeError, ConnectionResetError, RuntimeError):
            self.broken = True
            return False

    async def read_answer(self, command_id: str) -> dict[str, Any] | None:
        """The answer that echoes ``command_id``; other lines (stale or forged) are dropped."""
        prefix = json.dumps({"id": command_id})[:-1].encode()
        while True:
            try:
                line = await self.answers.readline()
            except (ValueError, asyncio.LimitOverrunError):
                line = b""
            if not line:
                self.broken = True
                return None
            if not line.startswith(prefix):
                continue
            try:
                answer = json.loads(line)
            except ValueError:
                answer = None
            if isinstance(answer, dict) and answer.get("id") == command_id:
                return answer
            self.broken = True
            return None

    async def request(self, message: Mapping[str, Any], timeout: float) -> dict[str, Any] | None:
        command_id = secrets.token_hex(16)
        if not self.alive or not await self.send({"id": command_id, **message}):
            return None
        try:
            return await asyncio.wait_for(self.read_answer(command_id), timeout)
        except asyncio.TimeoutError:
            self.broken = True
            return None

    async def run_cell(self, code: str, cpu: float, wall: float, max_chars: int) -> Outcome:
        """Run one cell under the wall-clock limit (SIGINT, then kill) and the CPU backstop
        (the CPU time of the whole sandbox); then kill whatever the cell left running."""
        capture, marker = self._capture, f"\x1e{secrets.token_hex(8)}\x1e"
        self._marker = marker.encode()
        command_id = secrets.token_hex(16)
        cpu_start = self.processes.cpu_seconds()
        loop = asyncio.get_running_loop()
        deadline, failure, interrupted_at = loop.time() + wall, None, None
        reading = asyncio.ensure_future(self.read_answer(command_id))
        try:
            message = {"id": command_id, "op": "exec", "code": code, "marker": marker}
            if not await self.send(message):
                failure = "exited"
            while failure is None and not (await asyncio.wait({reading}, timeout=POLL_S))[0]:
                now, used = loop.time(), self.processes.cpu_seconds()
                if None not in (used, cpu_start) and used - cpu_start > cpu + CPU_GRACE_S:
                    failure = "cpu"
                elif interrupted_at is None and now >= deadline:
                    interrupted_at = now
                    failure = None if self._interrupt() else "wall"
                elif interrupted_at is not None and now - interrupted_at >= INTERRUPT_GRACE_S:
                    failure = "wall"
        finally:
            reading.cancel()
        answer = exec_answer(reading.result()) if failure is None else None
        if answer is None:
            failure = failure or "exited"
            self.kill()
        else:
            await self.processes.end_strays()  # nothing a cell started outlives it
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(capture.done.wait(), 1.0)
        output = capture.text(max_chars, answer["dropped_chars"] if answer else 0)
        return Outcome(answer, output, failure, interrupted_at is not None)

    async def _remove_cgroup(self, wait: float = 2.0) -> None:
        """Kill what is left in the cgroup and remove it once the kernel has emptied it."""
        for _ in range(int(wait / 0.01)):
            self.processes.kill_all()
            if self.cgroup.remove():
                break
            await asyncio.sleep(0.01)
        self.cgroup = None

    def _interrupt(self) -> bool:
        """SIGINT to the REPL itself (never to bubblewrap, which would die of it)."""
        if self.repl_pid is None or self.proc.returncode is not None:
            return False
        try:
            os.kill(self.repl_pid, signal.SIGINT)
            return True
        except OSError:
            return False

    def kill(self) -> None:
        """Kill the sandbox now (sync, so it also works while a task is being cancelled)."""
        self.broken = True
        if self.proc.returncode is None:  # once reaped, its pid may belong to someone else
            if self.cgroup is not None and not self.launch.sandboxed:
                self.processes.kill_all()  # in bubblewrap, the kill of pid 1 does it
            with contextlib.suppress(OSError):
                if self.launch.sandboxed and self.repl_pid is not None:
                    os.kill(self.repl_pid, signal.SIGKILL)  # the pid namespace dies with pid 1
                else:
                    os.killpg(self.proc.pid, signal.SIGKILL)
        if self.launch.tag and self.cgroup is None:  # a cgroup lists them all
            _kill_tagged(self.launch.tag)

    async def stop(self) -> None:
        """Kill everything, reap it and release the pipes and the cgroup (safe to call twice)."""
        self.kill()
        try:
            await asyncio.wait_for(asyncio.shield(self.proc.wait()), 2.0)
        except asyncio.TimeoutError:
            with contextlib.suppress(OSError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            await self.proc.wait()
        if self.cgroup is not None:
            await self._remove_cgroup()
        elif self.launch.tag:
            _kill_tagged(self.launch.tag)
        self.transport.close()
        with contextlib.suppress(asyncio.TimeoutError, asyncio.CancelledError):
            await asyncio.wait_for(self._pump, 1.0)
        if self.launch.home:
            shutil.rmtree(self.launch.home, ignore_errors=True)


async def _end_group(creating: asyncio.Future) -> None:
    """Cancelled while the process was being made: kill its whole process group once it is
    there. (Killing bubblewrap alone, as asyncio does, leaves its child waiting for a signal
    from it during setup, forever.)"""
    try:
        proc = await creating
    except BaseException:
        return
    with contextlib.suppress(OSError):
        os.killpg(proc.pid, signal.SIGKILL)
    await proc.wait()


def _kill_tagged(tag: bytes) -> None:
    """Kill every process whose environment holds ``tag`` (fallback mode's process tree)."""
    for _ in range(5):  # a few rounds: a process may fork while we kill its parent
        found = False
        for name in filter(str.isdigit, os.listdir("/proc")):
            with contextlib.suppress(OSError):
                if tag in Path(f"/proc/{name}/environ").read_bytes().split(b"\0"):
                    os.kill(int(name), signal.SIGKILL)
                    found = True
        if not found:
            return
