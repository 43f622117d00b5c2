"""RL algorithms against hand-computed numbers, and their registration through the plugin hook."""

from __future__ import annotations

import math
import statistics
import subprocess
import sys

import pytest
import torch
from pydantic import ValidationError

from agentfly_cli.algorithms.advantages import (
    gae_advantages,
    grpo_advantages,
    reinforce_pp_advantages,
    reinforce_pp_baseline_advantages,
    rloo_advantages,
)
from agentfly_cli.algorithms.interfaces import (
    AdvantageInput,
    get_advantage_estimator,
    get_policy_loss,
    needs_reference,
    zero_variance_groups,
)
from agentfly_cli.algorithms.losses import (
    aggregate_loss,
    batch_counts,
    entropy_from_logits,
    gspo_loss,
    importance_ratio_stats,
    kl_estimate,
    kl_token_rewards,
    ppo_loss,
    tis_mask,
    tis_weights,
    value_loss,
)
from agentfly_cli.errors import ComponentConflictError, UnknownComponentError, UserError
from agentfly_cli.plugin_host.plugins import HOOK_KINDS, load_plugins, set_plugin_host
from agentfly_cli.plugin_host.registry import KINDS
from agentfly_cli.settings.algorithm import AlgorithmSettings

EPS = 1e-6
LN = math.log


def tensor(rows):
    return torch.tensor(rows, dtype=torch.float64)


def close(actual, expected, tol=1e-6):
    actual = torch.as_tensor(actual).detach().to(torch.float64)
    expected = torch.tensor(expected, dtype=torch.float64)
    torch.testing.assert_close(actual, expected, atol=tol, rtol=0)


# Three groups: a = [1, 0, 0], b = [0.5, 1.5], c = [7] (a lone sample).
REWARDS = [1.0, 0.0, 0.0, 0.5, 1.5, 7.0]
GROUPS = ["a", "a", "a", "b", "b", "c"]
MASK = [[1, 1, 0], [1, 0, 0], [0, 1, 1], [1, 1, 1], [1, 0, 1], [1, 1, 1]]


def grouped_input(**extra):
    return AdvantageInput(tensor(REWARDS), tensor(MASK), GROUPS, **extra)


def expected_per_token(per_row):
    return [[value * m for m in row] for value, row in zip(per_row, MASK, strict=True)]


# --- advantage estimators -------------------------------------------------------------------


def test_grpo_normalises_by_the_unbiased_group_std():
    std_a = math.sqrt(((1 - 1 / 3) ** 2 + 2 * (0 - 1 / 3) ** 2) / 2)  # sqrt(1/3)
    std_b = math.sqrt(((0.5 - 1) ** 2 + (1.5 - 1) ** 2) / 1)  # sqrt(1/2)
    per_row = [
        (2 / 3) / (std_a + EPS),
        (-1 / 3) / (std_a + EPS),
        (-1 / 3) / (std_a + EPS),
        -0.5 / (std_b + EPS),
        0.5 / (std_b + EPS),
        0.0,  # a group of one
    ]
    out = grpo_advantages(grouped_input(), AlgorithmSettings())
    close(out.advantages, expected_per_token(per_row))
    assert out.returns is None


def test_dr_grpo_differs_from_grpo_only_by_the_std_division():
    dr = grpo_advantages(grouped_input(), AlgorithmSettings(norm_adv_by_std=False)).advantages
    close(dr, expected_per_token([2 / 3, -1 / 3, -1 / 3, -0.5, 0.5, 0.0]))
    grpo = grpo_advantages(grouped_input(), AlgorithmSettings()).advantages
    std = tensor([math.sqrt(1 / 3)] * 3 + [math.sqrt(1 / 2)] * 2 + [0.0])
    close(grpo * (std[:, None] + EPS), dr.tolist())


def test_grpo_adds_masked_token_rewards_to_the_score():
    data = AdvantageInput(
        tensor([1.0, 1.0]),
        tensor([[1, 1], [1, 0]]),
        ["g", "g"],
        token_rewards=tensor([[-0.25, -0.25], [-0.25, 9.0]]),  # 9.0 sits on an untrained token
    )
    out = grpo_advantages(data, AlgorithmSettings(norm_adv_by_std=False))
    close(out.advantages, [[-0.125, -0.125], [0.125, 0.0]])  # scores 0.5 and 0.75


def test_rloo_is_reward_minus_the_mean_of_the_others():
    out = rloo_advantages(grouped_input(), AlgorithmSettings())
    per_row = [1 - (0 + 0) / 2, 0 - (1 + 0) / 2, 0 - (1 + 0) / 2, 0.5 - 1.5, 1.5 - 0.5, 0.0]
    close(out.advantages, expected_per_token(per_row))


def test_reinforce_pp_discounts_over_masked_tokens_and_whitens():
    data = AdvantageInput(
        tensor([1.0, 0.0]),
        tensor([[1, 1, 0, 1], [1, 0, 0, 0]]),
        [0, 1],
        token_rewards=tensor([[-0.1, -0.1, 5.0, -0.1], [-0.2, 9.0, 9.0, 9.0]]),
    )
    out = reinforce_pp_advantages(data, AlgorithmSettings(gamma=0.5))
    # Row 0: level [-0.1, -0.1, -, 0.9]; the unmasked token is not a step.
    r3 = 0.9
    r1 = -0.1 + 0.5 * r3
    r0 = -0.1 + 0.5 * r1
    close(out.returns, [[r0, r1, 0.0, r3], [-0.2, 0.0, 0.0, 0.0]])
    raw = [r0, r1, r3, -0.2]
    mean, std = statistics.mean(raw), statistics.stdev(raw)
    expected = [(x - mean) / (std + EPS) for x in raw]
    close(out.advantages, [[expected[0], expected[1], 0.0, expected[2]], [expected[3], 0, 0, 0]])
    trained = out.advantages[tensor([[1, 1, 0, 1], [1, 0, 0, 0]]).bool()]
    assert float(trained.mean()) == pytest.approx(0.0, abs=1e-9)
    assert float(trained.std()) == pytest.approx(1.0, abs=1e-5)


def test_reinforce_pp_baseline_subtracts_the_group_mean_first():
    data = AdvantageInput(tensor([1.0, 0.0, 3.0]), tensor([[1, 1]] * 3), ["a", "a", "b"])
    out = reinforce_pp_baseline_advantages(data, AlgorithmSettings())
    close(out.returns, [[0.5, 0.5], [-0.5, -0.5], [0.0, 0.0]])
    std = math.sqrt((4 * 0.25 + 2 * 0.0) / 5)  # unbiased over the 6 trained tokens
    a = 0.5 / (std + EPS)
    close(out.advantages, [[a, a], [-a, -a], [0.0, 0.0]])


def test_gae_skips_masked_out_tokens_and_bootstraps_zero():
    data = AdvantageInput(
        rewards=tensor([1.0, 0.0]),
        mask=tensor([[1, 0, 1], [0, 1, 1]]),
        group_ids=[0, 1],
        values=tensor([[0.5, 9.0, 0.25], [3.0, 1.0, 2.0]]),
    )
    out = gae_advantages(data, AlgorithmSettings(gamma=0.9, lam=0.8))
    # Row 0: t=2 is last: delta = 1 + 0 - 0.25; t=0's next value is t=2's (t=1 is skipped).
    a02 = 1.0 - 0.25
    a00 = (0.0 + 0.9 * 0.25 - 0.5) + 0.9 * 0.8 * a02
    # Row 1: t=2: delta = 0 - 2; t=1: delta = 0.9 * 2 - 1.
    a12 = -2.0
    a11 = (0.9 * 2.0 - 1.0) + 0.9 * 0.8 * a12
    close(out.returns, [[a00 + 0.5, 0.0, a02 + 0.25], [0.0, a11 + 1.0, a12 + 2.0]])
    raw = [a00, a02, a11, a12]
    mean, std = statistics.mean(raw), statistics.stdev(raw)
    w = [(x - mean) / (std + EPS) for x in raw]
    close(out.advantages, [[w[0], 0.0, w[1]], [0.0, w[2], w[3]]])


def test_gae_without_values_is_a_clear_error():
    with pytest.raises(ValueError, match="'gae' needs values from a value head"):
        gae_advantages(grouped_input(), AlgorithmSettings(advantage="gae"))


def test_mismatched_group_ids_are_an_error():
    data = AdvantageInput(tensor([1.0, 0.0]), tensor([[1], [1]]), ["a"])
    with pytest.raises(ValueError, match="2 rewards but 1 group ids"):
        grpo_advantages(data, AlgorithmSettings())


GROUP_ESTIMATORS = {
    "grpo": grpo_advantages,
    "rloo": rloo_advantages,
    "reinforce_pp_baseline": reinforce_pp_baseline_advantages,
}


@pytest.mark.parametrize("name", sorted(GROUP_ESTIMATORS))
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("size", [2, 3, 7, 8, 16, 64])
@pytest.mark.parametrize("reward", [0.7, 0.1, 1 / 3, 0.9, 2.5, -0.7, 1e6 + 0.1])
def test_a_group_of_equal_rewards_gets_exactly_zero_advantage(name, dtype, size, reward):
    """Beside a group with spread, a group whose chains all got ``reward`` learns nothing:
    exactly 0, not the +-0.06 that float32 rounding divided by (std + eps) gave."""
    rewards = torch.tensor([reward] * size + [0.0, 1.0], dtype=dtype)
    groups = ["same"] * size + ["spread", "spread"]
    mask = torch.ones(size + 2, 3, dtype=dtype)
    for config in (AlgorithmSettings(), AlgorithmSettings(norm_adv_by_std=False)):
        out = GROUP_ESTIMATORS[name](AdvantageInput(rewards, mask, groups), config)
        assert out.advantages.dtype == dtype
        assert out.advantages[:size].abs().max().item() == 0.0
        assert out.advantages[size:].abs().min().item() > 0.1


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("reward", [0.7, 0.1, 1 / 3, 2.5])
def test_batch_whitening_of_equal_returns_is_exactly_zero(dtype, reward):
    data = AdvantageInput(torch.full((16,), reward, dtype=dtype), torch.ones(16, 5), [0] * 16)
    for estimator in (reinforce_pp_advantages, reinforce_pp_baseline_advantages):
        out = estimator(data, AlgorithmSettings())
        assert out.advantages.dtype == dtype
        assert out.advantages.abs().max().item() == 0.0


def test_group_statistics_are_float64_and_exact_for_equal_members():
    from agentfly_cli.algorithms.advantages import group_stats

    scores = torch.tensor([0.7] * 8 + [1e6 + 0.5, 1e6 + 1.5], dtype=torch.float32)
    count, mean, std = group_stats(scores, ["a"] * 8 + ["b", "b"])
    assert mean.dtype == std.dtype == torch.float64
    assert count.tolist() == [8.0] * 8 + [2.0, 2.0]
    assert mean[:8].tolist() == [float(scores[0])] * 8 and std[:8].tolist() == [0.0] * 8
    assert mean[8:].tolist() == [1e6 + 1.0] * 2
    assert std[8:].tolist() == pytest.approx([math.sqrt(0.5)] * 2, abs=1e-12)


# --- policy losses --------------------------------------------------------------------------


def ppo_case(config, tokens):
    """tokens: (ratio, advantage) pairs; None ratio is a masked-out token with garbage values."""
    logprobs = torch.tensor(
        [LN(r) if r else -math.inf for r, _ in tokens], dtype=torch.float64, requires_grad=True
    )
    mask = tensor([[1.0 if r else 0.0 for r, _ in tokens]])
    advantages = tensor([[a for _, a in tokens]])
    loss, metrics = ppo_loss(logprobs[None], torch.zeros_like(mask), advantages, mask, config)
    loss.sum().backward()
    return loss[0].tolist(), logprobs.grad.tolist(), metrics


def test_ppo_clips_low_and_high_separately_and_stops_their_gradient():
    config = AlgorithmSettings(clip_ratio_low=0.2, clip_ratio_high=0.28)
    tokens = [
        (1.5, 1.0),  # above 1 + 0.28 with A > 0: clipped
        (0.5, -1.0),  # below 1 - 0.2 with A < 0: clipped
        (1.25, 1.0),  # inside the wider high range: not clipped (it would be at 0.2)
        (0.5, 1.0),  # below with A > 0: the unclipped term is the smaller, kept
        (1.5, -1.0),  # above with A < 0: kept (no dual clip)
        (None, 3.0),  # masked out
    ]
    loss, grad, metrics = ppo_case(config, tokens)
    assert loss == pytest.approx([-1.28, 0.8, -1.25, -0.5, 1.5, 0.0])
    # d(-A * ratio)/d logprob = -A * ratio where unclipped; 0 where clipped or masked.
    assert grad == pytest.approx([0.0, 0.0, -1.25, -0.5, 1.5, 0.0])
    assert metrics["clip_frac"] == pytest.approx(2 / 5)
    approx_kl = -(LN(1.5) + LN(0.5) + LN(1.25) + LN(0.5) + LN(1.5)) / 5
    assert metrics["approx_kl"] == pytest.approx(approx_kl)
    assert metrics["dual_clip_frac"] == 0.0


def test_ppo_dual_clip_bounds_the_loss_of_negative_advantages():
    tokens = [(5.0, -1.0), (2.0, -1.0), (5.0, 1.0)]
    plain, plain_grad, _ = ppo_case(AlgorithmSettings(), tokens)
    assert plain == pytest.approx([5.0, 2.0, -1.2])
    assert plain_grad == pytest.approx([5.0, 2.0, 0.0])
    loss, grad, metrics = ppo_case(AlgorithmSettings(clip_ratio_c=3.0), tokens)
    # A < 0: min(max(-A r, -A clip(r)), -A c) = min(5, 3) = 3 and no gradient there.
    assert loss == pytest.approx([3.0, 2.0, -1.2])
    assert grad == pytest.approx([0.0, 2.0, 0.0])
    assert metrics["dual_clip_frac"] == pytest.approx(1 / 3)


def test_dual_clip_must_exceed_one():
    with pytest.raises(ValidationError, match="clip_ratio_c must be > 1"):
        AlgorithmSettings(clip_ratio_c=1.0)


def test_gspo_uses_the_sequence_geometric_mean_with_per_token_gradients():
    logprobs = torch.tensor(
        [[LN(2.0), LN(0.5), LN(1.25), 0.0], [LN(1.5), LN(1.5), 0.0, 0.0]],
        dtype=torch.float64,
        requires_grad=True,
    )
    old = torch.zeros_like(logprobs)
    old[0, 3] = math.inf  # garbage on a masked-out token
    mask = tensor([[1, 1, 1, 0], [1, 1, 0, 0]])
    advantages = tensor([[1.0] * 4, [1.0] * 4])
    loss, metrics = gspo_loss(logprobs, old, advantages, mask, AlgorithmSettings())
    s0 = (2.0 * 0.5 * 1.25) ** (1 / 3)  # geometric mean of the token ratios, inside the clip
    close(loss, [[-s0, -s0, -s0, 0.0], [-1.2, -1.2, 0.0, 0.0]])  # 1.5 > 1 + 0.2: clipped
    assert metrics["clip_frac"] == pytest.approx(2 / 5)
    (grad_first,) = torch.autograd.grad(loss[0, 0], logprobs, retain_graph=True)
    close(grad_first, [[-s0, 0.0, 0.0, 0.0], [0.0] * 4])  # token 0 only: per-token gradient
    loss.sum().backward()
    close(logprobs.grad, [[-s0, -s0, -s0, 0.0], [0.0] * 4])


def test_gspo_reads_its_tiny_clip_ranges_from_config():
    config = AlgorithmSettings(policy_loss="gspo", clip_ratio_low=3e-4, clip_ratio_high=4e-4)
    logprobs = tensor([[LN(1.001), LN(1.001)], [LN(0.99), LN(0.99)]])
    loss, metrics = gspo_loss(
        logprobs,
        torch.zeros_like(logprobs),
        tensor([[1, 1], [-2, -2]]),
        tensor([[1, 1], [1, 1]]),
        config,
    )
    close(loss, [[-(1 + 4e-4)] * 2, [2 * (1 - 3e-4)] * 2])
    assert metrics["clip_frac"] == 1.0


def test_tis_weights_are_truncated_detached_and_masked():
    old = torch.tensor([[LN(1.5), LN(3.0), LN(0.25), 0.0]], requires_grad=True)
    sampler = torch.tensor([[0.0, 0.0, 0.0, -math.inf]])
    weights = tis_weights(old, sampler, tensor([[1, 1, 1, 0]]), cap=2.0)
    close(weights, [[1.5, 2.0, 0.25, 0.0]])
    assert not weights.requires_grad


def test_masked_importance_sampling_drops_tokens_outside_the_bounds_and_keeps_the_rest_whole():
    # ratios 1.5 (kept), 3.0 (above 2), 0.25 (below 1/2), 0.6 (kept), and one off the mask
    old = torch.tensor([[LN(1.5), LN(3.0), LN(0.25), LN(0.6), 0.0]], requires_grad=True)
    sampler = torch.tensor([[0.0, 0.0, 0.0, 0.0, -math.inf]])
    mask = tensor([[1, 1, 1, 1, 0]])
    weights = tis_mask(old, sampler, mask, cap=2.0)
    close(weights, [[1.0, 0.0, 0.0, 1.0, 0.0]])
    assert not weights.requires_grad
    stats = importance_ratio_stats(old, sampler, mask, cap=2.0)
    assert stats["ratio_max"] == pytest.approx(3.0) and stats["ratio_min"] == pytest.approx(0.25)
    assert stats["ratio_mean"] == pytest.approx((1.5 + 3.0 + 0.25 + 0.6) / 4)
    assert stats["outside_frac"] == pytest.approx(0.5)
    assert importance_ratio_stats(old, sampler, tensor([[0, 0, 0, 0, 0]]), cap=2.0) == {}


# --- aggregation ----------------------------------------------------------------------------

LOSS = [[1.0, 2.0, 3.0], [4.0, 5.0, 6.0], [7.0, 8.0, 9.0]]
LOSS_MASK = [[1, 1, 0], [1, 0, 0], [0, 0, 0]]


@pytest.mark.parametrize(
    ("mode", "options", "expected"),
    [
        ("token-mean", {}, (1 + 2 + 4) / 3),
        ("seq-mean-token-mean", {}, ((1 + 2) / 2 + 4 / 1) / 2),  # the empty row does not count
        ("seq-mean-token-sum-norm", {"seq_len_constant": 4}, (1 + 2 + 4) / (2 * 4)),
        ("seq-mean-token-sum-norm", {}, (1 + 2 + 4) / (2 * 3)),  # default constant: T
        ("token-mean", {"num_tokens": 10}, 7 / 10),
        ("seq-mean-token-mean", {"num_seqs": 5}, 5.5 / 5),
    ],
)
def test_aggregate_loss_modes(mode, options, expected):
    value = aggregate_loss(tensor(LOSS), tensor(LOSS_MASK), mode, **options)
    assert float(value) == pytest.approx(expected)


@pytest.mark.parametrize("mode", ["token-mean", "seq-mean-token-mean", "seq-mean-token-sum-norm"])
def test_aggregate_loss_of_an_empty_mask_is_zero(mode):
    value = aggregate_loss(tensor(LOSS), torch.zeros(3, 3), mode)
    assert float(value) == 0.0


def test_aggregate_loss_unknown_mode():
    with pytest.raises(ValueError, match="unknown loss aggregation 'mean'"):
        aggregate_loss(tensor(LOSS), tensor(LOSS_MASK), "mean")


@pytest.mark.parametrize("mode", ["token-mean", "seq-mean-token-mean", "seq-mean-token-sum-norm"])
def test_micro_batches_sum_to_the_mini_batch_loss(mode):
    loss = tensor([[1, 2, 3, 4], [5, 6, 7, 8], [9, 10, 11, 12], [13, 14, 15, 16]])
    mask = tensor([[1, 1, 1, 0], [1, 0, 0, 0], [0, 0, 0, 0], [1, 1, 0, 1]])
    whole = aggregate_loss(loss, mask, mode, seq_len_constant=8)
    num_tokens, num_seqs = batch_counts(mask)
    assert (num_tokens, num_seqs) == (7, 3)
    parts = [
        aggregate_loss(
            loss[rows],
            mask[rows],
            mode,
            num_tokens=num_tokens,
            num_seqs=num_seqs,
            seq_len_constant=8,
        )
        for rows in (slice(0, 1), slice(1, 4))
    ]
    assert float(sum(parts)) == pytest.approx(float(whole))
    assert float(whole) == pytest.approx(
        {
            "token-mean": (1 + 2 + 3 + 5 + 13 + 14 + 16) / 7,
            "seq-mean-token-mean": (6 / 3 + 5 / 1 + 43 / 3) / 3,
            "seq-mean-token-sum-norm": 54 / (3 * 8),
        }[mode]
    )


# --- KL, entropy, value loss ----------------------------------------------------------------


def test_kl_estimators():
    logp, ref = tensor([LN(0.5), LN(0.3)]), tensor([LN(0.25), LN(0.3)])
    close(kl_estimate(logp, ref, "k1"), [LN(2.0), 0.0])
    close(kl_estimate(logp, ref, "k2"), [0.5 * LN(2.0) ** 2, 0.0])
    close(kl_estimate(logp, ref, "k3"), [0.5 - (-LN(2.0)) - 1.0, 0.0])  # e^x - x - 1, x = -ln 2
    with pytest.raises(ValueError, match="unknown KL estimator 'k4'"):
        kl_estimate(logp, ref, "k4")


def reference_kl(logprob, ref_logprob, kind):
    """verl's ``kl_penalty`` (trainer/ppo/core_algos.py): kl/k1, mse/k2, low_var_kl/k3."""
    if kind == "k1":
        return logprob - ref_logprob
    if kind == "k2":
        return 0.5 * (logprob - ref_logprob).square()
    kl = torch.clamp(ref_logprob - logprob, min=-20, max=20)
    return torch.clamp(torch.exp(kl) - kl - 1, min=-10, max=10)


@pytest.mark.parametrize("kind", ["k1", "k2", "k3"])
def test_kl_estimators_equal_verls_on_a_grid_of_log_ratios(kind):
    logp = torch.linspace(-30.0, 0.0, 61, dtype=torch.float64)
    ref = torch.linspace(0.0, -30.0, 61, dtype=torch.float64)
    grid_logp, grid_ref = torch.meshgrid(logp, ref, indexing="ij")
    got = kl_estimate(grid_logp, grid_ref, kind)
    torch.testing.assert_close(got, reference_kl(grid_logp, grid_ref, kind), rtol=1e-12, atol=0)


def test_k3_is_clamped_to_ten_where_the_reference_is_far_more_likely():
    """ref/policy = e^18: unclamped k3 is e^18 - 19 = 6.6e7, one token would swamp the loss."""
    logp = torch.tensor([-20.0, -1.0], dtype=torch.float64, requires_grad=True)
    ref = tensor([-2.0, -1.5])
    kl = kl_estimate(logp, ref, "k3")
    assert kl[0].item() == 10.0
    assert kl[1].item() == pytest.approx(math.exp(-0.5) + 0.5 - 1)
    kl.sum().backward()
    assert logp.grad.tolist() == pytest.approx([0.0, 1 - math.exp(-0.5)])


def test_kl_in_reward_and_needs_reference():
    config = AlgorithmSettings(kl_coef=0.1, kl_in_reward=True)
    rewards = kl_token_rewards(
        tensor([[-1.0, -2.0]]), tensor([[-1.5, 0.0]]), tensor([[1, 0]]), config
    )
    close(rewards, [[-0.1 * 0.5, 0.0]])
    assert needs_reference(config) and not needs_reference(AlgorithmSettings())


def test_entropy_from_logits():
    p = [1 / 6, 2 / 6, 3 / 6]
    by_hand = -sum(x * math.log(x) for x in p)
    logits = torch.tensor(
        [[LN(1), LN(2), LN(3), -math.inf], [1000.0, 1000.0, -math.inf, -math.inf]],
        requires_grad=True,
    )
    entropy = entropy_from_logits(logits)
    close(entropy, [by_hand, LN(2.0)], tol=1e-5)
    entropy.sum().backward()
    assert torch.isfinite(logits.grad).all()
    half = entropy_from_logits(torch.zeros(2, 4, dtype=torch.bfloat16))
    assert half.dtype == torch.float32
    close(half, [LN(4.0)] * 2, tol=1e-5)


def test_value_loss_is_clipped_around_the_old_values():
    values, old, returns = (
        tensor([[1.0, 2.0, 5.0]]),
        tensor([[0.5, 0.5, 0.0]]),
        tensor([[2.0, 0, 0]]),
    )
    mask = tensor([[1, 1, 0]])
    # t0: max((1-2)^2, (0.7-2)^2) = 1.69; t1: max((2-0)^2, (0.7-0)^2) = 4.
    close(value_loss(values, old, returns, mask, clip=0.2), [[0.5 * 1.69, 0.5 * 4.0, 0.0]])
    close(value_loss(values, old, returns, mask, clip=None), [[0.5, 2.0, 0.0]])


def test_zero_variance_groups_are_dropped():
    rewards = [1.0, 1.0, 0.0, 1.0, 0.5, 0.5, 3.0]
    groups = ["a", "a", "b", "b", "c", "c", "d"]
    keep = [False, False, True, True, False, False, False]
    assert zero_variance_groups(rewards, groups) == keep
    assert zero_variance_groups(torch.tensor(rewards), groups) == keep


# --- config ---------------------------------------------------------------------------------


def test_config_defaults_and_validation():
    config = AlgorithmSettings()
    assert (config.advantage, config.policy_loss, config.loss_agg) == ("grpo", "ppo", "token-mean")
    assert (config.clip_ratio_low, config.clip_ratio_high, config.kl_kind) == (0.2, 0.2, "k3")
    for name, field in AlgorithmSettings.model_fields.items():
        assert field.description, name
    with pytest.raises(ValidationError, match="extra"):
        AlgorithmSettings(clip_ratio=0.2)
    with pytest.raises(ValidationError):
        AlgorithmSettings(kl_coef=-0.1)
    with pytest.raises(ValidationError):
        AlgorithmSettings(loss_agg="mean")


def test_gspo_aggregates_per_sequence_unless_loss_agg_is_set():
    assert AlgorithmSettings(policy_loss="gspo").loss_agg == "seq-mean-token-mean"
    assert AlgorithmSettings(policy_loss="ppo").loss_agg == "token-mean"
    for mode in ("token-mean", "seq-mean-token-sum-norm"):
        assert AlgorithmSettings(policy_loss="gspo", loss_agg=mode).loss_agg == mode
    dumped = AlgorithmSettings(policy_loss="gspo").model_dump()  # config.json of a run
    assert AlgorithmSettings.model_validate(dumped).loss_agg == "seq-mean-token-mean"


@pytest.mark.parametrize("recipe", ["calculator", "code_math", "search_qa"])
def test_gspo_on_a_builtin_recipe_aggregates_per_sequence(recipe):
    from agentfly_cli.recipes.loader import load_config

    gspo = load_config(recipe, ["trainer.algorithm.policy_loss=gspo"]).trainer.algorithm
    assert gspo.loss_agg == "seq-mean-token-mean"
    chosen = load_config(
        recipe,
        ["trainer.algorithm.policy_loss=gspo", "trainer.algorithm.loss_agg=token-mean"],
    ).trainer.algorithm
    assert chosen.loss_agg == "token-mean"
    assert load_config(recipe).trainer.algorithm.loss_agg == "token-mean"  # ppo


# --- registration through the plugin hook ---------------------------------------------------


def test_every_component_kind_comes_from_one_hook():
    kinds = [kind for hook_kinds in HOOK_KINDS.values() for kind in hook_kinds]
    assert sorted(kinds) == sorted(KINDS)


def test_builtin_algorithms_register_through_their_entry_point():
    host = load_plugins(only={"agentfly-cli"})
    set_plugin_host(host)
    assert list(host.components.advantages) == [
        "gae",
        "gigpo",
        "gpg",
        "grpo",
        "opo",
        "reinforce_pp",
        "reinforce_pp_baseline",
        "remax",
        "rloo",
    ]
    assert list(host.components.policy_losses) == [
        "cispo",
        "clip_cov",
        "gpg",
        "gspo",
        "kl_cov",
        "ppo",
        "sapo",
    ]
    entry = host.components.advantages.entry("grpo")
    assert entry.provenance.plugin == "builtin_algorithms" and entry.provenance.builtin
    assert host.plugin("builtin_algorithms").hooks == ["register_algorithms"]
    config = AlgorithmSettings()
    out = get_advantage_estimator(config.advantage)(grouped_input(), config)
    close(out.advantages, grpo_advantages(grouped_input(), config).advantages.tolist())
    assert get_policy_loss("ppo").__name__ == "ppo_loss"


def test_unknown_algorithm_name_lists_the_available_ones():
    set_plugin_host(load_plugins(only={"agentfly-cli"}))
    with pytest.raises(UserError) as caught:
        get_advantage_estimator("grp")
    message = str(caught.value)
    assert isinstance(caught.value, UnknownComponentError) and "\n" not in message
    assert "unknown advantage estimator 'grp'" in message and "did you mean 'grpo'" in message
    assert (
        "available: gae, gigpo, gpg, grpo, opo, reinforce_pp, reinforce_pp_baseline, remax, rloo"
        in message
    )
    with pytest.raises(
        UserError,
        match="unknown policy loss 'sapoo' in algorithm.policy_loss; did you mean 'sapo'.*"
        "available: cispo, clip_cov, gpg, gspo, kl_cov, ppo, sapo",
    ):
        get_policy_loss("sapoo")


def test_loading_the_builtin_algorithms_does_not_import_torch():
    code = (
        "import sys\n"
        "from agentfly_cli.plugin_host.plugins import load_plugins\n"
        "from agentfly_cli.algorithms.interfaces import AlgorithmSettings\n"
        "host = load_plugins(only={'agentfly-cli'})\n"
        "assert 'grpo' in host.components.advantages, host.plugins\n"
        "print('torch' in sys.modules)\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.stdout.strip() == "False", result.stderr


PLUGIN = """
from agentfly_cli import hookimpl


def max_baseline(data, config):
    '''Reward minus the best reward of the group.'''
    from agentfly_cli.algorithms.interfaces import AdvantageOutput

    best = {}
    for key, reward in zip(data.group_ids, data.rewards.tolist()):
        best[key] = max(best.get(key, reward), reward)
    baseline = data.rewards.new_tensor([best[key] for key in data.group_ids])
    return AdvantageOutput((data.rewards - baseline)[:, None] * data.mask)


def no_loss(logprobs, old_logprobs, advantages, mask, config):
    return 0.0 * logprobs, {}


@hookimpl
def register_algorithms(register):
    register("advantage", "max_baseline", max_baseline, group_relative=True)
    register("policy_loss", "no_loss", no_loss, "Trains nothing")
"""


def test_hook_register_algorithms(make_plugin):
    dist = make_plugin(PLUGIN)
    set_plugin_host(load_plugins(only={"agentfly-cli", dist}))
    estimator = get_advantage_estimator("max_baseline")
    out = estimator(grouped_input(), AlgorithmSettings(advantage="max_baseline"))
    close(out.advantages, expected_per_token([0.0, -1.0, -1.0, -1.0, 0.0, 0.0]))
    host = load_plugins(only={dist})
    entry = host.components.advantages.entry("max_baseline")
    assert entry.description == "Reward minus the best reward of the group."
    assert entry.provenance.distribution == dist and not entry.provenance.builtin
    assert host.components.policy_losses.entry("no_loss").description == "Trains nothing"
    assert host.plugins[0].hooks == ["register_algorithms"]
    # what the trainer must know is declared at registration, not inferred from the name
    assert estimator.group_relative and not estimator.needs_values


def test_the_builtin_estimators_declare_their_traits():
    names = ("grpo", "rloo", "reinforce_pp", "reinforce_pp_baseline", "gae")
    names += ("gigpo", "remax", "opo", "gpg")
    traits = {
        name: (
            get_advantage_estimator(name).group_relative,
            get_advantage_estimator(name).needs_values,
            get_advantage_estimator(name).needs_greedy,
        )
        for name in names
    }
    assert traits == {
        "grpo": (True, False, False),
        "rloo": (True, False, False),
        "reinforce_pp": (False, False, False),
        "reinforce_pp_baseline": (True, False, False),
        "gae": (False, True, False),
        "gigpo": (True, False, False),
        "remax": (False, False, True),  # one greedy chain per task; n = 1 is fine
        "opo": (True, False, False),
        "gpg": (True, False, False),
    }


def test_an_unknown_estimator_trait_is_a_hook_error(make_plugin):
    dist = make_plugin(
        "from agentfly_cli import hookimpl\n@hookimpl\ndef register_algorithms(register):\n"
        "    register('advantage', 'mine', lambda data, config: None, needs_critic=True)\n"
    )
    host = load_plugins(only={dist})
    message = host.plugins[0].hook_errors["register_algorithms"]
    assert "unknown trait(s) needs_critic; group_relative, needs_values, needs_greedy" in message


def test_duplicate_algorithm_name_is_a_conflict_naming_both_plugins(make_plugin):
    dist = make_plugin(
        "from agentfly_cli import hookimpl\n@hookimpl\ndef register_algorithms(register):\n"
        "    register('advantage', 'grpo', lambda data, config: None)\n",
        entry_point="rival",
    )
    host = load_plugins(only={"agentfly-cli", dist})
    message = host.plugin("rival").hook_errors["register_algorithms"]
    assert "advantage 'grpo' is registered by both plugin 'builtin_algorithms' (agentfly-cli" in (
        message
    )
    assert f"plugin 'rival' ({dist} 1.2.3)" in message
    set_plugin_host(host)
    with pytest.raises(ComponentConflictError, match="registered by both"):
        get_advantage_estimator("grpo")
    assert get_advantage_estimator("rloo").fn.__name__ == "rloo_advantages"


def test_unknown_algorithm_kind_is_a_hook_error(make_plugin):
    dist = make_plugin(
        "from agentfly_cli import hookimpl\n@hookimpl\ndef register_algorithms(register):\n"
        "    register('critic', 'mine', lambda: None)\n"
    )
    info = load_plugins(only={dist}).plugins[0]
    assert info.hook_errors["register_algorithms"] == (
        "ValueError: unknown algorithm kind 'critic' for 'mine'; kinds: 'advantage', 'policy_loss'"
    )
