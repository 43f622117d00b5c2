"""Masked importance sampling (``tis_mode: mask``) is verl's token-level rejection: the
rejected tokens leave the loss mask, so the policy loss is a mean over the *accepted* tokens
and the entropy and KL terms skip them too. Checked through the update itself (several
micro-batches, their mini-batch normaliser) against a transcription of verl's formula on
logprobs taken from the model directly; the former normalisation (every sampled token in the
denominator) was the accepted fraction times it."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest
import torch
from transformers import AutoModelForCausalLM

from agentfly_cli.algorithms.losses import ppo_loss
from agentfly_cli.recipes.loader import load_config
from agentfly_cli.train.tensors.batch import TrainRow, token_matrix, trained_mask
from agentfly_cli.train.tensors.step_batch import StepBatch
from agentfly_cli.train.update import PolicyUpdate, reject_tokens

CAP = 2.0


@pytest.fixture(scope="module")
def model(tiny_model):
    torch.manual_seed(0)
    net = AutoModelForCausalLM.from_pretrained(tiny_model, dtype=torch.float64)
    net.config.use_cache = False
    return net


def multi_turn_rows(seed: int) -> list[TrainRow]:
    """Six rows of two groups: prompt, turn, observation, turn, of uneven lengths."""
    g = torch.Generator().manual_seed(seed)
    rows = []
    for i in range(6):
        lengths = torch.randint(2, 9, (4,), generator=g).tolist()
        ids, mask = [], []
        for part, length in enumerate(lengths):
            ids += torch.randint(1, 400, (length,), generator=g).tolist()
            mask += [part % 2] * length
        rows.append(TrainRow(ids, mask, f"g{i % 2}"))
    return rows


def fake_train(model, losses: list[float]):
    def backward(loss):
        losses.append(float(loss))
        loss.backward()

    return SimpleNamespace(
        model=model,
        device=torch.device("cpu"),
        plain_grad_accumulation=False,
        world_size=1,
        backward=backward,
        step=lambda: 1.0,
        current_lr=lambda: 0.0,
        unwrapped=lambda: model,
    )


def direct_stats(model, rows: list[TrainRow]):
    """Per row, the trained tokens' log-probabilities and entropies, from full forwards."""
    out = []
    with torch.no_grad():
        for row in rows:
            logits = model(torch.tensor([row.ids])).logits[0].double()
            logp = torch.log_softmax(logits, dim=-1)
            picked, entropy = [], []
            for t in range(1, len(row.ids)):
                if row.loss_mask[t]:
                    picked.append(float(logp[t - 1, row.ids[t]]))
                    entropy.append(float(-(logp[t - 1].exp() * logp[t - 1]).sum()))
            out.append((picked, entropy))
    return out


def verl_loss(stats, old, sampler, ref, advantages, agg, entropy_coef, kl_coef):
    """verl's actor loss after ``rollout_rs: token`` replaced the response mask: PPO's clipped
    loss, minus entropy_coef times the entropy, plus kl_coef times k3 (low_var_kl), each
    ``agg_loss``-ed over the accepted tokens (seq-mean: over every sequence of the batch);
    and the policy term over every sampled token instead (the former masked TIS)."""
    terms = {"pg": [], "entropy": [], "kl": []}
    kept = []
    for i, (logps, entropies) in enumerate(stats):
        row = {"pg": [], "entropy": [], "kl": []}
        accepted = 0
        for t, logp in enumerate(logps):
            ratio_is = math.exp(old[i][t] - sampler[i][t])
            if not (1 / CAP <= ratio_is <= CAP):
                continue  # rejected: out of the mask, numerator and denominator alike
            accepted += 1
            ratio = math.exp(logp - old[i][t])
            a = advantages[i]
            row["pg"].append(max(-a * ratio, -a * min(max(ratio, 0.8), 1.2)))
            row["entropy"].append(entropies[t])
            x = min(max(ref[i][t] - logp, -20), 20)
            row["kl"].append(min(max(math.exp(x) - x - 1, -10), 10))
        kept.append(accepted)
        for name in terms:
            terms[name].append(row[name])
    tokens = sum(kept)
    sampled = sum(len(logps) for logps, _ in stats)

    def mean(per_row):
        if agg == "token-mean":
            return sum(sum(r) for r in per_row) / tokens
        return sum(sum(r) / len(r) for r in per_row if r) / len(per_row)

    total = mean(terms["pg"]) - entropy_coef * mean(terms["entropy"])
    total += kl_coef * mean(terms["kl"])
    former_pg = sum(sum(r) for r in terms["pg"]) / sampled  # token-mean over every sampled token
    return total, mean(terms["pg"]), former_pg, tokens / sampled


@pytest.mark.parametrize("agg", ["token-mean", "seq-mean-token-mean"])
@pytest.mark.parametrize(("entropy_coef", "kl_coef"), [(0.0, 0.0), (0.01, 0.05)])
@pytest.mark.parametrize("seed", [0, 1])
def test_masked_is_equals_verls_token_rejection(model, agg, entropy_coef, kl_coef, seed):
    config = load_config(
        "calculator",
        [
            f"trainer.algorithm.tis_cap={CAP}",
            "trainer.algorithm.tis_mode=mask",
            f"trainer.algorithm.loss_agg={agg}",
            f"trainer.algorithm.entropy_coef={entropy_coef}",
            "trainer.micro_batch_tokens=40",  # several micro-batches: one mini-batch normaliser
        ],
        model="unused-model",
    )
    losses: list[float] = []
    update = PolicyUpdate(
        config,
        fake_train(model, losses),
        eot_token_id=0,
        reference=None,
        share_prefix=False,
        chunk=64,
        temperature=1.0,
        advantage_fn=SimpleNamespace(needs_values=False),
        policy_loss_fn=ppo_loss,
    )
    assert update._needs_old_pass()  # the accepted tokens are known before any update pass
    rows = multi_turn_rows(seed)
    g = torch.Generator().manual_seed(10 + seed)
    mask = trained_mask(rows)
    batch = StepBatch(
        rows, [[] for _ in rows], [None] * len(rows), mask, torch.zeros(6), mask, True
    )
    update._reference_pass(batch)
    stats = direct_stats(model, rows)
    for i, (logps, _) in enumerate(stats):  # the old pass is the model's own logprobs
        torch.testing.assert_close(
            batch.old_logprobs[i, : len(logps)].double(),
            torch.tensor(logps, dtype=torch.float64),
            atol=1e-5,
            rtol=0,
        )
    # a stale sampler: about one token in six outside [1/2, 2]
    old = [[float(x) for x in batch.old_logprobs[i, : len(s[0])]] for i, s in enumerate(stats)]
    sampler = [[x + 0.5 * float(torch.randn(1, generator=g)) for x in row] for row in old]
    ref = [[x + 0.3 * float(torch.randn(1, generator=g)) for x in row] for row in old]
    advantages = [float(torch.randn(1, generator=g)) for _ in rows]
    batch.sampler_logprobs = token_matrix(rows, sampler)
    batch.old_logprobs = token_matrix(rows, old)
    if kl_coef:
        batch.ref_logprobs = token_matrix(rows, ref)
        config.trainer.algorithm.kl_coef = kl_coef
    batch.advantages = torch.tensor(advantages)[:, None] * mask
    metrics: dict[str, float] = {}
    reject_tokens(batch, config.trainer.algorithm, metrics)
    out = update.optimize(1, batch)
    assert len(losses) >= 2  # several micro-batches
    total, pg, former_pg, accepted = verl_loss(
        stats,
        old,
        sampler,
        ref if kl_coef else [[0.0] * len(r) for r in old],
        advantages,
        agg,
        entropy_coef,
        kl_coef,
    )
    assert 0.7 < accepted < 0.95 and metrics["tis/accepted_frac"] == pytest.approx(accepted)
    assert sum(losses) == pytest.approx(total, abs=1e-6)
    assert out["loss/policy"] == pytest.approx(pg, abs=1e-6)
    if agg == "token-mean":  # the former normalisation was the accepted share of this
        assert former_pg == pytest.approx(accepted * pg, abs=1e-12)
        assert abs(out["loss/policy"] - former_pg) > 1e-4


def test_truncated_is_keeps_every_token_in_the_loss_mask(model):
    config = load_config("calculator", ["trainer.algorithm.tis_cap=2.0"], model="unused-model")
    rows = multi_turn_rows(3)
    mask = trained_mask(rows)
    batch = StepBatch(
        rows, [[] for _ in rows], [None] * len(rows), mask, torch.zeros(6), mask, True
    )
    batch.old_logprobs = mask * 5.0  # every ratio far above the cap
    reject_tokens(batch, config.trainer.algorithm, {})
    assert batch.loss_mask is None and torch.equal(batch.trained_mask, mask)
