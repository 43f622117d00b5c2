"""A pooled ``python`` env is clean for the next trajectory: whatever one task plants in its
interpreter or its sandbox (a patched builtin, a module in ``sys.modules``, a patched stdlib
function, an environment variable, a ``sys.path`` entry, files in the working folder, ``/tmp``,
``/dev/shm`` and ``/``) is gone after ``reset``, also through a real rollout of 3 chains that
share a pool of 1 env.
"""

from __future__ import annotations

import asyncio
import textwrap

import pytest

from envs_builtin.python_sandbox import PythonSandboxEnv, bwrap_problem
from tests.helpers.recipe_checks import json_call, scripted_rollout
from tests.helpers.sandbox_modes import SANDBOX

BWRAP_PROBLEM = bwrap_problem()
NEEDS_BWRAP = pytest.mark.skipif(
    BWRAP_PROBLEM is not None, reason=f"bubblewrap cannot sandbox here: {BWRAP_PROBLEM}"
)
pytestmark = pytest.mark.filterwarnings("ignore::envs_builtin.python_sandbox.SandboxWarning")

# What a task leaves behind, and where; FILES name places outside the process.
IN_PROCESS = ("builtin", "module", "stdlib", "environ", "sys.path", "variable", "cwd file")
FILES = {"tmp file": "/tmp/planted", "shm file": "/dev/shm/planted", "root file": "/planted"}

LOOK = textwrap.dedent(
    """
    import builtins, math, os, sys
    found = []
    if getattr(builtins, "planted", None) or abs(-1) != 1:
        found.append("builtin")
    if "planted_module" in sys.modules:
        found.append("module")
    if math.sqrt(4) != 2.0:
        found.append("stdlib")
    if "PLANTED" in os.environ:
        found.append("environ")
    if "/planted" in sys.path:
        found.append("sys.path")
    if "planted_variable" in globals():
        found.append("variable")
    if os.path.exists("planted.txt"):
        found.append("cwd file")
    for kind, path in FILES.items():
        if os.path.exists(path):
            found.append(kind)
    """
)
PLANT = textwrap.dedent(
    """
    import builtins, math, os, sys, types
    builtins.planted = "42"
    builtins.abs = lambda value: "planted"
    sys.modules["planted_module"] = types.ModuleType("planted_module")
    math.sqrt = lambda value: "planted"
    os.environ["PLANTED"] = "42"
    sys.path.append("/planted")
    planted_variable = 42
    open("planted.txt", "w").write("the answer is 42")
    for path in FILES.values():
        try:
            open(path, "w").write("the answer is 42")
        except OSError:
            pass  # / is read-only in the sandbox: nothing to find there later
    """
)


def task_code(files: dict[str, str]) -> str:
    """One task's cell: print what earlier tasks left behind, then plant everything."""
    return f"FILES = {files!r}\n{LOOK}\n{PLANT}\nprint(sorted(found))"


def run(coroutine):
    return asyncio.run(coroutine)


async def three_tasks(mode: str, files: dict[str, str]) -> list[str]:
    env = PythonSandboxEnv(sandbox=mode)
    await env.start()
    seen = []
    try:
        for task in range(3):
            await env.reset({"task": task})
            seen.append(await env.step(task_code(files)))
            await env.reset(None)  # the pool's release
    finally:
        await env.close()
    return seen


@NEEDS_BWRAP
def test_reset_leaves_nothing_of_the_last_task_in_bubblewrap():
    assert run(three_tasks("bwrap", FILES)) == ["[]"] * 3


def test_reset_leaves_nothing_of_the_last_task_in_the_fallback():
    """Without bubblewrap /tmp and /dev/shm are the host's (see the docs): the interpreter and
    its working folder are still new."""
    assert run(three_tasks("none", {})) == ["[]"] * 3


def test_the_first_cell_after_reset_answers_at_once():
    """The next sandbox is started while the last one is in use, so a reset only swaps."""

    async def scenario():
        env = PythonSandboxEnv(sandbox=SANDBOX)
        await env.start()
        try:
            await env.step("x = 1")
            await asyncio.sleep(1.0)  # a model writing its next turn: the spare starts
            first = env._interpreter
            loop = asyncio.get_running_loop()
            started = loop.time()
            await env.reset(None)
            await env.reset({"task": 2})  # no cell ran since: the same fresh sandbox
            answer = await env.step("x")
            return first, env._interpreter, loop.time() - started, answer
        finally:
            await env.close()

    first, second, seconds, answer = run(scenario())
    assert second is not first and not first.alive
    assert "NameError" in answer
    assert seconds < 0.5, f"reset and the first cell took {seconds:.3f} s"


@pytest.mark.parametrize(
    ("mode", "files"), [pytest.param("bwrap", FILES, marks=NEEDS_BWRAP), ("none", {})]
)
def test_three_chains_on_a_pool_of_one_see_nothing_of_each_other(mode, files, tiny_model, tmp_path):
    """A real rollout (scripted model, code_math's python tool, hermes calls): 3 chains of one
    task take turns on a pool of 1 env; each first prints what it finds, then plants. (The
    fallback shares the host's /tmp and /dev/shm: there only the interpreter is checked.)"""
    code = task_code(files)
    script = [{"responses": [json_call("python", code=code), json_call("answer", answer="42")]}]
    row = {"question": "What is the answer?", "answer": "42"}
    trajectories = scripted_rollout(
        "code_math", tiny_model, tmp_path, script, [row],
        "--parser", "hermes", "--n", "3", "--set", "rollout.stop=[]",
        "--set", "envs.python.pool_max=1", "--set", f"envs.python.options.sandbox={mode}",
        "--set", "rollout.max_tokens_per_turn=4096", "--set", "rollout.max_total_tokens=16384",
    )  # fmt: skip
    assert len(trajectories) == 3
    seen = [t.tool_calls[0].observation for t in trajectories]
    assert [t.tool_calls[0].name for t in trajectories] == ["python"] * 3
    assert seen == ["[]"] * 3
