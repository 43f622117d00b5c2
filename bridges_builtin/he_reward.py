"""``humaneval_pass``: 1.0 when the problem's tests pass on the model's code, run in the
project's ``python`` sandbox (bubblewrap, with time and memory limits), never in-process.

The code is the reply's first ```python block that defines the problem's function (else its
first block, else the whole reply): a whole function follows the problem's prompt (so the
prompt's imports and helpers stay), a bare body completes the prompt's function. The first cell
runs that program; the second runs the problem's ``check(entry_point)`` (what the code prints
meanwhile swallowed) and then prints a random token that the model's code, run before it,
cannot know, so only tests that finished pass. A timeout, a crash or a sandbox that fails
scores 0 with the reason in the extras. Both cells share one interpreter, as in HumanEval's own
harness: code that rewrites Python's builtins could still fake a pass.
"""

from __future__ import annotations

import asyncio
import re
import secrets
import textwrap
import weakref
from collections.abc import Mapping
from typing import Any

from agentfly_cli.components.rewards import Reward
from agentfly_cli.errors import UserError
from bridges_builtin.replies import last_reply

#: the sandbox limits of one test run (any ``python`` env option may be given instead)
SANDBOX = {
    "cpu_seconds": 10,
    "wall_seconds": 10,
    "memory_mb": 512,
    "max_processes": 8,
    "max_output_chars": 2000,
    "disk_mb": 16,
}
CONCURRENCY = 4  # sandboxes at once, per event loop
FENCE = re.compile(r"```[ \t]*(?:python3?|py)?[ \t]*\n(.*?)(?:\n[ \t]*```|\Z)", re.DOTALL)
REWARD_TIMEOUT = 120.0  # above two cells' wall_seconds and a sandbox start
#: the second cell: what the code prints under test is swallowed (as HumanEval's harness
#: does), so only the token, printed once check() returned, ends the output
TESTS = """{test}
import contextlib as _he_contextlib, io as _he_io
_he_quiet = _he_io.StringIO()
with _he_contextlib.redirect_stdout(_he_quiet), _he_contextlib.redirect_stderr(_he_quiet):
    check({entry})
print({token!r})
"""


def extract_code(reply: str, entry_point: str) -> str:
    """The code of a reply: its first fenced block that defines ``entry_point``, else its first
    fenced block (an unclosed one runs to the end), else the reply itself."""
    blocks = FENCE.findall(reply)
    for block in blocks:
        if defines(block, entry_point):
            return block
    return blocks[0] if blocks else reply


def defines(code: str, entry_point: str) -> bool:
    return re.search(rf"^(async\s+)?def\s+{re.escape(entry_point)}\s*\(", code, re.M) is not None


def program(prompt: str, reply: str, entry_point: str) -> str:
    """The program the tests run against: the prompt, then the reply's whole function, or the
    prompt completed by the reply's body (indented to the function's level)."""
    code = extract_code(reply, entry_point)
    head = prompt if prompt.endswith("\n") else prompt + "\n"
    if defines(code, entry_point):
        return f"{head}\n{code}\n"
    body = textwrap.indent(textwrap.dedent(code.strip("\n")), "    ")
    return f"{head}{body}\n"


class HumanEvalPass(Reward):
    """The problem's tests in the sandbox: 1.0 when they pass; ``options`` are the sandbox's
    limits (``python`` env options) and ``concurrency``."""

    def __init__(self, options: Mapping[str, Any] | None = None) -> None:
        from envs_builtin.sandbox_options import parse_options

        given = dict(options or {})
        self.concurrency = given.pop("concurrency", CONCURRENCY)
        if isinstance(self.concurrency, bool) or not isinstance(self.concurrency, int):
            raise UserError("reward humaneval_pass: options.concurrency must be a whole number")
        if self.concurrency < 1:
            raise UserError("reward humaneval_pass: options.concurrency must be at least 1")
        self.sandbox = {**SANDBOX, **given}
        parse_options(self.sandbox)  # a bad limit is one line now, not at the first reward
        self._gates: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
        super().__init__(self._score, name="humaneval_pass", timeout=REWARD_TIMEOUT)
        self.description = "HumanEval: the problem's tests pass on the code, run in the sandbox"

    def with_options(self, options: Mapping[str, Any]) -> HumanEvalPass:
        from envs_builtin.python_sandbox import preflight

        configured = HumanEvalPass(options) if options else self
        preflight(configured.sandbox)  # no bubblewrap: one line before the run, not 0 rewards
        return configured

    def _gate(self) -> asyncio.Semaphore:
        loop = asyncio.get_running_loop()
        gate = self._gates.get(loop)
        if gate is None:
            gate = self._gates[loop] = asyncio.Semaphore(self.concurrency)
        return gate

    async def _score(
        self, prediction: Any, prompt: str, test: str, entry_point: str, trajectory: Any = None
    ) -> dict:
        reply = last_reply(trajectory)
        reply = reply if reply is not None else ("" if prediction is None else str(prediction))
        if not reply.strip():
            return {"reward": 0.0, "reason": "no code"}
        code = program(prompt, reply, entry_point)
        async with self._gate():
            return await run_tests(code, test, entry_point, self.sandbox)


async def run_tests(code: str, test: str, entry_point: str, options: Mapping[str, Any]) -> dict:
    """``code``, then ``test`` and ``check(entry_point)``, in a fresh sandbox: the score and,
    when they did not pass, why."""
    from envs_builtin.python_sandbox import PythonSandboxEnv

    token = secrets.token_hex(16)
    env = PythonSandboxEnv(**options)
    try:
        await env.start()
        loaded = await env.step({"code": code})
        checked = await env.step({"code": TESTS.format(test=test, entry=entry_point, token=token)})
    except asyncio.CancelledError:
        raise
    except Exception as exc:  # the sandbox itself failed: no score, and say why
        return {"reward": 0.0, "reason": f"sandbox: {type(exc).__name__}: {exc}"[:300]}
    finally:
        await env.close()
    if checked.rstrip().endswith(token):
        return {"reward": 1.0, "passed": True}
    return {"reward": 0.0, "passed": False, "reason": _reason(loaded, checked)}


def _reason(loaded: str, checked: str) -> str:
    """The line that says what went wrong: the program's error (a syntax error, a crash, a
    timeout) when it had one, else the tests' (a failed assertion)."""
    for text in (loaded, checked):
        lines = [line for line in text.strip().splitlines() if line.strip()]
        if lines and ("Traceback" in text or "Error" in lines[-1] or lines[-1].startswith("[")):
            return lines[-1][:300]
    return "the tests did not finish"
