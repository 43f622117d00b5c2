"""``python``: a persistent, sandboxed Python interpreter per trajectory, and its tool.

Each env runs ``python_repl.py`` under Debian's ``/usr/bin/python3``, inside bubblewrap when it
is installed (no network, read-only ``/``, one small tmpfs for files, own pid and user
namespaces, no nested ones), as an unprivileged uid when we are root, in a
cgroup of its own where one can be made (memory, processes and CPU for all its processes), with
rlimits per process. The host adds a wall-clock limit per cell, a CPU backstop over the whole
sandbox, an output cap, and kills what a cell left running. Each task gets a new sandbox,
started in the background while the last one is in use. It fails closed: without a working
bubblewrap the env does not start (a one-line :class:`SandboxUnavailableError`); only
``sandbox: none`` runs code in a plain subprocess with the same limits, and warns once. See
``docs/python-sandbox.md``.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import secrets
import shutil
import tempfile
import warnings
from collections.abc import Mapping
from typing import Any

from agentfly_cli.components.tools import tool
from agentfly_cli.envs.base import BaseEnv, EnvSpec
from agentfly_cli.errors import UserError
from envs_builtin.sandbox_cgroup import Limits, unavailable
from envs_builtin.sandbox_interpreter import Interpreter, Launch, Outcome, StartError
from envs_builtin.sandbox_launch import (
    NOBODY,
    PATH,
    bwrap_command,
    bwrap_problem,
    supports_disable_userns,
)
from envs_builtin.sandbox_options import parse_options, validate_options

__all__ = ["PYTHON", "PythonSandboxEnv", "SandboxUnavailableError", "bwrap_problem", "python"]

TOOL_TIMEOUT = 120.0  # the tool's own timeout: above wall_seconds, so the env reports timeouts
START_TIMEOUT = 30.0  # seconds for an interpreter to report ready
RETRY_PAUSE_S = 0.1  # after a failed bubblewrap start: this, times the attempt, before the next
MAX_OPEN_FILES = 256
SANDBOX_PROCESSES = 2  # bubblewrap and the interpreter, on top of max_processes
LOST = "so its state (variables, imports, files) is lost"


class SandboxUnavailableError(UserError):
    """Bubblewrap is missing or does not start, so the env refuses to run code."""


class SandboxWarning(RuntimeWarning):
    """A sandbox runs with less isolation than it could have (see the message)."""


_warned: set[str] = set()  # the notes given in this process (each once)
UNSAFE = (  # the end of the refusals: the explicit opt-in, in a config and on the command line
    "or opt in to running it unsandboxed (unsafe): envs.python.options.sandbox: none, "
    "or --option sandbox=none"
)


def _warn_once(key: str, message: str) -> None:
    if key not in _warned:
        _warned.add(key)
        warnings.warn(message, SandboxWarning, stacklevel=5)


class PythonSandboxEnv(BaseEnv):
    """A persistent Python interpreter. Actions: ``{"code": "..."}`` or the code as a string.

    Options (the factory's keyword arguments, e.g. from the ``envs:`` config) are described in
    ``docs/python-sandbox.md``. ``reset`` hands over a new sandbox (started in the background
    after the first cell of a task), so nothing of one task reaches the next.
    """

    def __init__(
        self,
        *,
        cpu_seconds: float = 10.0,
        wall_seconds: float = 30.0,
        memory_mb: int = 1024,
        max_processes: int = 32,
        max_output_chars: int = 5000,
        sandbox: str = "bwrap",
        python: str = "/usr/bin/python3",
        bwrap: str | None = None,
        disk_mb: int = 256,
        cpu_seconds_total: float = 600.0,
        cpus: float = 1.0,
        start_attempts: int = 3,
    ):
        given = dict(locals())
        given.pop("self")
        self.options = options = parse_options(given)
        self.cpu_seconds, self.wall_seconds = options.cpu_seconds, options.wall_seconds
        self.memory_mb, self.max_processes = options.memory_mb, options.max_processes
        self.max_output_chars, self.disk_mb = options.max_output_chars, options.disk_mb
        self.cpu_seconds_total, self.cpus = options.cpu_seconds_total, options.cpus
        self.sandbox, self.python, self.bwrap = options.sandbox, options.python, options.bwrap
        self.start_attempts = options.start_attempts
        self.mode: str | None = None  # "bwrap" or "none" once started
        self._interpreter: Interpreter | None = None
        self._used = False  # a cell ran in the current interpreter: reset replaces it
        self._spare: asyncio.Task | None = None  # the next task's interpreter, starting
        self._stopping: set[asyncio.Task] = set()  # killed interpreters being cleaned up
        self._lock = asyncio.Lock()
        self._closed = False

    async def start(self) -> None:
        async with self._lock:
            if self._interpreter is None:
                await self._replace()

    async def reset(self, task: Mapping[str, Any] | None = None) -> None:
        """A new sandbox (none of the last task's processes, files or state) unless no cell
        ran in this one since it started."""
        async with self._lock:
            interpreter = self._interpreter
            if interpreter is None or self._used or not interpreter.alive:
                await self._replace()

    async def step(self, action: Mapping[str, Any] | str) -> str:
        code = action if isinstance(action, str) else action.get("code")
        if not isinstance(code, str):
            raise ValueError('the python env takes {"code": "<python source>"}')
        async with self._lock:
            restarted = self._interpreter is not None and not self._interpreter.alive
            if self._interpreter is None or restarted:
                await self._replace()
            interpreter = self._interpreter
            self._used = True
            try:
                outcome = await interpreter.run_cell(
                    code, self.cpu_seconds, self.wall_seconds, self.max_output_chars
                )
            except asyncio.CancelledError:
                interpreter.kill()  # a cell may still run: never hand this process out again
                raise
            self._prepare_spare()  # after the cell: it starts while the model writes its turn
            if outcome.failure:
                await self._replace()
                self._used = True  # the same task goes on in it
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
        spare, self._spare = self._spare, None
        if spare is not None:
            spare.cancel()
            await asyncio.wait({spare})
            if not spare.cancelled() and spare.exception() is None:
                await asyncio.shield(spare.result().stop())
        if interpreter is not None:
            self._retire(interpreter)
        if self._stopping:
            await asyncio.shield(asyncio.gather(*self._stopping, return_exceptions=True))

    def _retire(self, interpreter: Interpreter) -> None:
        """Kill an interpreter now; reap it and clean up after it in the background."""
        interpreter.kill()
        task = asyncio.get_running_loop().create_task(interpreter.stop())
        self._stopping.add(task)
        task.add_done_callback(self._stopping.discard)

    def _prepare_spare(self) -> None:
        """Start the next task's sandbox in the background (once per task)."""
        if self._spare is None and not self._closed:
            self._spare = asyncio.get_running_loop().create_task(self._launch())

    async def _replace(self) -> None:
        """Stop the current interpreter; the spare (or a new one) takes its place."""
        if self._closed:
            raise RuntimeError("the python env is closed")
        old, self._interpreter = self._interpreter, None
        if old is not None:
            self._retire(old)
        spare, self._spare = self._spare, None
        interpreter = None
        if spare is not None:
            with contextlib.suppress(Exception):  # it failed: start one here, which says why
                interpreter = await spare
        if interpreter is None or not interpreter.alive:
            interpreter = await self._launch()
        self._interpreter, self._used = interpreter, False
        if self._closed:  # closed while starting
            self._interpreter = None
            self._retire(interpreter)
            raise RuntimeError("the python env is closed")

    async def _launch(self) -> Interpreter:
        """Start in bubblewrap (retrying a failed start), or without it for ``sandbox: none``.

        Fails closed: no bubblewrap, or one that fails ``start_attempts`` times in a row, is a
        :class:`SandboxUnavailableError`; nothing carries over to the next env or start."""
        if self.sandbox == "none":
            _warn_once(
                "none",
                "python env: sandbox is 'none', so model-written code runs in a plain subprocess "
                "with rlimits only (no filesystem or network isolation: it can read your files "
                "and reach local services); install bubblewrap (apt-get install bubblewrap) "
                "and remove sandbox: none",
            )
            self.mode = "none"
            return await self._spawn_unsandboxed()
        bwrap = find_bwrap(self.bwrap)
        failure: StartError | None = None
        for attempt in range(self.start_attempts):
            if attempt:  # a transient failure (load, a race) passes: wait a little, try again
                await asyncio.sleep(RETRY_PAUSE_S * attempt)
            try:
                interpreter = await self._spawn(bwrap)
            except StartError as exc:
                if "Traceback" in str(exc):  # the interpreter failed, not bubblewrap
                    raise RuntimeError(
                        f"python env: the interpreter failed to start: {exc}"
                    ) from exc
                failure = exc
                continue
            self.mode = "bwrap"
            return interpreter
        why = str(failure).splitlines()[-1] if str(failure) else "no reason given"
        raise SandboxUnavailableError(
            f"python env: bubblewrap failed to start {_times(self.start_attempts)} ({why}), so "
            "model-written code is not run; fix what it says (often: unprivileged user "
            f"namespaces are not allowed, see docs/python-sandbox.md); {UNSAFE}"
        ) from failure

    async def _spawn_unsandboxed(self) -> Interpreter:
        try:
            return await self._spawn(None)
        except StartError as exc:
            raise RuntimeError(f"python env: the interpreter failed to start: {exc}") from exc

    async def _spawn(self, bwrap: str | None) -> Interpreter:
        if not os.access(self.python, os.X_OK):
            raise UserError(f"python env: the interpreter {self.python!r} is not executable")
        _note_missing_bounds()
        env = {"PATH": PATH, "LANG": "C.UTF-8"}
        limits = Limits(self.memory_mb << 20, self.max_processes + SANDBOX_PROCESSES, self.cpus)
        if bwrap:
            prefix = bwrap_command(bwrap, self.disk_mb, disable_userns=_nested_userns_off(bwrap))
            launch = Launch([*prefix, self.python], env, True, limits)
            home = "/tmp"
        else:
            home = tempfile.mkdtemp(prefix="agentfly-python-")
            if os.geteuid() == 0:
                os.chown(home, NOBODY, NOBODY)
            token = secrets.token_hex(8)
            env.update(HOME=home, TMPDIR=home, AGENTFLY_SANDBOX=token)
            tag = f"AGENTFLY_SANDBOX={token}".encode()
            launch = Launch([self.python], env, False, limits, home, tag)
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
            return await Interpreter.spawn(
                launch, config, START_TIMEOUT, 4 * self.max_output_chars + 64
            )
        except BaseException:
            if launch.home:
                shutil.rmtree(launch.home, ignore_errors=True)
            raise

    def _observation(self, outcome: Outcome) -> str:
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


def find_bwrap(path: str | None) -> str:
    """The bubblewrap binary (``path``, else ``bwrap`` on PATH), or a one-line
    :class:`SandboxUnavailableError` saying how to install it."""
    bwrap = path or shutil.which("bwrap")
    if bwrap and os.access(bwrap, os.X_OK):
        return bwrap
    where = f"at {path}" if path else "on PATH"
    raise SandboxUnavailableError(
        f"python env: bubblewrap is not installed ({where}), so model-written code is not "
        f"run; install it: apt-get install bubblewrap; {UNSAFE}"
    )


def preflight(options: Mapping[str, Any]) -> None:
    """The spec's check before a run loads anything: bubblewrap is there unless the options
    opt out (a bubblewrap that fails to start is found at the first env start)."""
    parsed = parse_options(options)
    if parsed.sandbox != "none":
        find_bwrap(parsed.bwrap)


def _times(count: int) -> str:
    return "once" if count == 1 else f"{count} times"


def _nested_userns_off(bwrap: str) -> bool:
    """Whether this bubblewrap can forbid user namespaces inside; a note once where not."""
    if supports_disable_userns(bwrap):
        return True
    _warn_once(
        "userns",
        f"python env: {bwrap} has no --disable-userns (bubblewrap 0.8.0 or later), so code in "
        "the sandbox may create nested user namespaces; upgrade bubblewrap",
    )
    return False


def _note_missing_bounds() -> None:
    """A note, once, where sandboxes get no cgroup: memory is then bounded per process."""
    if "cgroup" in _warned:
        return
    why = unavailable()
    if why is not None:
        _warn_once(
            "cgroup",
            f"python env: {why}, so memory_mb bounds each process of a sandbox (RLIMIT_AS), "
            "not all of them together; run as root where cgroup v1, or cgroup v2 with the "
            "memory and pids controllers, can be delegated",
        )
    else:
        _warned.add("cgroup")


PYTHON = EnvSpec(
    name="python",
    factory=PythonSandboxEnv,
    description="A persistent Python interpreter per trajectory, sandboxed with bubblewrap",
    pool_max=64,
    warm_size=0,
    start_timeout=30.0,
    resources={"cpu": 1.0, "memory_mb": 1024.0},
    validate_options=validate_options,
    preflight=preflight,
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
