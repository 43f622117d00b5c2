"""``python``: a persistent, sandboxed Python interpreter per trajectory, and its tool.

Each env runs ``python_repl.py`` under Debian's ``/usr/bin/python3``, inside bubblewrap when it
is installed (no network, read-only ``/usr``, private ``/tmp``, own pid namespace), as an
unprivileged uid when we are root, with rlimits on memory, processes, file size and CPU. The
host adds a wall-clock limit per cell, a hard CPU backstop and an output cap. Without bubblewrap
it falls back to a plain subprocess with the same limits and warns once. See
``docs/python-sandbox.md``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import secrets
import shutil
import signal
import subprocess
import tempfile
import warnings
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agentfly_cli.envs.base import BaseEnv, EnvSpec
from agentfly_cli.errors import UserError
from agentfly_cli.tools import tool

REPL_SOURCE = Path(__file__).with_name("python_repl.py")
STUB = "import sys;exec(compile(sys.argv.pop(1),'<agentfly-repl>','exec'))"
SANDBOX_MODES = ("auto", "bwrap", "none")
NOBODY = 65534  # uid/gid the sandbox runs as when we are root (RLIMIT_NPROC spares root)
PATH = "/usr/local/bin:/usr/bin:/bin"
TOOL_TIMEOUT = 120.0  # the tool's own timeout: above wall_seconds, so the env reports timeouts
POLL_S = 0.1  # how often the host checks a running cell's clocks
INTERRUPT_GRACE_S = 1.0  # after SIGINT, how long a cell may take to answer before a kill
CPU_GRACE_S = 2.0  # CPU seconds over the limit before the host kills a cell that ignores it
ANSWER_LIMIT = 1 << 22  # bytes of one protocol answer
START_TIMEOUT = 30.0  # seconds for an interpreter to report ready
MAX_OPEN_FILES = 256
POSITIVE = "cpu_seconds wall_seconds memory_mb max_processes max_output_chars disk_mb".split()
LOST = "so its state (variables, imports, files) is lost"


class SandboxUnavailableError(UserError):
    """``sandbox: bwrap`` was asked for, but bubblewrap is missing or cannot start."""


class SandboxWarning(RuntimeWarning):
    """Code runs without bubblewrap's isolation (only rlimits and a uid drop)."""


class _StartError(RuntimeError):
    """The interpreter exited or hung before it reported ready."""


_warned = False
_bwrap_failure: str | None = None  # why bubblewrap failed to start here ("auto" then skips it)


def _warn_once(message: str) -> None:
    global _warned
    if not _warned:
        _warned = True
        warnings.warn(message, SandboxWarning, stacklevel=4)


def bwrap_command(bwrap: str, disk_mb: int) -> list[str]:
    """The bubblewrap prefix: nothing from the host but a read-only /usr (and its links)."""
    command = [bwrap, "--unshare-all", "--die-with-parent", "--cap-drop", "ALL"]
    command += ["--ro-bind", "/usr", "/usr"]
    for name in ("bin", "sbin", "lib", "lib32", "lib64", "libx32"):
        path = Path("/", name)
        if path.is_symlink():
            command += ["--symlink", os.readlink(path), str(path)]
        elif path.is_dir():
            command += ["--ro-bind", str(path), str(path)]
    command += ["--proc", "/proc", "--dev", "/dev", "--size", str(disk_mb << 20)]
    command += ["--tmpfs", "/tmp", "--chdir", "/tmp", "--clearenv"]
    for name, value in (("PATH", PATH), ("HOME", "/tmp"), ("LANG", "C.UTF-8")):
        command += ["--setenv", name, value]
    return command


def bwrap_problem(bwrap: str | None = None) -> str | None:
    """Why bubblewrap cannot sandbox here, or None when it can (runs ``true`` in it once)."""
    path = bwrap or shutil.which("bwrap")
    if not path:
        return "bubblewrap is not installed (apt-get install bubblewrap)"
    try:
        command = [*bwrap_command(path, 1), "/usr/bin/true"]
        done = subprocess.run(_as_nobody(command), capture_output=True, timeout=30, **_drop_root())
    except (OSError, subprocess.SubprocessError) as exc:
        return f"{path}: {exc}"
    if done.returncode:
        return done.stderr.decode(errors="replace").strip() or f"exit status {done.returncode}"
    return None


def _drop_root() -> dict[str, Any]:
    """Subprocess arguments that start a child as nobody when we are root and ``setpriv`` is
    missing (uvloop, which Ray's async actors run on, does not take these arguments)."""
    if os.geteuid() != 0 or _setpriv():
        return {}
    return {"user": NOBODY, "group": NOBODY, "extra_groups": []}


def _as_nobody(command: list[str]) -> list[str]:
    """``command``, prefixed to run as nobody when we are root (util-linux ``setpriv``)."""
    setpriv = _setpriv() if os.geteuid() == 0 else None
    if not setpriv:
        return command
    return [setpriv, f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", "--", *command]


def _setpriv() -> str | None:
    return shutil.which("setpriv")


def _first_child(pid: int | None) -> int | None:
    with contextlib.suppress(OSError, ValueError, IndexError):
        return int(Path(f"/proc/{pid}/task/{pid}/children").read_text().split()[0])
    return None


def _cpu_seconds(pid: int | None) -> float | None:
    """User + system CPU seconds of one process, from /proc."""
    with contextlib.suppress(OSError, ValueError, IndexError):
        fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return None


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
class _Launch:
    """How to start one interpreter: the command line and, for the fallback, its folder."""

    command: list[str]
    env: dict[str, str]
    sandboxed: bool
    home: str | None = None  # the fallback's private working folder, removed on stop
    tag: bytes | None = None  # marks the fallback's processes (in their environment)


@dataclass
class _Outcome:
    answer: dict[str, Any] | None
    output: str
    failure: str | None = None  # "cpu" | "wall" | "exited": the interpreter was killed or died
    interrupted: bool = False


class _Interpreter:
    """One REPL process and its pipes: commands in, answers out, output drained and capped."""

    def __init__(self, proc, answers, transport, launch: _Launch, output_bytes: int):
        self.proc, self.answers, self.transport, self.launch = proc, answers, transport, launch
        self.repl_pid: int | None = None if launch.sandboxed else proc.pid
        self.init_pid: int | None = None  # bubblewrap's pid 1 in the sandbox
        self.broken = False
        self._output_bytes = output_bytes
        self._capture = _Capture(output_bytes)
        self._marker: bytes | None = None
        self._pending = b""
        self._pump = asyncio.create_task(self._drain())

    @classmethod
    async def spawn(cls, launch: _Launch, config: dict, timeout: float, output_bytes: int):
        answer_r, answer_w = os.pipe()
        argv = _as_nobody([*launch.command, "-I", "-c", STUB, REPL_SOURCE.read_text()])
        argv.append(json.dumps({**config, "answer_fd": answer_w}))
        answers = asyncio.StreamReader(limit=ANSWER_LIMIT)
        try:
            transport, _ = await asyncio.get_running_loop().connect_read_pipe(
                lambda: asyncio.StreamReaderProtocol(answers), open(answer_r, "rb", buffering=0)
            )
        except BaseException:
            os.close(answer_r)
            os.close(answer_w)
            raise
        try:
            proc = await asyncio.create_subprocess_exec(
                *argv,
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.STDOUT,
                pass_fds=(answer_w,),
                env=launch.env,
                cwd="/",
                start_new_session=True,
                **_drop_root(),
            )
        except BaseException as exc:
            transport.close()
            if isinstance(exc, OSError):  # e.g. not executable by the unprivileged uid
                raise _StartError(f"cannot run {argv[0]}: {exc}") from exc
            raise
        finally:
            os.close(answer_w)
        self = cls(proc, answers, transport, launch, output_bytes)
        try:
            ready = await asyncio.wait_for(self.read_answer(), timeout)
        except BaseException as exc:
            await self.stop()
            if not isinstance(exc, asyncio.TimeoutError):
                raise
            ready = None
        if not ready or not ready.get("ready"):
            await self.stop()
            raise _StartError(self._capture.text(2000).strip() or f"no answer in {timeout:g} s")
        if launch.sandboxed:
            self.init_pid = _first_child(proc.pid)
            self.repl_pid = _first_child(self.init_pid)
        return self

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

    async def read_answer(self) -> dict[str, Any] | None:
        try:
            line = await self.answers.readline()
            answer = json.loads(line) if line else None
        except (ValueError, asyncio.LimitOverrunError):
            answer = None
        self.broken = self.broken or not isinstance(answer, dict)
        return answer if isinstance(answer, dict) else None

    async def request(self, message: Mapping[str, Any], timeout: float) -> dict[str, Any] | None:
        if not self.alive or not await self.send(message):
            return None
        try:
            return await asyncio.wait_for(self.read_answer(), timeout)
        except asyncio.TimeoutError:
            self.broken = True
            return None

    async def run_cell(self, code: str, cpu: float, wall: float, max_chars: int) -> _Outcome:
        """Run one cell under the wall-clock limit (SIGINT, then kill) and the CPU backstop."""
        capture, marker = self._capture, f"\x1e{secrets.token_hex(8)}\x1e"
        self._marker = marker.encode()
        cpu_start = _cpu_seconds(self.repl_pid)
        loop = asyncio.get_running_loop()
        deadline, failure, interrupted_at = loop.time() + wall, None, None
        reading = asyncio.ensure_future(self.read_answer())
        try:
            if not await self.send({"op": "exec", "code": code, "marker": marker}):
                failure = "exited"
            while failure is None and not (await asyncio.wait({reading}, timeout=POLL_S))[0]:
                now, used = loop.time(), _cpu_seconds(self.repl_pid)
                if None not in (used, cpu_start) and used - cpu_start > cpu + CPU_GRACE_S:
                    failure = "cpu"
                elif interrupted_at is None and now >= deadline:
                    interrupted_at = now
                    failure = None if self._interrupt() else "wall"
                elif interrupted_at is not None and now - interrupted_at >= INTERRUPT_GRACE_S:
                    failure = "wall"
        finally:
            reading.cancel()
        answer = reading.result() if failure is None else None
        if answer is None:
            failure = failure or "exited"
            self.kill()
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(capture.done.wait(), 1.0)
        output = capture.text(max_chars, int(answer.get("dropped_chars", 0)) if answer else 0)
        return _Outcome(answer, output, failure, interrupted_at is not None)

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
            with contextlib.suppress(OSError):
                if self.init_pid is not None:
                    os.kill(self.init_pid, signal.SIGKILL)  # the pid namespace dies with pid 1
                else:
                    os.killpg(self.proc.pid, signal.SIGKILL)
        if self.launch.tag:
            _kill_tagged(self.launch.tag)

    async def stop(self) -> None:
        """Kill everything, reap it and release the pipes (safe to call twice)."""
        self.kill()
        try:
            await asyncio.wait_for(asyncio.shield(self.proc.wait()), 2.0)
        except asyncio.TimeoutError:
            with contextlib.suppress(OSError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            await self.proc.wait()
        if self.launch.tag:
            _kill_tagged(self.launch.tag)
        self.transport.close()
        with contextlib.suppress(asyncio.TimeoutError, asyncio.CancelledError):
            await asyncio.wait_for(self._pump, 1.0)
        if self.launch.home:
            shutil.rmtree(self.launch.home, ignore_errors=True)


class PythonSandboxEnv(BaseEnv):
    """A persistent Python interpreter. Actions: ``{"code": "..."}`` or the code as a string.

    Options (the factory's keyword arguments, e.g. from the ``envs:`` config) are described in
    ``docs/python-sandbox.md``; ``reset`` restarts the process past half of
    ``cpu_seconds_total``, or when it left processes or threads running.
    """

    def __init__(
        self,
        *,
        cpu_seconds: float = 10.0,
        wall_seconds: float = 30.0,
        memory_mb: int = 1024,
        max_processes: int = 32,
        max_output_chars: int = 5000,
        sandbox: str = "auto",
        python: str = "/usr/bin/python3",
        bwrap: str | None = None,
        disk_mb: int = 256,
        cpu_seconds_total: float = 600.0,
    ):
        if sandbox not in SANDBOX_MODES:
            raise UserError(f"python env: sandbox must be one of {', '.join(SANDBOX_MODES)}")
        self.cpu_seconds, self.wall_seconds = float(cpu_seconds), float(wall_seconds)
        self.memory_mb, self.max_processes = int(memory_mb), int(max_processes)
        self.max_output_chars, self.disk_mb = int(max_output_chars), int(disk_mb)
        self.cpu_seconds_total = float(cpu_seconds_total)
        self.sandbox, self.python, self.bwrap = sandbox, python, bwrap
        for name in POSITIVE:
            if not getattr(self, name) > 0:
                raise UserError(f"python env: {name} must be > 0, got {getattr(self, name)!r}")
        if self.cpu_seconds_total < self.cpu_seconds + 5:
            raise UserError("python env: cpu_seconds_total must be at least cpu_seconds + 5")
        self.mode: str | None = None  # "bwrap" or "none" once started
        self._interpreter: _Interpreter | None = None
        self._lock = asyncio.Lock()
        self._closed = False

    async def start(self) -> None:
        async with self._lock:
            if self._interpreter is None:
                await self._restart()

    async def reset(self, task: Mapping[str, Any] | None = None) -> None:
        """A fresh namespace and an empty working folder; a new process if this one is unclean."""
        async with self._lock:
            interpreter = self._interpreter
            stats = await interpreter.request({"op": "reset"}, 10.0) if interpreter else None
            clean = stats is not None and stats.get("processes") == 0 and stats.get("threads") == 1
            if not clean or stats.get("cpu", 0.0) > self.cpu_seconds_total / 2:
                await self._restart()

    async def step(self, action: Mapping[str, Any] | str) -> str:
        code = action if isinstance(action, str) else action.get("code")
        if not isinstance(code, str):
            raise ValueError('the python env takes {"code": "<python source>"}')
        async with self._lock:
            restarted = self._interpreter is not None and not self._interpreter.alive
            if self._interpreter is None or restarted:
                await self._restart()
            interpreter = self._interpreter
            try:
                outcome = await interpreter.run_cell(
                    code, self.cpu_seconds, self.wall_seconds, self.max_output_chars
                )
            except asyncio.CancelledError:
                interpreter.kill()  # a cell may still run: never hand this process out again
                raise
            if outcome.failure:
                await self._restart()
            text = self._observation(outcome)
            return (
                f"[the interpreter had stopped and was restarted, {LOST}]\n{text}"
                if restarted
                else text
            )

    async def healthy(self) -> bool:
        interpreter = self._interpreter
        if self._closed or interpreter is None or not interpreter.alive:
            return False
        if self._lock.locked():
            return True  # busy running a cell
        async with self._lock:
            return await interpreter.request({"op": "ping"}, 5.0) is not None

    async def close(self) -> None:
        self._closed = True
        interpreter, self._interpreter = self._interpreter, None
        if interpreter is not None:
            await asyncio.shield(interpreter.stop())

    async def _restart(self) -> None:
        if self._closed:
            raise RuntimeError("the python env is closed")
        old, self._interpreter = self._interpreter, None
        if old is not None:
            await old.stop()
        self._interpreter = await self._launch()
        if self._closed:  # closed while starting
            await self._interpreter.stop()
            raise RuntimeError("the python env is closed")

    async def _launch(self) -> _Interpreter:
        """Start in bubblewrap if asked or available, else (warning once) without it."""
        global _bwrap_failure
        bwrap = self.bwrap or shutil.which("bwrap")
        bwrap = bwrap if bwrap and os.access(bwrap, os.X_OK) else None
        if self.sandbox == "bwrap" and not bwrap:
            raise SandboxUnavailableError(
                f"python env: sandbox 'bwrap' needs bubblewrap, which was not found "
                f"({self.bwrap or 'bwrap on PATH'}); install it (apt-get install bubblewrap) "
                "or set sandbox: auto"
            )
        if self.sandbox == "bwrap" or (self.sandbox == "auto" and bwrap and not _bwrap_failure):
            try:
                interpreter = await self._spawn(bwrap)
                self.mode = "bwrap"
                return interpreter
            except _StartError as exc:
                if "Traceback" in str(exc):  # the interpreter failed, not bubblewrap
                    raise RuntimeError(
                        f"python env: the interpreter failed to start: {exc}"
                    ) from exc
                if self.sandbox == "bwrap":
                    raise SandboxUnavailableError(
                        f"python env: bubblewrap failed to start ({exc}); check that user "
                        "namespaces are allowed, or set sandbox: auto"
                    ) from exc
                _bwrap_failure = str(exc).splitlines()[-1]
        why = "sandbox is 'none'" if self.sandbox == "none" else "bubblewrap is not installed"
        if self.sandbox == "auto" and _bwrap_failure:
            why = f"bubblewrap failed to start ({_bwrap_failure})"
        _warn_once(
            f"python env: {why}, so code runs in a plain subprocess with rlimits only (no "
            "filesystem or network isolation); install bubblewrap: apt-get install bubblewrap"
        )
        self.mode = "none"
        try:
            return await self._spawn(None)
        except _StartError as exc:
            raise RuntimeError(f"python env: the interpreter failed to start: {exc}") from exc

    async def _spawn(self, bwrap: str | None) -> _Interpreter:
        if not os.access(self.python, os.X_OK):
            raise UserError(f"python env: the interpreter {self.python!r} is not executable")
        env = {"PATH": PATH, "LANG": "C.UTF-8"}
        if bwrap:
            launch = _Launch([*bwrap_command(bwrap, self.disk_mb), self.python], env, True)
            home = "/tmp"
        else:
            home = tempfile.mkdtemp(prefix="agentfly-python-")
            if os.geteuid() == 0:
                os.chown(home, NOBODY, NOBODY)
            token = secrets.token_hex(8)
            env.update(HOME=home, TMPDIR=home, AGENTFLY_SANDBOX=token)
            tag = f"AGENTFLY_SANDBOX={token}".encode()
            launch = _Launch([self.python], env, False, home, tag)
        config = {
            "cpu_seconds": self.cpu_seconds,
            "cpu_total": self.cpu_seconds_total,
            "memory_mb": self.memory_mb,
            "file_mb": self.disk_mb,
            "max_open_files": MAX_OPEN_FILES,
            "max_processes": self.max_processes,
            "max_value_chars": self.max_output_chars,
            "home": home,
        }
        try:
            return await _Interpreter.spawn(
                launch, config, START_TIMEOUT, 4 * self.max_output_chars + 64
            )
        except BaseException:
            if launch.home:
                shutil.rmtree(launch.home, ignore_errors=True)
            raise

    def _observation(self, outcome: _Outcome) -> str:
        """Printed output, the final expression's repr or the traceback, and any notes."""
        answer = outcome.answer or {}
        error = answer.get("error")
        if error and outcome.interrupted and answer.get("error_type") == "KeyboardInterrupt":
            error = error.rpartition("KeyboardInterrupt")[0] + (
                f"TimeoutError: the cell ran longer than {self.wall_seconds:g} s (wall clock) "
                "and was interrupted; the interpreter's state is kept"
            )
        notes = {
            "cpu": f"used more than {self.cpu_seconds:g} s of CPU time and did not stop",
            "wall": f"ran longer than {self.wall_seconds:g} s (wall clock) and did not stop "
            "when interrupted",
            "exited": "ended the interpreter (a crash, os._exit, or a memory or CPU limit)",
        }
        note = outcome.failure and (
            f"[the cell {notes[outcome.failure]}; the interpreter was restarted, {LOST}]"
        )
        parts = (outcome.output.rstrip("\n"), answer.get("value"), error, note)
        return "\n".join(part for part in parts if part) or "(no output)"


PYTHON = EnvSpec(
    name="python",
    factory=PythonSandboxEnv,
    description="A persistent Python interpreter per trajectory, sandboxed with bubblewrap",
    pool_max=64,
    warm_size=0,
    start_timeout=30.0,
    resources={"cpu": 1.0, "memory_mb": 1024.0},
)


@tool(env="python", timeout=TOOL_TIMEOUT)
async def python(env: PythonSandboxEnv, code: str) -> str:
    """Run Python code in your own persistent interpreter and see what it printed.

    Variables, imports and functions carry over between calls, like cells of a notebook. The
    result shows the printed output, the value of a final expression and, on errors, a short
    traceback. The sandbox has no network; CPU time, memory and output length are limited.

    Args:
        code: Python source to run, e.g. "import math\\nprint(math.sqrt(2))".
    """
    return await env.step({"code": code})
