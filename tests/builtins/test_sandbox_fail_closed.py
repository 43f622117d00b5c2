"""The ``python`` sandbox fails closed: without a working bubblewrap the env does not start
(one line saying how to install it), a failed bubblewrap start is retried, and nothing of one
env's failure downgrades a later env; only ``sandbox: none`` runs code unsandboxed.

Bubblewrap's absence is simulated with a PATH (or lookup) that does not find it, a failed start
with a fake ``bwrap`` that fails a given number of times and then runs the command given to it
(outside any sandbox: the tests only check which path the env took)."""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import sys
import tempfile
import warnings
from pathlib import Path

import pytest

from agentfly_cli.errors import UserError
from envs_builtin import python_sandbox
from envs_builtin.python_sandbox import PythonSandboxEnv, SandboxUnavailableError, SandboxWarning
from envs_builtin.sandbox_interpreter import Interpreter
from tests.helpers.recipe_checks import agentfly, json_call, write_jsonl

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent  # the venv's bin: agentfly, python, no bwrap
FAKE_BWRAP = """#!/bin/sh
if [ "$1" = --help ]; then echo "usage: bwrap ... --disable-userns"; exit 0; fi
count=$(( $(cat {count}) + 1 ))
echo "$count" > {count}
if [ "$count" -le {fails} ]; then
    echo "bwrap: Creating new namespace failed: Resource temporarily unavailable" >&2
    exit 1
fi
while [ "$#" -gt 0 ] && [ "$1" != {python} ]; do shift; done
"$@"
"""


def run(coroutine):
    return asyncio.run(coroutine)


class FakeBwrap:
    """A ``bwrap`` that fails its first ``fails`` starts, then runs the command after its
    options (readable and writable by the nobody uid the host drops to as root)."""

    def __init__(self, fails: int):
        self.folder = Path(tempfile.mkdtemp(prefix="agentfly-fake-bwrap-"))
        self.folder.chmod(0o755)
        self.count = self.folder / "count"
        self.count.write_text("0\n")
        self.count.chmod(0o666)
        self.path = self.folder / "bwrap"
        self.path.write_text(
            FAKE_BWRAP.format(count=self.count, fails=fails, python="/usr/bin/python3")
        )
        self.path.chmod(0o755)

    @property
    def starts(self) -> int:
        return int(self.count.read_text())


@pytest.fixture
def fake_bwrap():
    made: list[FakeBwrap] = []

    def make(fails: int) -> FakeBwrap:
        made.append(FakeBwrap(fails))
        return made[-1]

    yield make
    for fake in made:
        shutil.rmtree(fake.folder, ignore_errors=True)


@pytest.fixture
def no_bwrap_on_path(monkeypatch):
    """The lookup the env uses finds no bubblewrap; nothing may be spawned."""
    real_which = shutil.which
    monkeypatch.setattr(
        shutil,
        "which",
        lambda name, *a, **k: None if name == "bwrap" else real_which(name, *a, **k),
    )
    spawned: list[object] = []

    async def spawn(*args, **kwargs):
        spawned.append(args)
        raise AssertionError("an interpreter was started")

    monkeypatch.setattr(Interpreter, "spawn", spawn)
    return spawned


async def started(**options) -> str:
    """Start an env, run one cell, close it; its mode."""
    env = PythonSandboxEnv(**options)
    try:
        await env.start()
        assert await env.step("6 * 7") == "42"
        return env.mode
    finally:
        await env.close()


@pytest.mark.parametrize("options", [{}, {"sandbox": "auto"}, {"sandbox": "bwrap"}])
def test_without_bubblewrap_the_env_refuses_to_start(no_bwrap_on_path, options):
    with pytest.raises(SandboxUnavailableError) as caught:
        run(started(**options))
    message = str(caught.value)
    assert isinstance(caught.value, UserError) and "\n" not in message
    assert message.startswith("python env: bubblewrap is not installed (on PATH)")
    assert "apt-get install bubblewrap" in message
    assert "unsandboxed (unsafe): envs.python.options.sandbox: none" in message
    assert message.endswith("or --option sandbox=none")
    assert no_bwrap_on_path == []  # no code ran, sandboxed or not


def test_a_bubblewrap_path_that_does_not_exist_is_named():
    with pytest.raises(SandboxUnavailableError, match=r"not installed \(at /nonexistent/bwrap\)"):
        run(started(bwrap="/nonexistent/bwrap"))


def test_sandbox_none_is_the_explicit_opt_in_to_run_unsandboxed(monkeypatch):
    monkeypatch.setattr(shutil, "which", lambda name, *a, **k: None)
    monkeypatch.setattr(python_sandbox, "_warned", set())
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert run(started(sandbox="none")) == "none"
    notes = [str(w.message) for w in caught if issubclass(w.category, SandboxWarning)]
    assert any("sandbox is 'none'" in note and "no filesystem" in note for note in notes)


def test_a_failed_bubblewrap_start_is_retried_and_later_envs_stay_sandboxed(fake_bwrap):
    """Before: one failed start set a process-wide flag, and this env and every later one ran
    unsandboxed (mode "none") with a warning."""
    flaky = fake_bwrap(fails=1)
    assert run(started(bwrap=str(flaky.path))) == "bwrap"
    assert flaky.starts == 2  # the failed start, then the retry
    assert run(started(bwrap=str(flaky.path))) == "bwrap"
    assert run(started(bwrap=str(flaky.path), sandbox="auto")) == "bwrap"


def test_a_bubblewrap_that_never_starts_fails_closed_in_one_line(fake_bwrap):
    broken = fake_bwrap(fails=1000)
    with pytest.raises(SandboxUnavailableError) as caught:
        run(started(bwrap=str(broken.path), start_attempts=2))
    message = str(caught.value)
    assert "\n" not in message and broken.starts == 2
    assert message.startswith(
        "python env: bubblewrap failed to start 2 times (bwrap: Creating new namespace failed"
    )
    assert "envs.python.options.sandbox: none" in message
    with pytest.raises(SandboxUnavailableError, match="failed to start 3 times"):
        run(started(bwrap=str(broken.path), sandbox="auto"))  # the default: 3 attempts
    assert broken.starts == 5
    assert run(started(bwrap=str(fake_bwrap(fails=0).path))) == "bwrap"  # nothing carried over


def test_start_attempts_is_checked():
    with pytest.raises(UserError, match="start_attempts: Input should be greater than or equal"):
        PythonSandboxEnv(start_attempts=0)


def tools_call(*arguments: str) -> subprocess.CompletedProcess:
    """``agentfly tools call ...`` with a PATH that has no bubblewrap."""
    return subprocess.run(
        [str(BIN / "agentfly"), "tools", "call", *arguments],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
        env={**os.environ, "PATH": str(BIN), "HF_HUB_OFFLINE": "1"},
    )


def test_tools_call_python_without_bubblewrap_is_one_line_and_exit_2():
    done = tools_call("python", "--args", '{"code": "print(1)"}')
    assert done.returncode == 2, done.stderr
    assert done.stdout == ""
    (line,) = done.stderr.strip().splitlines()
    assert line.startswith("error: python env: bubblewrap is not installed (on PATH)")
    assert "apt-get install bubblewrap" in line and "--option sandbox=none" in line


def test_tools_call_option_sandbox_none_runs_unsandboxed_with_a_warning():
    done = tools_call("python", "--option", "sandbox=none", "--args", '{"code": "print(6 * 7)"}')
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "42"
    assert "sandbox is 'none'" in done.stderr and "Traceback" not in done.stderr
    wrong = tools_call("answer", "--option", "sandbox=none", "--args", '{"answer": "1"}')
    assert wrong.returncode == 2
    assert wrong.stderr.strip() == "error: --option is for env tools; 'answer' uses no env"


@pytest.mark.parametrize("command", ["rollout", "train"])
def test_a_run_without_bubblewrap_stops_before_the_model_with_the_one_line(
    command, model_loads, tmp_path, monkeypatch
):
    """Not an error observation per tool call, nor a stop at the first call: exit 2 before
    any model loads (before: the code ran unsandboxed, with a warning)."""
    monkeypatch.setenv("PATH", str(BIN))
    calls = [json_call("python", code="print(1)"), json_call("answer", answer="1")]
    data = write_jsonl(tmp_path / "data.jsonl", [{"question": "1?", "answer": "1"}])
    out = tmp_path / "out"
    result = agentfly(
        command, "code_math", "--model", "tiny", "--data", data, "--out", out, "--quiet",
        *(["--backend", "scripted", "--script",
           write_jsonl(tmp_path / "script.jsonl", [{"responses": calls}])]
          if command == "rollout" else ["--no-warm-start"]),
    )  # fmt: skip
    assert result.exit_code == 2, result.output
    (line,) = [line for line in result.output.splitlines() if line.strip()]
    assert line.startswith(
        "error: env 'python' cannot start: python env: bubblewrap is not installed (on PATH)"
    )
    assert "apt-get install bubblewrap" in line
    assert model_loads == [] and not out.exists()


def test_the_check_before_the_model_is_only_for_envs_that_start_here(no_bwrap_on_path):
    from agentfly_cli.envs.manager import ResourceManager
    from agentfly_cli.settings.envs import EnvPoolSettings
    from envs_builtin.python_sandbox import PYTHON

    with pytest.raises(UserError, match="env 'python' cannot start: python env: bubblewrap is not"):
        ResourceManager({"python": PYTHON}, {"python": EnvPoolSettings(provider="process")})
    for elsewhere in ({"address": "unix:///tmp/agentfly-none.sock"}, {"provider": "ray"}):
        ResourceManager({"python": PYTHON}, {"python": EnvPoolSettings(**elsewhere)})
    opted_in = EnvPoolSettings(options={"sandbox": "none"})
    ResourceManager({"python": PYTHON}, {"python": opted_in})
