"""ReMax end to end on the tiny model: each step rolls one greedy (temperature 0) chain per task
out beside its ``rollout.n`` samples, scores it, keeps it out of the loss and of ``reward/*``,
and trains the samples on ``reward - greedy reward``; sync and async alike."""

from __future__ import annotations

import json

import pytest
import torch

from agentfly_cli.recipes.loader import load_config
from agentfly_cli.train.trainer import Trainer
from agentfly_cli.trajectory import read_trajectories

REWARD_SOURCE = """
def digits(prediction, trajectory=None, **fields):
    text = "".join(m.get("content") or "" for m in trajectory.messages if m["role"] == "assistant")
    return sum(c.isdigit() for c in text) / max(len(text), 1)
"""


class Recording(Trainer):
    """Keeps each step's prepared batch."""

    def _prepare(self, trajectories, metrics):
        batch = super()._prepare(trajectories, metrics)
        self.batches = [*getattr(self, "batches", []), batch]
        return batch


@pytest.fixture
def config(tmp_path, tiny_model):
    data = tmp_path / "tasks.jsonl"
    rows = [{"question": f"What is {a} + {a + 1}?", "answer": str(2 * a + 1)} for a in range(8)]
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    (tmp_path / "reward.py").write_text(REWARD_SOURCE)

    def make(*sets):
        return load_config(
            "calculator",
            [
                "rollout.n=3",
                "rollout.temperature=1.0",
                "rollout.max_tokens_per_turn=6",
                "rollout.concurrency=1",
                "trainer.tasks_per_step=2",
                "trainer.steps=1",
                "trainer.backend.lr=0.003",
                "trainer.telemetry.sinks=[jsonl]",
                "trainer.algorithm.advantage=remax",
                *sets,
            ],
            model=str(tiny_model),
            reward=f"{tmp_path / 'reward.py'}:digits",
            **{"data.path": str(data)},
        )

    return make


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_remax_trains_the_samples_on_their_reward_minus_the_greedy_one(config, tmp_path, mode):
    run_dir = tmp_path / mode
    trainer = Recording(config(f"trainer.mode={mode}"), run_dir=run_dir, console=False)
    last = trainer.fit().history[-1]
    [chains] = [read_trajectories(p) for p in sorted((run_dir / "trajectories").glob("step-*"))]
    greedy = {t.group_id: t for t in chains if t.meta.get("greedy")}
    sampled = [t for t in chains if not t.meta.get("greedy")]
    assert len(greedy) == 2 and len(sampled) == 6  # 2 tasks: 3 samples and 1 greedy chain each
    assert all(t.sample_index == 3 for t in greedy.values())
    [batch] = trainer.batches
    assert [row.group for row in batch.rows] == [t.group_id for t in sampled]  # greedy untrained
    assert last["train/trajectories"] == 6
    mean = sum(t.reward for t in sampled) / 6
    assert last["reward/mean"] == pytest.approx(mean)  # the samples only
    assert last["reward/greedy_mean"] == pytest.approx(sum(t.reward for t in greedy.values()) / 2)
    expected = torch.tensor([t.reward - greedy[t.group_id].reward for t in sampled])
    torch.testing.assert_close(
        batch.advantages, (expected[:, None] * batch.mask).to(batch.advantages.dtype)
    )
    assert last["adv/missing_baseline"] == 0.0
    assert any(abs(float(a)) > 0 for a in expected) and last["grad_norm"] > 0
