"""CISPO, SAPO, Clip-Cov, KL-Cov and GPG's loss against independent transcriptions of their
papers' formulas (and verl's selection rules for the covariance losses), in float64 on
random multi-turn rows with uneven masks: per-token losses and their gradients within 1e-6."""

from __future__ import annotations

import math

import pytest
import torch

from agentfly_cli.algorithms.covariance_losses import clip_cov_loss, kl_cov_loss
from agentfly_cli.algorithms.interfaces import get_policy_loss
from agentfly_cli.algorithms.losses import aggregate_loss, cispo_loss, gpg_loss, sapo_loss
from agentfly_cli.settings.algorithm import AlgorithmSettings
from tests.algorithms.reference_inputs import policy_inputs, trained_positions

TOL = 1e-6
SEEDS = [0, 1, 2, 3]


def sigmoid(x: float) -> float:
    return 1.0 / (1.0 + math.exp(-x))


def run(loss_fn, config, seed, spread=0.4):
    """(per-token loss, d sum(loss) / d logprobs, metrics, inputs) of ``loss_fn``."""
    logprobs, old, advantages, mask = policy_inputs(seed, spread)
    logprobs = logprobs.clone().requires_grad_(True)
    loss, metrics = loss_fn(logprobs, old, advantages, mask, config)
    loss.sum().backward()
    return loss.detach(), logprobs.grad, metrics, (logprobs.detach(), old, advantages, mask)


def assert_matches(loss, grad, expected_loss, expected_grad, mask):
    """The transcription's numbers on trained tokens; exactly 0 (and finite) elsewhere."""
    assert torch.isfinite(loss).all() and torch.isfinite(grad).all()
    want_loss = torch.zeros_like(loss)
    want_grad = torch.zeros_like(grad)
    for (i, t), value in expected_loss.items():
        want_loss[i, t] = value
    for (i, t), value in expected_grad.items():
        want_grad[i, t] = value
    torch.testing.assert_close(loss, want_loss, atol=TOL, rtol=0)
    torch.testing.assert_close(grad, want_grad, atol=TOL, rtol=0)


# --- CISPO: MiniMax-M1 eqs. 4-5 ------------------------------------------------------------


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize(("low", "high"), [(1.0, 4.0), (0.2, 0.28), (0.5, 0.1)])
def test_cispo_is_reinforce_weighted_by_a_clipped_stop_gradient_ratio(seed, low, high):
    config = AlgorithmSettings(policy_loss="cispo", cispo={"clip_low": low, "clip_high": high})
    loss, grad, metrics, (logp, old, adv, mask) = run(cispo_loss, config, seed, spread=2.0)
    expected_loss, expected_grad, clipped = {}, {}, 0
    positions = trained_positions(mask)
    for i, t in positions:
        ratio = math.exp(logp[i, t] - old[i, t])
        weight = min(max(ratio, 1 - low), 1 + high)  # r^ = clip(r, 1 - eps_low, 1 + eps_high)
        clipped += weight != ratio
        expected_loss[i, t] = -weight * adv[i, t] * logp[i, t]  # -sg(r^) A log pi
        expected_grad[i, t] = -weight * adv[i, t]  # the weight is a constant to autograd
    assert_matches(loss, grad, expected_loss, expected_grad, mask)
    assert metrics["clip_frac"] == pytest.approx(clipped / len(positions))
    assert 0 < clipped < len(positions)  # both sides of the bounds are exercised


def test_no_token_leaves_cispos_gradient_where_ppo_drops_it():
    config = AlgorithmSettings(policy_loss="cispo", cispo={"clip_low": 0.2, "clip_high": 0.2})
    logp = torch.tensor([[math.log(2.0), math.log(0.5)]], requires_grad=True)
    old = torch.zeros(1, 2)
    advantages = torch.tensor([[1.0, -1.0]])  # both far outside PPO's trust region
    loss, _ = cispo_loss(logp, old, advantages, torch.ones(1, 2), config)
    loss.sum().backward()
    torch.testing.assert_close(logp.grad, torch.tensor([[-1.2, 0.8]]))  # -clip(r) * A
    ppo = get_policy_loss("ppo")
    logp.grad = None
    ppo(logp, old, advantages, torch.ones(1, 2), config)[0].sum().backward()
    assert logp.grad.abs().sum() == 0  # PPO's clip zeroes both


# --- SAPO: the soft gate f(r) = sigmoid(tau (r - 1)) 4 / tau ------------------------------------


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize(("tau_pos", "tau_neg"), [(1.0, 1.05), (2.0, 8.0)])
def test_sapo_is_a_sigmoid_gate_with_a_temperature_per_advantage_sign(seed, tau_pos, tau_neg):
    config = AlgorithmSettings(policy_loss="sapo", sapo={"tau_pos": tau_pos, "tau_neg": tau_neg})
    loss, grad, metrics, (logp, old, adv, mask) = run(sapo_loss, config, seed)
    expected_loss, expected_grad, weights = {}, {}, []
    for i, t in trained_positions(mask):
        ratio = math.exp(logp[i, t] - old[i, t])
        tau = tau_pos if adv[i, t] > 0 else tau_neg
        gate = sigmoid(tau * (ratio - 1)) * 4 / tau
        expected_loss[i, t] = -gate * adv[i, t]
        # d gate / d log p = sigmoid' (tau (r - 1)) * tau * r * 4 / tau
        s = sigmoid(tau * (ratio - 1))
        weights.append(4 * s * (1 - s) * ratio)
        expected_grad[i, t] = -weights[-1] * adv[i, t]
    assert_matches(loss, grad, expected_loss, expected_grad, mask)
    assert metrics["gate_weight"] == pytest.approx(sum(weights) / len(weights))


def test_sapos_gradient_is_the_plain_policy_gradient_on_policy():
    logp = torch.tensor([[-0.7, -1.3, -0.2]], requires_grad=True)
    advantages = torch.tensor([[0.5, -2.0, 1.0]])
    loss, metrics = sapo_loss(
        logp, logp.detach(), advantages, torch.ones(1, 3), AlgorithmSettings()
    )
    loss.sum().backward()
    torch.testing.assert_close(logp.grad, -advantages)  # 4 s (1 - s) = 1 at r = 1
    assert metrics["gate_weight"] == pytest.approx(1.0)


def test_sapo_averages_per_sequence_unless_loss_agg_is_set():
    assert AlgorithmSettings(policy_loss="sapo").loss_agg == "seq-mean-token-mean"
    assert AlgorithmSettings(policy_loss="sapo", loss_agg="token-mean").loss_agg == "token-mean"


# --- GPG's objective: -A log p ---------------------------------------------------------------


@pytest.mark.parametrize("seed", SEEDS)
def test_gpg_loss_is_the_plain_policy_gradient(seed):
    loss, grad, _, (logp, _, adv, mask) = run(gpg_loss, AlgorithmSettings(), seed)
    positions = trained_positions(mask)
    expected_loss = {(i, t): -adv[i, t] * logp[i, t] for i, t in positions}
    expected_grad = {(i, t): -adv[i, t] for i, t in positions}
    assert_matches(loss, grad, expected_loss, expected_grad, mask)


# --- Clip-Cov and KL-Cov: Cui et al. 2025 §4, as verl selects ---------------------------------


def covariances(logp, adv, positions):
    """The token-wise centred cross-product over the trained tokens."""
    n = len(positions)
    mean_logp = sum(float(logp[p]) for p in positions) / n
    mean_adv = sum(float(adv[p]) for p in positions) / n
    return {p: (float(logp[p]) - mean_logp) * (float(adv[p]) - mean_adv) for p in positions}


def ppo_token(ratio, advantage, low, high):
    """PPO's clipped per-token loss, whether it was clipped, and d loss / d log p."""
    unclipped = -advantage * ratio
    clipped = -advantage * min(max(ratio, 1 - low), 1 + high)
    if clipped > unclipped:
        return clipped, True, 0.0
    return unclipped, False, -advantage * ratio


@pytest.mark.parametrize("seed", SEEDS)
def test_clip_cov_detaches_every_qualifying_token_when_few_qualify(seed):
    # a band of covariances wide enough that some tokens qualify, a ratio that would detach
    # more than qualify: the selection is then every qualifying token (no randomness)
    config = AlgorithmSettings(
        policy_loss="clip_cov", clip_cov={"ratio": 1.0, "low": 0.05, "high": 0.6}
    )
    loss, grad, metrics, (logp, old, adv, mask) = run(clip_cov_loss, config, seed)
    positions = trained_positions(mask)
    cov = covariances(logp, adv, positions)
    expected_loss, expected_grad, detached = {}, {}, 0
    for p in positions:
        ratio = math.exp(logp[p] - old[p])
        value, clipped, gradient = ppo_token(ratio, float(adv[p]), 0.2, 0.2)
        if not clipped and 0.05 < cov[p] < 0.6:
            value, gradient = 0.0, 0.0  # detached: corr = 0
            detached += 1
        expected_loss[p], expected_grad[p] = value, gradient
    assert_matches(loss, grad, expected_loss, expected_grad, mask)
    assert detached > 0
    assert metrics["cov_detached_frac"] == pytest.approx(detached / len(positions))


@pytest.mark.parametrize("seed", SEEDS)
def test_clip_cov_detaches_a_random_ratio_of_the_qualifying_tokens(seed):
    config = AlgorithmSettings(
        policy_loss="clip_cov", clip_cov={"ratio": 0.1, "low": -1.0, "high": 1.0}
    )
    torch.manual_seed(seed)
    loss, grad, metrics, (logp, old, adv, mask) = run(clip_cov_loss, config, seed)
    positions = trained_positions(mask)
    cov = covariances(logp, adv, positions)
    want = max(1, int(0.1 * len(positions)))
    detached = []
    for p in positions:
        ratio = math.exp(logp[p] - old[p])
        value, clipped, gradient = ppo_token(ratio, float(adv[p]), 0.2, 0.2)
        if loss[p] == 0 and value != 0:
            detached.append(p)
            assert not clipped and -1.0 < cov[p] < 1.0 and grad[p] == 0
        else:
            assert float(loss[p]) == pytest.approx(value, abs=TOL)
            assert float(grad[p]) == pytest.approx(gradient, abs=TOL)
    assert len(detached) == want
    assert metrics["cov_detached_frac"] == pytest.approx(want / len(positions))


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("ratio", [0.02, 0.2])
def test_kl_cov_penalises_the_tokens_of_the_largest_covariance(seed, ratio):
    config = AlgorithmSettings(policy_loss="kl_cov", kl_cov={"ratio": ratio, "coef": 0.7})
    loss, grad, metrics, (logp, old, adv, mask) = run(kl_cov_loss, config, seed)
    positions = trained_positions(mask)
    cov = covariances(logp, adv, positions)
    k = max(1, int(len(positions) * ratio))
    top = set(sorted(positions, key=lambda p: cov[p], reverse=True)[:k])
    expected_loss, expected_grad = {}, {}
    for p in positions:
        log_ratio = float(logp[p] - old[p])
        r = math.exp(log_ratio)
        expected_loss[p] = -float(adv[p]) * r  # pg_losses1 = -A * ratio
        expected_grad[p] = -float(adv[p]) * r
        if p in top:  # + coef * |log p - log p_old|
            expected_loss[p] += 0.7 * abs(log_ratio)
            expected_grad[p] += 0.7 * math.copysign(1.0, log_ratio)
    assert_matches(loss, grad, expected_loss, expected_grad, mask)
    assert metrics["cov_penalised_frac"] == pytest.approx(k / len(positions))


def test_the_covariance_losses_select_over_the_trained_tokens_only():
    # one trained token: it is the only candidate, whatever the junk beside it
    logp = torch.tensor([[-0.5, -1e4, -1e4]], dtype=torch.float64, requires_grad=True)
    old = torch.tensor([[-0.6, -torch.inf, 3.0]], dtype=torch.float64)
    adv = torch.tensor([[1.0, 1e6, -1e6]], dtype=torch.float64)
    mask = torch.tensor([[1.0, 0.0, 0.0]], dtype=torch.float64)
    loss, metrics = kl_cov_loss(logp, old, adv, mask, AlgorithmSettings())
    assert metrics["cov_penalised_frac"] == 1.0
    expected = -math.exp(0.1) + 0.1
    torch.testing.assert_close(loss, torch.tensor([[expected, 0.0, 0.0]], dtype=torch.float64))


# --- all of them ------------------------------------------------------------------------------

NEW_LOSSES = ["cispo", "sapo", "clip_cov", "kl_cov", "gpg"]


@pytest.mark.parametrize("name", NEW_LOSSES)
def test_each_new_loss_is_registered_and_aggregates_like_the_others(name):
    config = AlgorithmSettings(policy_loss=name)
    logprobs, old, advantages, mask = policy_inputs(7)
    loss, metrics = get_policy_loss(name)(logprobs, old, advantages, mask, config)
    assert "approx_kl" in metrics
    value = aggregate_loss(loss, mask, config.loss_agg)
    assert torch.isfinite(value)
    assert torch.all(loss[~mask.bool()] == 0)


@pytest.mark.parametrize("name", ["cispo", "sapo", "gpg"])
def test_a_row_of_zero_advantages_adds_no_loss_or_gradient(name):
    logprobs, old, advantages, mask = policy_inputs(3)
    advantages = advantages.clone()
    advantages[1] = 0.0
    logprobs = logprobs.clone().requires_grad_(True)
    loss, _ = get_policy_loss(name)(logprobs, old, advantages, mask, AlgorithmSettings())
    loss.sum().backward()
    assert torch.all(loss[1] == 0) and torch.all(logprobs.grad[1] == 0)


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("cispo", {"clip_low": 1.5}, "clip_low"),
        ("sapo", {"tau_neg": 0}, "tau_neg"),
        ("clip_cov", {"low": 5.0, "high": 1.0}, "must be below"),
        ("kl_cov", {"ratio": 0}, "ratio"),
    ],
)
def test_their_settings_are_validated(field, value, message):
    from pydantic import ValidationError

    with pytest.raises(ValidationError, match=message):
        AlgorithmSettings(**{field: value})
