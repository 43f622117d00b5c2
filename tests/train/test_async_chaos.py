"""Chaos for async rollouts: the env server dies mid-run (SIGKILL, as an OOM killer would).

The producer keeps rolling out beside the trainer: chains that held a lease record the lost
connection as their tool calls' error observations, later chains record that the server cannot
be reached, and every step still gets its groups, within seconds: failures are data, never a
hang. (The backend dying mid-run and a weight push that never drains are in
``test_async_training.py``.)
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import time

import pytest
from typer.testing import CliRunner

from agentfly_cli.backends.scripted import ScriptedBackend
from agentfly_cli.cli.app import build_app
from agentfly_cli.envs.manager import ResourceManager
from agentfly_cli.envs.state import pid_alive
from agentfly_cli.settings.envs import EnvPoolSettings
from agentfly_cli.settings.rollout import RolloutSettings
from agentfly_cli.train.steps.async_rollouts import RolloutProducer
from envs_builtin.scratchpad import SCRATCHPAD, notes_list, notes_read, notes_write


def call(name: str, **arguments) -> str:
    return "<tool_call>\n" + json.dumps({"name": name, "arguments": arguments}) + "\n</tool_call>"


TURNS = [call("notes_write", key="x", text="t"), call("notes_read", key="x"), call("notes_list")]


class EveryTaskTheSame(ScriptedBackend):
    """Every chain writes, reads and lists a note, then stops; 20 ms a turn, as a model
    would take some time."""

    def _responses(self, context):
        return [*TURNS, "done"]

    async def generate(self, prompt_ids, params, context=None):
        await asyncio.sleep(0.02)
        return await super().generate(prompt_ids, params, context)


@pytest.fixture
def state_dir(tmp_path, monkeypatch):
    folder = tmp_path / "state"
    monkeypatch.setenv("AGENTFLY_STATE_DIR", str(folder))
    return folder


def test_an_env_server_killed_mid_run_becomes_error_observations_not_a_hang(state_dir, tiny_model):
    from agentfly_cli.chat.parsers import get_parser
    from agentfly_cli.chat.templates import ChatTemplate
    from agentfly_cli.rollout.engine import RolloutEngine

    up = CliRunner().invoke(build_app(), ["env", "up", "scratchpad", "--size", "2", "--json"])
    assert up.exit_code == 0, up.output
    server = json.loads(up.output)
    chat = ChatTemplate.load(str(tiny_model))
    backend = EveryTaskTheSame([], chat)
    manager = ResourceManager(
        {"scratchpad": SCRATCHPAD}, {"scratchpad": EnvPoolSettings(address="scratchpad")}
    )
    engine = RolloutEngine(
        backend, chat, get_parser("hermes"), [notes_list, notes_write, notes_read], None,
        RolloutSettings(n=4, max_turns=4, seed=0), env_manager=manager,
    )  # fmt: skip

    async def run_batch(batch, picked, on_finish):
        return await engine.run(
            [row for _, row in picked], batch_id=f"s{batch}", task_offset=picked[0][0],
            on_finish=on_finish,
        )  # fmt: skip

    position = 0

    def take_tasks():
        nonlocal position
        position += 2
        return [(position - 2 + i, {"question": f"remember {position - 2 + i}"}) for i in (0, 1)]

    async def train(steps: int):
        """The trainer's side at max_staleness 1; the env server dies after step 1."""
        producer = RolloutProducer(
            run_batch, take_tasks, tasks_per_step=2, n=4, max_staleness=1, wait_timeout_s=20
        )
        taken = []
        async with manager:
            producer.start()
            try:
                for step in range(1, steps + 1):
                    taken.append(await producer.take(2))
                    if step == 1:  # batch 2 may be rolling out now, holding leases
                        os.kill(server["pid"], signal.SIGKILL)
                    await asyncio.sleep(0.05)  # "the update"
                    backend.policy_version = step  # what a weight push does
                    producer.set_version(step)
            finally:
                await producer.close()
        return taken

    started = time.perf_counter()
    try:
        taken = asyncio.run(asyncio.wait_for(train(4), 60))
    finally:
        if pid_alive(server["pid"]):
            os.kill(server["pid"], signal.SIGKILL)
    assert time.perf_counter() - started < 30

    def observations(step: int) -> list[list[str]]:
        return [[c.observation for c in t.tool_calls] for t in taken[step - 1].trajectories]

    assert observations(1) == [["saved note 'x' (1 characters)", "t", "x"]] * 8
    address = server["address"]
    for step in (2, 3, 4):  # every group still arrives, each chain to its end
        trajectories = taken[step - 1].trajectories
        assert len(trajectories) == 8 and not any(t.error for t in trajectories)
    # from step 3 on, every chain started after the kill: none of its calls reached an env
    for step in (3, 4):
        for calls in observations(step):
            assert len(calls) == 3
            for observation in calls:
                assert "ServerGone" in observation and address in observation, observation
                assert "cannot reach the pool server" in observation
    assert not pid_alive(server["pid"])
