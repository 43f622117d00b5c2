"""Skipping the passes of zero-advantage rows (trainer.skip_zero_advantage) leaves the update
as it was: same weights after a step, within float rounding, and bit-exact when every row
is skipped (AdamW still steps)."""

from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import load_file

from agentfly_cli.recipes.loader import load_config
from agentfly_cli.train.checkpoint import CheckpointManager
from agentfly_cli.train.trainer import Trainer

# Task "What is A + ...": groups of even A get one reward for every chain (no spread, zero
# advantages); odd A get the share of digits sampled, which differs between chains.
REWARD_SOURCE = """
def half_flat(prediction, trajectory=None, question="", **fields):
    if int(question.split()[2]) % 2 == 0:
        return 0.5
    text = "".join(m.get("content") or "" for m in trajectory.messages if m["role"] == "assistant")
    return sum(c.isdigit() for c in text) / max(len(text), 1)


def flat(prediction, trajectory=None, **fields):
    return 1.0
"""


@pytest.fixture
def fields(tmp_path, tiny_model):
    data = tmp_path / "tasks.jsonl"
    rows = [{"question": f"What is {a} + {a + 1}?", "answer": str(2 * a + 1)} for a in range(8)]
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    (tmp_path / "rewards.py").write_text(REWARD_SOURCE)
    return {"model": str(tiny_model), "data.path": str(data)}


def train_one_step(fields, tmp_path, name: str, reward: str, *sets: str):
    config = load_config(
        "calculator",
        [
            "rollout.n=3",
            "rollout.max_tokens_per_turn=6",
            "rollout.concurrency=1",  # one request at a time: sampling is reproducible
            "trainer.tasks_per_step=4",
            "trainer.shuffle=false",  # step 1 draws A = 0, 1, 2, 3: two flat groups
            "trainer.steps=1",
            "trainer.backend.lr=0.003",
            "trainer.backend.device=cpu",
            "backend.device=cpu",
            "trainer.telemetry.sinks=[jsonl]",
            *sets,
        ],
        reward=f"{tmp_path / 'rewards.py'}:{reward}",
        **fields,
    )
    run_dir = tmp_path / name
    result = Trainer(config, run_dir=run_dir, console=False).fit()
    folder = CheckpointManager(run_dir).path(1) / "model"
    return result.history[-1], load_file(str(folder / "model.safetensors"))


def test_skipping_flat_groups_gives_the_same_update(fields, tmp_path):
    skipped, after_skip = train_one_step(fields, tmp_path, "skip", "half_flat")
    full, after_full = train_one_step(
        fields, tmp_path, "full", "half_flat", "trainer.skip_zero_advantage=false"
    )
    assert skipped["reward/mean"] == full["reward/mean"]  # the same rollouts
    assert skipped["train/skipped_zero_advantage"] >= 6  # the two flat groups, 3 chains each
    assert skipped["train/skipped_zero_advantage"] < 12  # the odd groups are trained
    assert "train/skipped_zero_advantage" not in full
    assert skipped["grad_norm"] == pytest.approx(full["grad_norm"], rel=1e-4)
    assert skipped["loss/policy"] == pytest.approx(full["loss/policy"], rel=1e-4, abs=1e-7)
    from transformers import AutoModelForCausalLM

    initial = AutoModelForCausalLM.from_pretrained(fields["model"]).state_dict()
    moved = [n for n, t in after_full.items() if not torch.equal(t, initial[n])]
    assert moved, "the step changed no weight: the comparison would prove nothing"
    for name, tensor in after_full.items():
        torch.testing.assert_close(after_skip[name], tensor, rtol=1e-5, atol=1e-6, msg=name)


def test_a_step_with_every_row_skipped_still_steps_the_optimizer(fields, tmp_path):
    skipped, after_skip = train_one_step(fields, tmp_path, "skip", "flat")
    full, after_full = train_one_step(
        fields, tmp_path, "full", "flat", "trainer.skip_zero_advantage=false"
    )
    assert skipped["train/skipped_zero_advantage"] == 12
    assert skipped["train/optimizer_steps"] == full["train/optimizer_steps"] == 1
    assert skipped["grad_norm"] == full["grad_norm"] == 0
    assert "entropy" in full and "entropy" not in skipped  # no row was forwarded
    for name, tensor in after_full.items():  # AdamW's weight decay moved both alike
        assert torch.equal(after_skip[name], tensor), name


@pytest.mark.parametrize(
    "sets",
    [
        ["trainer.algorithm.entropy_coef=0.01"],
        ["trainer.algorithm.kl_coef=0.1"],
        ["trainer.algorithm.advantage=gae"],
    ],
    ids=["entropy-bonus", "kl-loss", "value-head"],
)
def test_rows_are_kept_where_another_loss_term_reads_them(fields, tmp_path, sets):
    last, _ = train_one_step(fields, tmp_path, "run", "half_flat", *sets)
    assert "train/skipped_zero_advantage" not in last
    assert last["train/trajectories"] == 12
