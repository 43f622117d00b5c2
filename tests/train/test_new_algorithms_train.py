"""Each new estimator and policy loss trains through the real trainer on the tiny model (two
steps of the calculator recipe): the weights move and the loss's own metrics are logged."""

from __future__ import annotations

import json

import pytest

from agentfly_cli.recipes.loader import load_config
from agentfly_cli.train.trainer import Trainer

REWARD_SOURCE = """
def digits(prediction, trajectory=None, **fields):
    text = "".join(m.get("content") or "" for m in trajectory.messages if m["role"] == "assistant")
    return sum(c.isdigit() for c in text) / max(len(text), 1)
"""


@pytest.mark.parametrize(
    ("advantage", "loss", "sets", "metric"),
    [
        ("opo", "cispo", [], "clip_frac"),
        ("gpg", "gpg", [], "adv/gpg_alpha"),
        ("grpo", "sapo", [], "gate_weight"),
        ("rloo", "clip_cov", ["trainer.algorithm.clip_cov.low=-10"], "cov_detached_frac"),
        ("grpo", "kl_cov", ["trainer.epochs=2"], "cov_penalised_frac"),
    ],
)
def test_the_new_algorithms_train(tmp_path, tiny_model, advantage, loss, sets, metric):
    data = tmp_path / "tasks.jsonl"
    rows = [{"question": f"What is {a} + {a + 1}?", "answer": str(2 * a + 1)} for a in range(8)]
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    (tmp_path / "reward.py").write_text(REWARD_SOURCE)
    config = load_config(
        "calculator",
        [
            "rollout.n=3",
            "rollout.max_tokens_per_turn=6",
            "rollout.concurrency=1",
            "trainer.tasks_per_step=2",
            "trainer.steps=2",
            "trainer.backend.lr=0.003",
            "trainer.telemetry.sinks=[jsonl]",
            f"trainer.algorithm.advantage={advantage}",
            f"trainer.algorithm.policy_loss={loss}",
            *sets,
        ],
        model=str(tiny_model),
        reward=f"{tmp_path / 'reward.py'}:digits",
        **{"data.path": str(data)},
    )
    history = Trainer(config, run_dir=tmp_path / "run", console=False).fit().history
    assert all(step["grad_norm"] > 0 for step in history)
    assert all(metric in step for step in history)
