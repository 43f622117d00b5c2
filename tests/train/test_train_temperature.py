"""The trainer's logprobs are those of the distribution the rollouts were sampled from: logits
divided by ``rollout.temperature``, for the policy (old and new) and the reference model."""

from __future__ import annotations

import importlib.util
import json

import pytest
import torch

from agentfly_cli.recipes.loader import load_config
from agentfly_cli.train.tensors.logprobs import GREEDY_BELOW, logprob_temperature
from agentfly_cli.train.trainer import Trainer


class CapturingTrainer(Trainer):
    """Rolls out and prepares one step's batch (old and reference passes), and keeps it
    instead of updating the policy."""

    batches: list

    def _optimize(self, step, batch):
        self.batches = [*getattr(self, "batches", []), batch]
        return {}


@pytest.fixture
def recipe(tmp_path, tiny_model):
    data = tmp_path / "tasks.jsonl"
    rows = [{"question": f"What is {a} + {a + 1}?", "answer": str(2 * a + 1)} for a in range(4)]
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return {"model": str(tiny_model), "data.path": str(data), "reward": "exact_match"}


def prepared_batch(recipe, tmp_path, temperature, *sets):
    config = load_config(
        "calculator",
        [
            f"rollout.temperature={temperature}",
            "rollout.n=2",
            "rollout.max_tokens_per_turn=8",
            "rollout.max_total_tokens=4096",
            "trainer.steps=1",
            "trainer.tasks_per_step=2",
            "trainer.epochs=2",  # more than one update: the trainer computes old logprobs
            "trainer.algorithm.kl_coef=0.1",  # and loads a reference model
            "trainer.telemetry.sinks=[jsonl]",
            "trainer.save_trajectories=false",
            # float32 on any device: on a GPU `auto` is bfloat16, whose rounding (about 0.01
            # nats here) would hide what this checks, the temperature
            "backend.dtype=float32",
            "trainer.backend.dtype=float32",
            *sets,
        ],
        **recipe,
    )
    trainer = CapturingTrainer(config, run_dir=tmp_path / "run", console=False)
    trainer.fit()
    [batch] = trainer.batches
    return batch


def tempered_logprobs(model_path, row, temperature):
    """log_softmax(logits / T) of the initial model at a row's trained tokens, in order."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(model_path, dtype=torch.float32)
    ids = torch.tensor([row.ids])
    with torch.no_grad():
        logits = model(ids).logits[0, :-1].float() / temperature
    picked = logits.log_softmax(-1).gather(1, ids[0, 1:, None])[:, 0]
    return picked[torch.tensor(row.loss_mask[1:]).bool()]


@pytest.mark.parametrize("temperature", [0.7, 1.0, 1.5])
def test_old_and_reference_logprobs_equal_the_samplers_at_its_temperature(
    recipe, tmp_path, temperature
):
    """Before the fix the trainer computed logprobs at T=1 whatever rollout.temperature was
    (and the hf backend reported T=1 logprobs too): 0.85 nats off at T=0.7, 0.68 at T=1.5."""
    batch = prepared_batch(recipe, tmp_path, temperature)
    trained = batch.mask.bool()
    assert batch.has_sampler_logprobs and int(trained.sum()) > 8
    rows = [tempered_logprobs(recipe["model"], row, temperature) for row in batch.rows]
    expected = torch.cat(rows)

    def check(name, got):
        gap = (got - expected).abs().max().item()
        assert gap < 2e-4, f"{name} logprobs are {gap:.3g} nats off log_softmax(logits / T)"

    check("the trainer's old", batch.old_logprobs[trained])
    check("the reference model's", batch.ref_logprobs[trained])  # starts as the policy
    check("the hf backend's sampled", batch.sampler_logprobs[trained])


@pytest.mark.skipif(importlib.util.find_spec("deepspeed") is None, reason="needs deepspeed")
def test_the_deepspeed_backend_uses_the_temperature_too(recipe, tmp_path):
    batch = prepared_batch(
        recipe, tmp_path, 0.7, "trainer.backend.name=deepspeed", "trainer.backend.zero_stage=0"
    )
    trained = batch.mask.bool()
    sampler = batch.sampler_logprobs[trained]
    torch.testing.assert_close(batch.old_logprobs[trained], sampler, atol=2e-4, rtol=0)


def test_greedy_rollouts_are_trained_at_temperature_one():
    assert logprob_temperature(0.0) == 1.0
    assert logprob_temperature(GREEDY_BELOW / 2) == 1.0
    assert logprob_temperature(0.7) == 0.7
