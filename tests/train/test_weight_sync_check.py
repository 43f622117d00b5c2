"""The weight-sync tripwire: a corrupted rollout weight stops the run at the next push, with
one line; the same run uncorrupted never fires, and logs the probe gap and the sampler KL."""

from __future__ import annotations

import asyncio
import json

import pytest
import torch

from agentfly_cli.backends.hf import HFBackend
from agentfly_cli.errors import UserError
from agentfly_cli.recipes.loader import load_config
from agentfly_cli.telemetry.sync_watch import SamplerDriftWatch
from agentfly_cli.train.sync_check import WeightSyncMismatch, probe_gap
from agentfly_cli.train.trainer import Trainer
from tests.train.test_trainer import REWARD_SOURCE  # digits: a reward with spread


@pytest.fixture
def config(tmp_path, tiny_model):
    """A small calculator run whose hf rollout backend holds its own bf16 copy of the weights
    (the trainer trains in fp32 on the CPU), so every step pushes them (FullPush)."""
    data = tmp_path / "tasks.jsonl"
    rows = [{"question": f"What is {a} + {a + 1}?", "answer": str(2 * a + 1)} for a in range(8)]
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    reward = tmp_path / "digit_reward.py"
    reward.write_text(REWARD_SOURCE)
    sets = [
        "rollout.n=3",
        "rollout.max_tokens_per_turn=6",
        "rollout.concurrency=1",
        "trainer.tasks_per_step=2",
        "trainer.steps=3",
        "trainer.backend.lr=0.003",
        "trainer.backend.device=cpu",
        "trainer.backend.dtype=float32",
        "backend.device=cpu",
        "backend.dtype=bfloat16",
        "trainer.telemetry.sinks=[jsonl]",
    ]
    fields = {"model": str(tiny_model), "data.path": str(data), "reward": f"{reward}:digits"}
    return load_config("calculator", sets, **fields)


def test_the_uncorrupted_run_never_fires_and_logs_the_gaps(config, tmp_path):
    trainer = Trainer(config, run_dir=tmp_path / "run", console=False)
    result = trainer.fit()
    assert trainer.sync.name == "full" and trainer.sync_check.active
    baseline = trainer.sync_check.baseline
    assert 0 < baseline < 0.01  # bf16 against fp32: a real, benign gap
    for metrics in result.history:
        assert 0 < metrics["sync/probe_gap_mean"] < trainer.sync_check.limit
        assert metrics["sync/probe_gap_before"] == baseline
        assert metrics["sync/sampler_kl_mean"] >= 0
        assert metrics["sync/sampler_kl_max"] >= metrics["sync/sampler_kl_mean"]


def test_a_corrupted_rollout_weight_stops_the_run_at_that_push(config, tmp_path, monkeypatch):
    pushes = []
    load = HFBackend.update_weights

    async def corrupting(self, named_tensors):
        await load(self, named_tensors)
        pushes.append(self.policy_version)
        if len(pushes) == 2:  # the second push lands, then one matrix of it is lost
            with torch.no_grad():
                self.model.model.layers[-1].self_attn.o_proj.weight.zero_()

    monkeypatch.setattr(HFBackend, "update_weights", corrupting)
    with pytest.raises(WeightSyncMismatch) as caught:
        Trainer(config, run_dir=tmp_path / "run", console=False).fit()
    assert pushes == [1, 2]  # stopped at the corrupted push, before step 3
    message = str(caught.value)
    assert "\n" not in message and "after push 2: the hf backend" in message
    assert "dtype mismatch" in message and "trainer.sync_check.threshold" in message
    assert isinstance(caught.value, UserError)  # the CLI prints one line, exit code 2


def test_the_probe_gap_is_the_mean_and_max_absolute_difference():
    mean, worst = probe_gap([[-1.0, -2.0], [-0.5]], [[-1.5, -2.0], [-0.4]])
    assert mean == pytest.approx(0.2) and worst == pytest.approx(0.5)


def test_the_drift_watch_warns_once_per_jump():
    watch, warnings = SamplerDriftWatch(factor=5.0, floor=0.05), []
    # a jump under the floor (0.04) never warns; each jump over it warns once
    values = [0.004, 0.005, 0.004, 0.04, 0.2, 0.3, 0.004, 0.005, 0.5, 0.009]
    for step, value in enumerate(values, 1):
        watch.check(step, {"sync/sampler_kl_mean": value}, warnings.append)
    assert [w.split(":")[0] for w in warnings] == ["step 5", "step 9"]
    assert "sync/sampler_kl_mean jumped to 0.2" in warnings[0]


class FakeChat:
    def render_text(self, messages):
        return " ".join(m["content"] for m in messages)

    def encode_text(self, text):
        return [ord(c) % 50 for c in text]


def tripwire(backend, *, shared=False, world_size=1):
    from types import SimpleNamespace

    from agentfly_cli.settings.train import SyncCheckSettings
    from agentfly_cli.train.sync_check import SyncTripwire

    train = SimpleNamespace(world_size=world_size)
    return SyncTripwire(SyncCheckSettings(), train, backend, FakeChat(), shared=shared)


def test_a_backend_that_cannot_score_prompts_is_skipped_with_one_note():
    from types import SimpleNamespace

    check = tripwire(SimpleNamespace(name="openai", scores_prompts=False))
    assert not check.active
    notes = check.take_notes()
    assert len(notes) == 1 and "skipped for the openai backend" in notes[0]
    assert check.take_notes() == []
    assert asyncio.run(check.check(1)) == {}


def test_a_shared_model_is_skipped_without_a_note_and_several_ranks_with_one():
    from types import SimpleNamespace

    backend = SimpleNamespace(name="hf", scores_prompts=True)
    shared = tripwire(backend, shared=True)
    assert not shared.active and shared.take_notes() == []
    ranks = tripwire(backend, world_size=2)
    assert not ranks.active and "several ranks" in ranks.take_notes()[0]
    assert [len(ids) for ids in tripwire(backend).probe] == [64, 64]
