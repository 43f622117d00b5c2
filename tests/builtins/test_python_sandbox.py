"""The ``python`` env and tool: a persistent interpreter per trajectory, in bubblewrap or not."""

from __future__ import annotations

import asyncio
import functools
import os
import signal
import warnings

import pytest

from agentfly_cli.envs.base import Env, standalone_env
from agentfly_cli.errors import UserError
from envs_builtin import python_sandbox, sandbox_cgroup
from envs_builtin.python_sandbox import (
    PYTHON,
    PythonSandboxEnv,
    SandboxWarning,
    bwrap_problem,
    python,
)
from envs_builtin.sandbox_processes import alive
from tests.helpers.sandbox_modes import SANDBOX

BWRAP_PROBLEM = bwrap_problem()
NO_CGROUP = sandbox_cgroup.unavailable()
NEEDS_BWRAP = pytest.mark.skipif(
    BWRAP_PROBLEM is not None, reason=f"bubblewrap cannot sandbox here: {BWRAP_PROBLEM}"
)
MODES = [pytest.param("bwrap", marks=NEEDS_BWRAP), "none"]
pytestmark = pytest.mark.filterwarnings("ignore::envs_builtin.python_sandbox.SandboxWarning")
WORKING = PYTHON.model_copy(
    update={"factory": functools.partial(PythonSandboxEnv, sandbox=SANDBOX)}
)


def run(coro):
    return asyncio.run(coro)


async def cells(*codes: str, **options) -> list[str]:
    """Run cells in one fresh env and return their observations."""
    env = PythonSandboxEnv(**options)
    try:
        await env.start()
        await env.reset({})
        return [await env.step(code) for code in codes]
    finally:
        await env.close()


def processes_of(session: int) -> list[int]:
    """Live (non-zombie) processes of a session, from /proc."""
    found = []
    for name in os.listdir("/proc"):
        try:
            with open(f"/proc/{name}/stat") as handle:
                fields = handle.read().rpartition(")")[2].split()
        except (OSError, ValueError):
            continue
        if fields[0] != "Z" and int(fields[3]) == session:
            found.append(int(name))
    return found


def with_cmdline(text: str) -> list[int]:
    found = []
    for name in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{name}/cmdline", "rb") as handle:
                if text.encode() in handle.read():
                    found.append(int(name))
        except OSError:
            continue
    return found


@pytest.mark.parametrize("mode", MODES)
def test_state_persists_across_steps(mode):
    first, second, third = run(
        cells(
            "import math\nx = 41\ndef double(v):\n    return 2 * v",
            "x += 1",
            "double(x)",
            sandbox=mode,
        )
    )
    assert (first, second, third) == ("(no output)", "(no output)", "84")


@pytest.mark.parametrize("mode", MODES)
def test_reset_clears_variables_and_files(mode):
    async def scenario():
        env = PythonSandboxEnv(sandbox=mode)
        await env.start()
        try:
            await env.step("x = 1\nopen('notes.txt', 'w').write('secret')")
            before = await env.step("x, open('notes.txt').read()")
            await env.reset({})
            after = await env.step("import os\nprint(os.listdir('.'))\nx")
            return before, after
        finally:
            await env.close()

    before, after = run(scenario())
    assert before == "(1, 'secret')"
    assert after.startswith("[]\nTraceback") and "NameError: name 'x' is not defined" in after


def test_notebook_style_observations():
    printed, silent, none, mixed = run(
        cells(
            "print('a')\n[1, 2]",
            "y = 3",
            "None",
            "import sys\nprint('out')\nprint('err', file=sys.stderr)\n{'k': y}",
            sandbox=SANDBOX,
        )
    )
    assert printed == "a\n[1, 2]"
    assert silent == none == "(no output)"
    assert mixed == "out\nerr\n{'k': 3}"


def test_errors_are_observations_with_user_frames_only():
    name_error, nested, syntax = run(
        cells("x", "def f():\n    return 1 / 0\n\nf()", "x = (", sandbox="none")
    )
    assert name_error.startswith('Traceback (most recent call last):\n  File "<cell 1>", line 1')
    assert name_error.endswith("NameError: name 'x' is not defined")
    assert nested.count('File "<cell 2>"') == 2 and "ZeroDivisionError: division by zero" in nested
    assert "Traceback" not in syntax and "SyntaxError" in syntax
    for text in (name_error, nested, syntax):
        assert "agentfly-repl" not in text and "python_repl" not in text


@pytest.mark.parametrize("mode", MODES)
def test_output_is_truncated_with_a_note(mode):
    printed, child = run(
        cells(
            "print('x' * 20000)",
            "import os\nos.system('head -c 50000 /dev/zero | tr \"\\\\0\" y')",
            max_output_chars=100,
            sandbox=mode,
        )
    )
    assert printed == "x" * 100 + "\n[output truncated: 19901 more characters]"
    assert child.startswith("y" * 100 + "\n[output truncated: 49900 more characters]")


@pytest.mark.parametrize("mode", MODES)
def test_close_twice_leaves_no_process_behind(mode):
    async def scenario():
        env = PythonSandboxEnv(sandbox=mode, wall_seconds=60)
        await env.start()
        session = env._interpreter.proc.pid
        running = asyncio.ensure_future(
            env.step(
                "import subprocess, time\nsubprocess.Popen(['sleep', '987654'])\n"
                "subprocess.Popen(['setsid', 'sleep', '987655'])\ntime.sleep(60)"
            )
        )
        for _ in range(100):  # the cell's processes run while we close
            if with_cmdline("987654") and with_cmdline("987655"):
                break
            await asyncio.sleep(0.05)
        assert processes_of(session) and with_cmdline("987655")
        await env.close()
        await env.close()
        await asyncio.wait({running})
        return env, session

    env, session = run(scenario())
    assert not run(env.healthy())
    assert processes_of(session) == []
    assert with_cmdline("987654") == with_cmdline("987655") == []


@pytest.mark.parametrize("mode", MODES)
def test_processes_of_a_cell_end_with_it(mode):
    """A child started in the background (also in its own session) is killed when its cell
    returns, and the sandbox's own processes go on."""

    async def scenario():
        env = PythonSandboxEnv(sandbox=mode)
        await env.start()
        try:
            started = await env.step(
                "import subprocess\nsubprocess.Popen(['sleep', '987657'])\n"
                "subprocess.Popen(['setsid', 'sleep', '987658'])\n'started'"
            )
            await asyncio.sleep(0.2)
            left = with_cmdline("987657") + with_cmdline("987658")
            return started, left, await env.step("print('still here')")
        finally:
            await env.close()

    started, left, after = run(scenario())
    assert started == "'started'"
    assert left == []
    assert after == "still here"


@pytest.mark.parametrize("mode", MODES)
def test_killed_interpreter_is_unhealthy_then_restarted(mode):
    async def scenario():
        env = PythonSandboxEnv(sandbox=mode)
        await env.start()
        try:
            await env.step("x = 1")
            healthy_before = await env.healthy()
            os.kill(env._interpreter.repl_pid, signal.SIGKILL)
            await asyncio.sleep(0.2)
            healthy_after = await env.healthy()
            return healthy_before, healthy_after, await env.step("x")
        finally:
            await env.close()

    before, after, observation = run(scenario())
    assert before and not after
    assert observation.startswith("[the interpreter had stopped and was restarted")
    assert "NameError" in observation


def test_reset_restarts_an_interpreter_with_stray_processes():
    async def scenario():
        env = PythonSandboxEnv(sandbox="none")
        await env.start()
        try:
            await env.step("import subprocess\nsubprocess.Popen(['sleep', '987656'])")
            first = env._interpreter.repl_pid
            await env.reset({})
            return first, env._interpreter.repl_pid, with_cmdline("987656")
        finally:
            await env.close()

    first, second, strays = run(scenario())
    assert first != second and strays == []


@pytest.mark.parametrize("mode", MODES)
def test_concurrent_envs_are_isolated(mode):
    async def one(index: int) -> list[str]:
        return await cells(
            f"secret = {index}\nopen('mine.txt', 'w').write('{index}')",
            "import os, time\ntime.sleep(0.1)\n(secret, open('mine.txt').read(), os.listdir('.'))",
            sandbox=mode,
        )

    async def scenario():
        return await asyncio.gather(*(one(index) for index in range(4)))

    for index, (_, seen) in enumerate(run(scenario())):
        assert seen == f"({index}, '{index}', ['mine.txt'])"


def test_tool_runs_code_in_the_trajectory_env():
    async def scenario():
        async with standalone_env(WORKING) as env:
            assert isinstance(env, Env)
            first = await python.invoke({"code": "import math\nr = math.sqrt(16)"}, env=env)
            second = await python.invoke('{"code": "print(r)"}', env=env)
            failed = await python.invoke({"code": "r.nope"}, env=env)
            return first, second, failed, env

    first, second, failed, env = run(scenario())
    assert first.ok and first.observation == "(no output)"
    assert second.ok and second.observation == "4.0"
    assert failed.ok and "AttributeError" in failed.observation  # user errors are observations
    assert python.env == "python" and python.timeout > env.wall_seconds + 5
    assert python.parameters["required"] == ["code"]
    assert "persistent" in python.description


def test_step_takes_a_string_or_a_code_dict():
    async def scenario():
        async with standalone_env(WORKING) as env:
            as_text = await env.step("6 * 7")
            with pytest.raises(ValueError, match="code"):
                await env.step({"source": "1"})
            return as_text

    assert run(scenario()) == "42"


def test_registered_through_the_builtin_plugin():
    from agentfly_cli.plugin_host.plugins import load_plugins

    components = load_plugins(only={"agentfly-cli"}).components
    assert components.envs.get("python") is PYTHON
    assert components.tools.get("python").env == "python"


def test_factory_options_are_validated():
    env = PYTHON.create(cpu_seconds=2, wall_seconds=5, memory_mb=256, sandbox="none")
    assert (env.cpu_seconds, env.wall_seconds, env.memory_mb) == (2.0, 5.0, 256)
    with pytest.raises(UserError, match="sandbox: Input should be 'auto', 'bwrap' or 'none'"):
        PythonSandboxEnv(sandbox="docker")
    with pytest.raises(UserError, match="memory_mb: Input should be greater than or equal to 32"):
        PythonSandboxEnv(memory_mb=0)


def test_fallback_warns_once(monkeypatch):
    monkeypatch.setattr(python_sandbox, "_warned", set())
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        first, second = run(cells("1 + 1", sandbox="none")), run(cells("2 + 2", sandbox="none"))
    assert first == ["2"] and second == ["4"]
    messages = [
        str(w.message)
        for w in caught
        if issubclass(w.category, SandboxWarning) and "plain subprocess" in str(w.message)
    ]  # (where no cgroup can be made, that note comes once too)
    assert len(messages) == 1
    assert "no filesystem or network isolation" in messages[0]
    assert "apt-get install bubblewrap" in messages[0]


def test_cancelled_cell_never_leaves_a_busy_interpreter():
    async def scenario():
        env = PythonSandboxEnv(sandbox="none")
        await env.start()
        try:
            await env.step("x = 1")
            with pytest.raises(asyncio.TimeoutError):
                await asyncio.wait_for(env.step("import time\ntime.sleep(30)"), 0.3)
            return await env.healthy(), await env.step("print('fresh')")
        finally:
            await env.close()

    healthy, observation = run(scenario())
    assert not healthy
    assert observation.startswith("[the interpreter had stopped and was restarted")
    assert observation.endswith("fresh")


@NEEDS_BWRAP
def test_bwrap_mode_reports_its_mode():
    async def scenario():
        env = PythonSandboxEnv(sandbox="auto")
        await env.start()
        await env.close()
        return env.mode

    assert run(scenario()) == "bwrap"


def cgroup_limits(group) -> tuple[int, int, str]:
    """memory bytes, pids and the CPU quota of a sandbox's cgroup, read from its files."""
    if group.version == 2:
        folder = group.folders[""]
        cpu = (folder / "cpu.max").read_text().split()[0] if (folder / "cpu.max").exists() else ""
        return (
            int((folder / "memory.max").read_text()),
            int((folder / "pids.max").read_text()),
            cpu,
        )
    cpu_folder = group.folders.get("cpu")
    return (
        int((group.folders["memory"] / "memory.limit_in_bytes").read_text()),
        int((group.folders["pids"] / "pids.max").read_text()),
        (cpu_folder / "cpu.cfs_quota_us").read_text().strip() if cpu_folder else "",
    )


@pytest.mark.skipif(NO_CGROUP is not None, reason=f"no cgroup for sandboxes here: {NO_CGROUP}")
@pytest.mark.parametrize("mode", MODES)
def test_the_sandbox_has_a_cgroup_with_its_limits_and_processes(mode):
    async def scenario():
        env = PythonSandboxEnv(sandbox=mode, memory_mb=300, max_processes=7, cpus=0.5)
        await env.start()
        interpreter = env._interpreter
        group, keep = interpreter.cgroup, set(interpreter.processes.keep)
        limits = cgroup_limits(group)
        running = asyncio.ensure_future(
            env.step("import subprocess, time\nsubprocess.Popen(['sleep', '30'])\ntime.sleep(1)")
        )
        members = []
        for _ in range(40):
            members = group.pids()
            if len(members) > len(keep):
                break
            await asyncio.sleep(0.05)
        await running
        after_cell = [pid for pid in group.pids() if alive(pid)]  # a killed child: a zombie
        await env.close()
        return group, interpreter, keep, limits, members, after_cell

    group, interpreter, keep, limits, members, after_cell = run(scenario())
    memory, pids, quota = limits
    assert memory == 300 << 20 and pids == 7 + python_sandbox.SANDBOX_PROCESSES
    assert quota in ("", "50000")  # half of a 100 ms period, where the cpu controller is there
    assert interpreter.repl_pid in keep and keep < set(members)  # the cell's child is inside
    assert set(after_cell) == keep  # the child was killed when the cell returned
    assert not any(folder.exists() for folder in group.folders.values())  # removed on close


def test_without_a_cgroup_a_note_says_memory_is_bounded_per_process(monkeypatch):
    monkeypatch.setattr(sandbox_cgroup, "_why_not", "no cgroup here (a test)")
    monkeypatch.setattr(python_sandbox, "_warned", set())
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        first = run(cells("import os\nos.system('true')\n1 + 1", sandbox="none"))
        second = run(cells("2 + 2", sandbox="none"))
    assert first == ["2"] and second == ["4"]
    notes = [str(w.message) for w in caught if "cgroup" in str(w.message)]
    assert len(notes) == 1
    assert "no cgroup here (a test), so memory_mb bounds each process of a sandbox" in notes[0]
    assert "not all of them together" in notes[0]


def with_arguments(text: str) -> list[int]:
    """Live processes whose command line holds ``text``."""
    return [pid for pid in with_cmdline(text) if alive(pid)]


@NEEDS_BWRAP
def test_a_start_cancelled_at_any_moment_leaves_no_process_behind():
    """Cancelled while bubblewrap sets up, the whole sandbox goes (killing bubblewrap alone left
    its child waiting for it, forever). disk_mb=7 marks this test's sandboxes."""
    marker = f"--size {7 << 20} "

    async def attempt(delay: float) -> None:
        env = PythonSandboxEnv(sandbox="bwrap", disk_mb=7)
        starting = asyncio.ensure_future(env.start())
        await asyncio.sleep(delay)
        starting.cancel()
        await asyncio.wait({starting})
        await env.close()

    async def scenario():
        for step in range(40):
            await attempt(step * 0.001)
        await asyncio.sleep(1.0)

    run(asyncio.wait_for(scenario(), 60))  # before the fix: a hang (the child held the pipes)
    assert with_arguments(marker) == []
