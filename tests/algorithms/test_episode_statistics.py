"""Episode-level statistics: an agent episode of several segments counts once in its
group's mean and std, and each of its segments' tokens gets the episode's advantage."""

from __future__ import annotations

import math

import pytest
import torch

from agentfly_cli.algorithms.interfaces import get_advantage_estimator
from agentfly_cli.settings.algorithm import AlgorithmSettings
from agentfly_cli.train.tensors.step_batch import StepBatch
from agentfly_cli.train.update import fill_advantages
from agentfly_cli.trajectory import Trajectory

ROOT2 = math.sqrt(0.5)  # (1 - 0.5) / the unbiased std of [1, 0]


def segment(episode: str, k: int, of: int, reward: float, action: int) -> Trajectory:
    """Segment ``k`` of ``of`` of an agent episode: a prompt and one sampled turn."""
    t = Trajectory(group_id="g", reward=reward, meta={"episode": episode, "segment": k,
                                                      "segments": of})  # fmt: skip
    t.append("prompt", [1, 2, 3 + k], sampled=False)
    t.append("assistant", [action, action + 1], sampled=True)
    return t


def advantages(trajectories: list[Trajectory], name: str, **settings) -> torch.Tensor:
    algo = AlgorithmSettings(advantage=name, **settings)
    batch = StepBatch.of(trajectories, algo)
    fill_advantages(batch, {}, get_advantage_estimator(name), algo, reference=False)
    return batch.advantages


@pytest.mark.parametrize(
    ("name", "settings", "win"),
    [("grpo", {}, ROOT2), ("rloo", {}, 1.0), ("gigpo", {"turn_weight": 0.0}, ROOT2)],
)
def test_an_episode_of_three_segments_counts_once_in_its_group(name, settings, win):
    """Won in 3 segments vs lost in 1: as if each were one trajectory (rewards [1, 0])."""
    won = [segment("e1", k, 3, 1.0, 10 + 2 * k) for k in range(3)]
    lost = [segment("e2", 0, 1, 0.0, 20)]
    out = advantages([*won, *lost], name, **settings)
    for row in range(3):  # every segment's tokens get the episode's advantage
        assert out[row].tolist() == pytest.approx([win, win], abs=1e-5), (name, row)
    assert out[3, 0].item() == pytest.approx(-win, abs=1e-5)


def test_eval_and_step_metrics_count_an_episode_once():
    """pass@k, mean@n and the step's reward statistics are over episodes: task 0 has two
    episodes of 3 and 1 segments (won, lost), task 1 two of one segment (both won)."""
    from agentfly_cli.rollout.summary import evaluate, summarize
    from agentfly_cli.telemetry.metrics import rollout_metrics

    task0 = [*(segment("e1", k, 3, 1.0, 10) for k in range(3)), segment("e2", 0, 1, 0.0, 20)]
    task1 = [segment("e3", 0, 1, 1.0, 30), segment("e4", 0, 1, 1.0, 40)]
    for t in task1:
        t.task_index, t.group_id = 1, "h"
    results = evaluate([*task0, *task1])
    assert [row["n"] for row in results["tasks"]] == [2, 2]
    assert [row["mean@2"] for row in results["tasks"]] == [0.5, 1.0]
    assert results["overall"]["pass@1"] == 0.75
    metrics = rollout_metrics([*task0, *task1])
    assert metrics["reward/mean"] == 0.75 and metrics["reward/std"] == pytest.approx(0.4330127)
    assert metrics["rollout/trajectories"] == 6.0 and metrics["rollout/episodes"] == 4.0
    assert summarize([*task0, *task1])["reward_mean"] == 0.75
