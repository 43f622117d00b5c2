"""The answer pipe of a ``python`` sandbox is closed exactly once, and `agentfly tools call
python` leaves stderr clean (it printed an asyncio "Bad file descriptor" traceback each time)."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path

import pytest

from envs_builtin.sandbox_cgroup import Limits
from envs_builtin.sandbox_interpreter import Interpreter, Launch
from tests.helpers.sandbox_modes import SANDBOX

ROOT = Path(__file__).resolve().parents[2]
AGENTFLY = Path(sys.executable).with_name("agentfly")


async def cancelled_start_then_a_new_pipe() -> tuple[bool, list[dict]]:
    """Cancel a start while asyncio connects its answer pipe, open a new pipe at once (the
    kernel hands out the lowest free number: the answer pipe's, once closed), let the loop run
    and say whether the new pipe is still open, with what the loop reported."""
    loop = asyncio.get_running_loop()
    reported: list[dict] = []
    loop.set_exception_handler(lambda _loop, context: reported.append(context))
    launch = Launch(["/usr/bin/python3"], {"PATH": "/usr/bin"}, False, Limits(1 << 30, 8, 1.0))
    starting = asyncio.ensure_future(Interpreter.spawn(launch, {}, 5.0, 100))
    await asyncio.sleep(0)  # the start now waits inside connect_read_pipe
    starting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await starting
    read_end, write_end = os.pipe()  # another sandbox's pipe, say
    try:
        for _ in range(5):
            await asyncio.sleep(0)  # the transport's close runs a loop turn later
        try:
            os.fstat(read_end)
            still_open = True
        except OSError:
            still_open = False
        return still_open, reported
    finally:
        for fd in (read_end, write_end):
            try:
                os.close(fd)
            except OSError:
                pass


def test_a_cancelled_start_closes_its_answer_pipe_once_and_no_other_fd():
    still_open, reported = asyncio.run(cancelled_start_then_a_new_pipe())
    assert reported == []  # before the fix: "Exception in callback ... Bad file descriptor"
    assert still_open  # before the fix: the transport closed the new pipe's number


def test_tools_call_python_leaves_stderr_clean():
    """In bubblewrap where it works, else (opted in) without it: the race is the same."""
    done = subprocess.run(
        [str(AGENTFLY), "tools", "call", "python", "--option", f"sandbox={SANDBOX}"]
        + ["--args", '{"code": "print(6 * 7)"}'],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
        env={**os.environ, "HF_HUB_OFFLINE": "1"},
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "42"
    assert "Traceback" not in done.stderr and "Bad file descriptor" not in done.stderr
    assert done.stderr.strip().splitlines()[-1].startswith("ok · python")
