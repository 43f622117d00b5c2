"""Chaos: an env process killed mid-chain. The chain is an infrastructure failure, and its
group's advantages are those of the same group without it; the model's own bad call still
scores and trains."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import time

import pytest
import torch

from agentfly_cli.algorithms.interfaces import get_advantage_estimator
from agentfly_cli.backends.scripted import ScriptedBackend
from agentfly_cli.chat.parsers import get_parser
from agentfly_cli.chat.templates import ChatTemplate
from agentfly_cli.components.rewards import reward
from agentfly_cli.components.tools import tool
from agentfly_cli.envs.base import EnvSpec
from agentfly_cli.envs.manager import ResourceManager
from agentfly_cli.rollout.engine import RolloutEngine
from agentfly_cli.rollout.infra_failures import infra_failure
from agentfly_cli.settings.algorithm import AlgorithmSettings
from agentfly_cli.settings.envs import EnvPoolSettings
from agentfly_cli.settings.rollout import RolloutSettings
from agentfly_cli.train.tensors.step_batch import StepBatch, trainable
from agentfly_cli.train.update import fill_advantages
from tests.helpers.envs_for_tests import make_proc_env

PROC = EnvSpec(name="proc", factory=make_proc_env, pool_max=8, warm_size=0, start_timeout=30)
PIDS: dict[str, int] = {}  # the env process of each tagged chain, noted by the tool


@tool(env="proc")
async def counter(env, action: str, tag: str = "") -> str:
    """Step the counter env.

    Args:
        action: inc or pid.
        tag: A name to note the env's process id under.
    """
    value = await env.step(action)
    if tag:
        PIDS[tag] = int(value)
    return str(value)


@reward
def right(prediction, target) -> float:
    return 1.0 if str(prediction).strip() == str(target) else 0.0


class ChaosBackend(ScriptedBackend):
    """Replays a script line per sample of the task; before the victim's second turn it kills
    the victim's env process (SIGKILL) and waits until it is gone."""

    def _responses(self, context):
        return self.script[context.sample_index]

    async def generate(self, prompt_ids, params, context=None):
        if context is not None and context.sample_index == VICTIM and context.turn == 1:
            pid = PIDS["victim"]
            os.kill(pid, signal.SIGKILL)
            deadline = time.monotonic() + 10
            while _alive(pid) and time.monotonic() < deadline:
                await asyncio.sleep(0.02)
        return await super().generate(prompt_ids, params, context)


def _alive(pid: int) -> bool:
    """Running (not gone, not a zombie); the pool's own watcher reaps it."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def call(name: str, **arguments) -> str:
    return "<tool_call>\n" + json.dumps({"name": name, "arguments": arguments}) + "\n</tool_call>"


VICTIM = 2
SCRIPT = [
    [call("counter", action="inc"), "1"],  # right: 1
    ["0"],  # wrong: 0
    [call("counter", action="pid", tag="victim"), call("counter", action="inc"), "0"],
    [call("counter", action="inc"), "1"],  # right: 1
    [call("nope", x=1), "5"],  # the model's own bad call, then a wrong answer: 0
]


@pytest.fixture(scope="module")
def group(tiny_model):
    chat = ChatTemplate.load(str(tiny_model))
    engine = RolloutEngine(
        ChaosBackend(SCRIPT, chat), chat, get_parser("hermes"), [counter], right,
        RolloutSettings(n=len(SCRIPT), max_turns=4),
        env_specs={"proc": PROC},
        env_manager=ResourceManager({"proc": PROC}, {"proc": EnvPoolSettings(provider="process")}),
    )  # fmt: skip

    async def main():
        async with engine.envs:
            return await engine.run([{"question": "Count once.", "target": "1"}])

    return asyncio.run(asyncio.wait_for(main(), 120))


def advantages(trajectories, **settings):
    """Per trajectory kept, its advantage (the first trained token's), by sample index."""
    algo = AlgorithmSettings(**settings)
    metrics: dict[str, float] = {}
    usable = trainable(trajectories, algo, metrics)
    batch = StepBatch.of(usable, algo)
    fill_advantages(batch, metrics, get_advantage_estimator("grpo"), algo, reference=False)
    first = batch.mask.float().argmax(dim=1)
    values = batch.advantages[torch.arange(len(usable)), first].tolist()
    return {t.sample_index: v for t, v in zip(usable, values, strict=True)}, metrics


def test_the_killed_chain_is_an_env_failure(group):
    by_sample = {t.sample_index: t for t in group}
    victim = by_sample[VICTIM]
    assert [c.status for c in victim.tool_calls] == ["ok", "error"]
    assert victim.tool_calls[1].info["exception"] == "EnvProcessDied"
    assert infra_failure(victim) == "env_died"
    assert victim.reward == 0.0  # what it would have trained on
    assert [infra_failure(by_sample[s]) for s in (0, 1, 3, 4)] == [None] * 4


def test_the_groups_advantages_equal_those_without_the_killed_chain(group):
    got, metrics = advantages(group)
    others = [t for t in group if t.sample_index != VICTIM]
    expected, _ = advantages(others)
    assert sorted(got) == [0, 1, 3, 4]
    assert got == pytest.approx(expected, abs=1e-7)
    assert metrics["infra/failures/env_died"] == 1.0
    assert metrics["infra/dropped_groups"] == 0.0
    # counted as a zero reward it would bias the group: the right answers get less credit
    biased, off = advantages(group, exclude_infra_failures=False)
    assert VICTIM in biased and biased[0] > got[0] + 0.05
    assert off["infra/failures/env_died"] == 1.0


def test_a_bad_tool_call_still_scores_and_trains(group):
    bad = next(t for t in group if t.sample_index == 4)
    assert bad.tool_calls[0].error_kind == "unknown_tool" and bad.reward == 0.0
    got, _ = advantages(group)
    assert got[4] < 0  # trained on, with the group's (negative) advantage of a wrong answer


def test_a_group_left_too_small_is_dropped(group):
    pair = [t for t in group if t.sample_index in (0, VICTIM)]
    metrics: dict[str, float] = {}
    assert trainable(pair, AlgorithmSettings(), metrics) == []
    assert metrics["infra/dropped_groups"] == 1.0
    kept = trainable(pair, AlgorithmSettings(min_group_size=1), {})
    assert [t.sample_index for t in kept] == [0]


def test_an_env_that_dies_on_reset_is_an_env_start_failure(tiny_model):
    chat = ChatTemplate.load(str(tiny_model))
    script = [[call("counter", action="inc"), "1"]]
    engine = RolloutEngine(
        ScriptedBackend(script, chat), chat, get_parser("hermes"), [counter], right,
        RolloutSettings(n=1, max_turns=3),
        env_specs={"proc": PROC},
        env_manager=ResourceManager({"proc": PROC}, {"proc": EnvPoolSettings(provider="process")}),
    )  # fmt: skip

    async def main():
        async with engine.envs:
            return await engine.run([{"question": "Count.", "target": "1", "crash_on_reset": 1}])

    [trajectory] = asyncio.run(asyncio.wait_for(main(), 120))
    assert trajectory.tool_calls[0].status == "error"
    assert "could not run: EnvStartError" in trajectory.tool_calls[0].observation
    assert trajectory.reward == 1.0  # it answered right anyway; the reward is not trusted
    assert infra_failure(trajectory) == "env_start"
