"""Agent programs (``--agent``) cannot take a run down: a hung sync agent, an async one that
blocks its loop, ``sys.exit()``, ``KeyboardInterrupt``, NaN, ``10**400`` and a result whose
``str()`` raises are each a recorded failure of that episode only, and the run ends."""

from __future__ import annotations

import asyncio
import json
import math
import os
import signal
import subprocess
import sys
import threading
import time

import pytest
from typer.testing import CliRunner

from agentfly_cli.cli.app import build_app
from agentfly_cli.errors import UserError
from agentfly_cli.rollout.agent_calls import AgentCaller, AgentFailed, failure_of, plain
from agentfly_cli.rollout.outcome import check_some_chain_ran
from agentfly_cli.trajectory import Trajectory, read_trajectories
from tests.train.test_trainer import ON_CPU, recipe  # noqa: F401 (fixture)

pytest.importorskip("openai", reason="the openai SDK is a dev dependency")

# Each agent asks the model once, then fails on task 0 ("What is 0 + 1?") and returns 1.0 on
# the others. Hung ones wait for the file named by AGENT_RELEASE, so the test lets them go.
AGENTS = """
import asyncio
import math
import os
import sys
import time

from openai import OpenAI


def ask(task, base_url):
    client = OpenAI(base_url=base_url, api_key="none", max_retries=0)
    client.chat.completions.create(
        model="m", messages=[{"role": "user", "content": task["question"]}], max_tokens=2
    )


def failing(task):
    return task["question"].startswith("What is 0 ")


def wait_for_release():
    flag = os.environ["AGENT_RELEASE"]
    open(flag + ".started", "a").close()
    while not os.path.exists(flag):
        time.sleep(0.05)


def hangs(task, base_url):
    ask(task, base_url)
    if failing(task):
        wait_for_release()
    return 1.0


async def blocks_its_loop(task, base_url):
    await asyncio.to_thread(ask, task, base_url)
    if failing(task):
        wait_for_release()  # sync code inside async def: no await, so no cancellation lands
    return 1.0


async def awaits_forever(task, base_url):
    await asyncio.to_thread(ask, task, base_url)
    if failing(task):
        await asyncio.sleep(1000)  # cancellable: its thread ends at the deadline
    return 1.0


async def hangs_in_a_worker(task, base_url):
    await asyncio.to_thread(ask, task, base_url)
    if failing(task):
        await asyncio.to_thread(wait_for_release)
    return 1.0


def exits(task, base_url):
    ask(task, base_url)
    if failing(task):
        sys.exit(3)
    return 1.0


def interrupts(task, base_url):
    ask(task, base_url)
    if failing(task):
        raise KeyboardInterrupt
    return 1.0


def nan(task, base_url):
    ask(task, base_url)
    return math.nan if failing(task) else 1.0


def nan_on_odd(task, base_url):
    ask(task, base_url)
    return math.nan if int(task["question"].split()[2]) % 2 else 1.0


def huge(task, base_url):
    ask(task, base_url)
    return 10**400 if failing(task) else 1.0


class NoText:
    def __str__(self):
        raise ValueError("no text here")


def unprintable(task, base_url):
    ask(task, base_url)
    return NoText() if failing(task) else 1.0
"""

FAST = ("agent.timeout_s=4", "agent.grace_s=0.3")


@pytest.fixture
def agents(tmp_path, monkeypatch):
    """The agents' file; hung agents are released when the test ends."""
    path = tmp_path / "failing_agents.py"
    path.write_text(AGENTS)
    release = tmp_path / "release"
    monkeypatch.setenv("AGENT_RELEASE", str(release))
    yield path
    release.touch()


def rollout_args(recipe, agent: str, out, *sets: str) -> list[str]:  # noqa: F811
    fields = recipe["fields"]
    args = ["rollout", "calculator", "--model", fields["model"], "--agent", agent,
            "--data", fields["data.path"], "--reward", fields["reward"], "--limit", "2",
            "--out", str(out)]  # fmt: skip
    for item in [*recipe["sets"], *ON_CPU, *FAST, *sets]:
        args += ["--set", item]
    return args


def check_only_task_0_failed(out, kind: str, says: str) -> None:
    """Task 0's three episodes failed with ``kind``, reward 0; task 1's three scored 1.0."""
    trajectories = read_trajectories(out)
    assert len(trajectories) == 2 * 3
    failed = [t for t in trajectories if t.task_index == 0]
    others = [t for t in trajectories if t.task_index == 1]
    for trajectory in failed:
        assert trajectory.error and trajectory.error.startswith(f"{kind}: "), trajectory.error
        assert says in trajectory.error
        assert trajectory.reward == 0.0 and trajectory.finish_reason == "abort"
        assert trajectory.reward_extras["error"] == trajectory.error
    for trajectory in others:
        assert trajectory.error is None and trajectory.reward == 1.0
        assert trajectory.finish_reason == "answer" and trajectory.num_turns == 1


@pytest.mark.timeout(120)
@pytest.mark.parametrize(
    ("agent", "kind", "says"),
    [
        ("hangs", "AgentTimeout", "its thread could not be stopped and was abandoned"),
        ("blocks_its_loop", "AgentTimeout", "its thread could not be stopped and was abandoned"),
        ("exits", "AgentExit", "the agent called sys.exit(3)"),
        ("interrupts", "AgentInterrupt", "the agent raised KeyboardInterrupt"),
        ("nan", "AgentBadResult", "the agent returned nan, not a finite reward"),
        ("huge", "AgentBadResult", "int too large to convert to float"),
        ("unprintable", "AgentBadResult", "a NoText whose str() raised ValueError: no text here"),
    ],
)
def test_a_failing_agent_fails_only_its_own_episodes(recipe, agents, tmp_path, agent, kind, says):  # noqa: F811
    out = tmp_path / "roll.jsonl"
    result = CliRunner().invoke(
        build_app(), [*rollout_args(recipe, f"{agents}:{agent}", out), "--json"]
    )
    assert result.exit_code == 0, result.output
    check_only_task_0_failed(out, kind, says)
    summary = json.loads(result.stdout)["summary"]
    assert summary["finish_reasons"] == {"answer": 3, "abort": 3}  # counted as aborted chains
    assert summary["aborted"][0].startswith(f"{kind}: ")
    assert summary["reward_mean"] == 0.5  # no NaN reaches the numbers


@pytest.mark.timeout(120)
def test_hung_agents_do_not_keep_later_episodes_from_running(recipe, agents, tmp_path):  # noqa: F811
    out = tmp_path / "roll.jsonl"
    args = rollout_args(recipe, f"{agents}:hangs", out, "agent.concurrency=1")
    result = CliRunner().invoke(build_app(), args)  # one slot: the hung ones give it back
    assert result.exit_code == 0, result.output
    check_only_task_0_failed(out, "AgentTimeout", "was abandoned")


@pytest.mark.timeout(120)
def test_a_cancellable_async_agent_is_timed_out_without_abandoning_its_thread(
    recipe,  # noqa: F811
    agents,
    tmp_path,
):
    out = tmp_path / "roll.jsonl"
    result = CliRunner().invoke(build_app(), rollout_args(recipe, f"{agents}:awaits_forever", out))
    assert result.exit_code == 0, result.output
    check_only_task_0_failed(out, "AgentTimeout", "within 4 s (agent.timeout_s)")
    assert not any("abandoned" in (t.error or "") for t in read_trajectories(out))


@pytest.mark.timeout(120)
def test_more_hung_agents_than_max_abandoned_fail_the_run_with_one_line(recipe, agents, tmp_path):  # noqa: F811
    args = rollout_args(recipe, f"{agents}:hangs", tmp_path / "roll.jsonl", "agent.max_abandoned=1")
    result = CliRunner().invoke(build_app(), args)
    assert result.exit_code == 2, result.output
    assert "more than agent.max_abandoned = 1" in result.output
    assert "raise agent.max_abandoned" in result.output and "Traceback" not in result.output


@pytest.fixture
def run_cli():
    """Starts ``agentfly ARGS`` in a subprocess; one still running at the end is killed."""
    started: list[subprocess.Popen] = []

    def start(args: list[str]) -> subprocess.Popen:
        env = {**os.environ, "HF_HUB_OFFLINE": "1", "AGENTFLY_DEBUG": ""}
        command = [sys.executable, "-m", "agentfly_cli", *args]
        process = subprocess.Popen(
            command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        started.append(process)
        return process

    yield start
    for process in started:
        if process.poll() is None:
            process.kill()
            process.wait()


@pytest.mark.timeout(180)
@pytest.mark.parametrize(
    ("agent", "says"),
    [
        ("hangs", "its thread could not be stopped and was abandoned"),
        ("hangs_in_a_worker", "within 8 s (agent.timeout_s)"),  # cancelled; its worker runs on
    ],
)
def test_the_cli_exits_cleanly_while_hung_agent_threads_still_run(
    recipe,  # noqa: F811
    agents,
    tmp_path,
    run_cli,
    agent,
    says,
):
    out = tmp_path / "roll.jsonl"
    started = time.monotonic()
    process = run_cli(rollout_args(recipe, f"{agents}:{agent}", out, "agent.timeout_s=8"))
    stdout, stderr = process.communicate(timeout=150)  # hung threads are never released here
    assert process.returncode == 0, stderr
    assert "Traceback" not in stderr and "Traceback" not in stdout
    assert time.monotonic() - started < 150
    check_only_task_0_failed(out, "AgentTimeout", says)


@pytest.mark.timeout(180)
def test_a_real_ctrl_c_still_stops_a_run_with_hung_agents(recipe, agents, tmp_path, run_cli):  # noqa: F811
    out = tmp_path / "roll.jsonl"
    process = run_cli(rollout_args(recipe, f"{agents}:hangs", out, "agent.timeout_s=600"))
    marker = tmp_path / "release.started"
    deadline = time.monotonic() + 120
    while not marker.exists() and process.poll() is None and time.monotonic() < deadline:
        time.sleep(0.1)
    assert marker.exists(), process.communicate(timeout=30)
    process.send_signal(signal.SIGINT)
    stdout, stderr = process.communicate(timeout=60)
    assert process.returncode == 130, stderr
    assert "interrupted" in stderr and "Traceback" not in stderr


@pytest.mark.parametrize(
    ("result", "expected"),
    [(None, None), (0.25, 0.25), (3, 3.0), (True, "True"), ("7", "7"), ([1], "[1]")],
)
def test_plain_results_are_a_reward_an_answer_or_nothing(result, expected):
    value = plain(result)
    assert value == expected and type(value) is type(expected)


@pytest.mark.parametrize(
    ("result", "says"),
    [
        (float("inf"), "the agent returned inf, not a finite reward"),
        (-float("nan"), "the agent returned nan, not a finite reward"),
        (-(10**400), "int too large to convert to float"),
    ],
)
def test_numbers_that_are_no_reward_are_bad_results(result, says):
    with pytest.raises(AgentFailed, match="AgentBadResult") as raised:
        plain(result)
    assert says in str(raised.value)


def test_what_an_agent_raises_is_named_even_when_its_text_raises():
    class Sneaky(Exception):
        def __str__(self):
            raise RuntimeError("no")

    assert str(failure_of(SystemExit("bye"))) == "AgentExit: the agent called sys.exit(bye)"
    named = "AgentError: Sneaky: <Sneaky whose str() raised RuntimeError>"
    assert str(failure_of(Sneaky())) == named


@pytest.mark.timeout(180)
def test_training_on_an_agent_that_returns_nan_counts_the_episodes_and_keeps_the_loss_finite(
    recipe,  # noqa: F811
    agents,
    tmp_path,
):
    run_dir = tmp_path / "run"
    fields = recipe["fields"]
    args = ["train", "calculator", "--model", fields["model"], "--agent", f"{agents}:nan_on_odd",
            "--data", fields["data.path"], "--reward", fields["reward"], "--out", str(run_dir),
            "--quiet", "--steps", "1", "--set", "trainer.shuffle=false"]  # fmt: skip
    for item in [*recipe["sets"], *ON_CPU, *FAST]:
        args += ["--set", item]
    result = CliRunner().invoke(build_app(), args)
    assert result.exit_code == 0, result.output
    (line,) = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert line["finish/abort"] == 0.5  # the odd task's three episodes of six: counted
    assert line["reward/mean"] == 0.5  # 0 for those, not NaN
    trajectories = read_trajectories(run_dir / "trajectories" / "step-000001.jsonl")
    failed = [t for t in trajectories if t.error]
    assert len(failed) == 3 and all(t.error.startswith("AgentBadResult: ") for t in failed)
    assert all(math.isfinite(v) for v in line.values() if isinstance(v, float))


@pytest.mark.parametrize(
    ("error", "fix"),
    [
        ("AgentExit: the agent called sys.exit(3)", "called sys.exit(): return from it"),
        ("AgentInterrupt: the agent raised KeyboardInterrupt", "raise an ordinary exception"),
        ("AgentBadResult: the agent returned nan, not a finite reward", "return a finite number"),
    ],
)
def test_a_run_whose_every_agent_failed_names_the_fix(error, fix):
    chains = [Trajectory(finish_reason="abort", error=error) for _ in range(2)]
    with pytest.raises(UserError) as raised:
        check_some_chain_ran(chains)
    assert error in str(raised.value) and fix in str(raised.value)


def call_agent(fn, *, timeout_s: float = 2.0, grace_s: float = 0.2, max_abandoned: int = 4):
    """``fn``'s plain result through an :class:`AgentCaller`, or its :class:`AgentFailed`."""
    caller = AgentCaller(fn, timeout_s, grace_s, max_abandoned)

    async def main():
        try:
            return await caller.call({}, "http://x/v1")
        except AgentFailed as failed:
            return failed

    return asyncio.run(main()), caller


@pytest.mark.parametrize(
    ("raised", "kind"), [(SystemExit(4), "AgentExit"), (KeyboardInterrupt(), "AgentInterrupt")]
)
def test_an_async_agent_that_exits_or_interrupts_is_its_own_failure(raised, kind):
    async def agent(task, base_url):
        await asyncio.sleep(0)
        raise raised

    outcome, _ = call_agent(agent)
    assert isinstance(outcome, AgentFailed) and outcome.kind == kind


@pytest.mark.timeout(30)
def test_an_abandoned_thread_is_counted_until_it_ends():
    release = threading.Event()
    outcome, caller = call_agent(lambda task, url: release.wait(20), timeout_s=0.2)
    assert isinstance(outcome, AgentFailed) and "was abandoned" in str(outcome)
    assert caller.abandoned == 1 and caller.abandoned_total == 1
    release.set()
    for _ in range(100):
        if caller.abandoned == 0:
            break
        time.sleep(0.02)
    assert caller.abandoned == 0 and caller.abandoned_total == 1  # it ended: no longer held


@pytest.mark.timeout(30)
def test_cancelling_the_run_cancels_an_async_agent_and_is_not_its_failure():
    finished = threading.Event()

    async def agent(task, base_url):
        try:
            await asyncio.sleep(20)
        finally:
            finished.set()

    async def main():
        call = asyncio.ensure_future(AgentCaller(agent, 20, 0.2, 4).call({}, "http://x/v1"))
        await asyncio.sleep(0.2)
        call.cancel()
        with pytest.raises(asyncio.CancelledError):
            await call

    asyncio.run(main())
    assert finished.wait(5)  # the agent's own loop was told to stop
