"""Policy losses (PPO with clip-higher and dual clip, GSPO, CISPO, SAPO, GPG's plain policy
gradient), their aggregation, and the KL, entropy, truncated-importance-sampling and
value-loss helpers. Clip-Cov and KL-Cov are in :mod:`.covariance_losses`.

A policy loss is ``fn(logprobs, old_logprobs, advantages, mask, config)`` and returns the
per-token loss [B, T] (0 where mask is 0) and float metrics: ``approx_kl`` (k1: mean of old -
new log-probabilities over masked tokens) and, for the clipped ones, ``clip_frac`` (fraction of
masked tokens whose clipped term was taken). Positions where mask is 0 never leak NaN or inf.
"""

from __future__ import annotations

import math

import torch

from agentfly_cli.settings.algorithm import AlgorithmSettings

MAX_LOG_RATIO = 20.0
MAX_GSPO_LOG_RATIO = 10.0
#: k3 is clamped to [-MAX_K3, MAX_K3], as verl's ``low_var_kl`` (and SkyRL, OpenRLHF) do: a
#: token whose reference probability is e^18 times the policy's would otherwise add 6.6e7.
MAX_K3 = 10.0


def ppo_loss(
    logprobs: torch.Tensor,
    old_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    config: AlgorithmSettings,
) -> tuple[torch.Tensor, dict[str, float]]:
    """Clipped PPO with separate low/high clip ranges and optional dual clip (clip_ratio_c)."""
    trained = mask.bool()
    log_ratio = torch.where(trained, logprobs - old_logprobs, 0.0)
    ratio = log_ratio.clamp(-MAX_LOG_RATIO, MAX_LOG_RATIO).exp()
    advantages = torch.where(trained, advantages, 0.0)
    loss, clipped = _clipped_objective(ratio, advantages, config)
    metrics = {
        "clip_frac": _masked_mean(clipped, trained),
        "approx_kl": _masked_mean(-log_ratio.detach(), trained),
        "dual_clip_frac": 0.0,
    }
    if config.clip_ratio_c is not None:
        bound = -advantages * config.clip_ratio_c
        negative = advantages < 0
        metrics["dual_clip_frac"] = _masked_mean(negative & (loss > bound), trained)
        loss = torch.where(negative, torch.minimum(loss, bound), loss)
    return torch.where(trained, loss, 0.0), metrics


def gspo_loss(
    logprobs: torch.Tensor,
    old_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    config: AlgorithmSettings,
) -> tuple[torch.Tensor, dict[str, float]]:
    """GSPO: the sequence ratio (geometric mean of token ratios), clipped, applied per token.

    Token t of row i uses ``sg(s_i) * exp(logprobs_t - sg(logprobs_t))``: its value is the
    sequence ratio s_i, its gradient flows through its own log-probability only.
    """
    trained = mask.bool()
    log_ratio = torch.where(trained, logprobs - old_logprobs, 0.0)
    lengths = trained.sum(dim=1).clamp(min=1)
    sequence_log_ratio = log_ratio.sum(dim=1) / lengths
    current = torch.where(trained, logprobs, 0.0)
    token_log_ratio = sequence_log_ratio.detach()[:, None] + current - current.detach()
    ratio = token_log_ratio.clamp(max=MAX_GSPO_LOG_RATIO).exp()
    advantages = torch.where(trained, advantages, 0.0)
    loss, clipped = _clipped_objective(ratio, advantages, config)
    metrics = {
        "clip_frac": _masked_mean(clipped, trained),
        "approx_kl": _masked_mean(-log_ratio.detach(), trained),
    }
    return torch.where(trained, loss, 0.0), metrics


def cispo_loss(
    logprobs: torch.Tensor,
    old_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    config: AlgorithmSettings,
) -> tuple[torch.Tensor, dict[str, float]]:
    """CISPO (MiniMax-M1, MiniMax 2025, arXiv:2506.13585, eqs. 4-5): REINFORCE on every
    token, weighted by its clipped, stop-gradient importance weight:
    ``-sg(clip(r, 1 - cispo.clip_low, 1 + cispo.clip_high)) * A * log p``.

    Unlike PPO's clip, which zeroes the gradient of a token outside the trust region, a
    clipped weight only bounds it: no token leaves the gradient. ``clip_frac``: the share of
    masked tokens whose weight was clipped."""
    trained = mask.bool()
    log_ratio = torch.where(trained, logprobs - old_logprobs, 0.0)
    ratio = log_ratio.detach().clamp(-MAX_LOG_RATIO, MAX_LOG_RATIO).exp()
    bounds = config.cispo
    weight = ratio.clamp(1.0 - bounds.clip_low, 1.0 + bounds.clip_high)
    advantages = torch.where(trained, advantages, 0.0)
    loss = -weight * advantages * torch.where(trained, logprobs, 0.0)
    metrics = {
        "clip_frac": _masked_mean(weight != ratio, trained),
        "approx_kl": _masked_mean(-log_ratio.detach(), trained),
    }
    return torch.where(trained, loss, 0.0), metrics


def sapo_loss(
    logprobs: torch.Tensor,
    old_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    config: AlgorithmSettings,
) -> tuple[torch.Tensor, dict[str, float]]:
    """SAPO (Gao et al. 2025, "Soft Adaptive Policy Optimization", arXiv:2511.20347): a smooth
    gate in place of the hard clip, ``-f(r) * A`` with ``f(r) = sigmoid(tau * (r - 1)) * 4 /
    tau``, ``tau = sapo.tau_pos`` where A > 0 and ``sapo.tau_neg`` elsewhere.

    The gradient weight ``f'(r) r = 4 s (1 - s) r`` (``s`` the sigmoid) is 1 on-policy and
    fades smoothly as r leaves 1, faster for a larger tau. ``gate_weight``: its mean over
    masked tokens. Aggregated per sequence (``seq-mean-token-mean``) unless loss_agg is set."""
    trained = mask.bool()
    log_ratio = torch.where(trained, logprobs - old_logprobs, 0.0)
    ratio = log_ratio.clamp(-MAX_LOG_RATIO, MAX_LOG_RATIO).exp()
    advantages = torch.where(trained, advantages, 0.0)
    gates = config.sapo
    tau = torch.where(advantages > 0, gates.tau_pos, gates.tau_neg).to(ratio.dtype)
    soft = torch.sigmoid(tau * (ratio - 1.0))
    loss = -soft * (4.0 / tau) * advantages
    gate_weight = (4.0 * soft * (1.0 - soft) * ratio).detach()
    metrics = {
        "gate_weight": _masked_mean(gate_weight, trained),
        "approx_kl": _masked_mean(-log_ratio.detach(), trained),
    }
    return torch.where(trained, loss, 0.0), metrics


def gpg_loss(
    logprobs: torch.Tensor,
    old_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    config: AlgorithmSettings,
) -> tuple[torch.Tensor, dict[str, float]]:
    """GPG's objective (Chu et al. 2025, arXiv:2504.02546): the plain policy gradient
    ``-A * log p``, no ratio and no clip (its gradient equals PPO's on the first update of a
    batch, where the ratio is 1)."""
    trained = mask.bool()
    log_ratio = torch.where(trained, logprobs - old_logprobs, 0.0)
    advantages = torch.where(trained, advantages, 0.0)
    loss = -advantages * torch.where(trained, logprobs, 0.0)
    return torch.where(trained, loss, 0.0), {
        "approx_kl": _masked_mean(-log_ratio.detach(), trained)
    }


def tis_weights(
    old_logprobs: torch.Tensor, sampler_logprobs: torch.Tensor, mask: torch.Tensor, cap: float
) -> torch.Tensor:
    """Truncated importance weights min(p_trainer / p_sampler, cap), detached, 0 off the mask."""
    trained = mask.bool()
    log_ratio = torch.where(trained, old_logprobs - sampler_logprobs, 0.0).detach()
    weights = log_ratio.clamp(max=math.log(cap)).exp().clamp(max=cap)
    return torch.where(trained, weights, 0.0)


def tis_mask(
    old_logprobs: torch.Tensor, sampler_logprobs: torch.Tensor, mask: torch.Tensor, cap: float
) -> torch.Tensor:
    """Masked importance sampling: 1 where p_trainer / p_sampler lies within [1/cap, cap], 0
    elsewhere and off the mask (the tokens a stale or mismatched sampler drew far from the
    trained policy leave the loss instead of being down-weighted)."""
    trained = mask.bool()
    log_ratio = torch.where(trained, old_logprobs - sampler_logprobs, 0.0).detach()
    inside = log_ratio.abs() <= math.log(cap)
    return (trained & inside).to(old_logprobs.dtype)


def importance_ratio_stats(
    old_logprobs: torch.Tensor, sampler_logprobs: torch.Tensor, mask: torch.Tensor, cap: float
) -> dict[str, float]:
    """Trainer / sampler probability ratios over the masked tokens: mean, max, min and the
    fraction outside [1/cap, cap] (what a stale or mismatched sampler costs)."""
    trained = mask.bool()
    if not bool(trained.any()):
        return {}
    log_ratio = (old_logprobs - sampler_logprobs).detach()[trained].double()
    ratio = log_ratio.clamp(-MAX_LOG_RATIO, MAX_LOG_RATIO).exp()
    outside = log_ratio.abs() > math.log(cap)
    return {
        "ratio_mean": float(ratio.mean()),
        "ratio_max": float(ratio.max()),
        "ratio_min": float(ratio.min()),
        "outside_frac": float(outside.double().mean()),
    }


def sampler_kl_stats(
    old_logprobs: torch.Tensor, sampler_logprobs: torch.Tensor, mask: torch.Tensor
) -> dict[str, float]:
    """How far the sampler's distribution is from the trainer's on the sampled tokens: the
    k3 estimate of KL(sampler || trainer), r - 1 - log r with r = p_trainer / p_sampler
    (unbiased under the sampler's samples, never negative, each token's clamped to MAX_K3):
    its mean and max over the masked tokens."""
    trained = mask.bool()
    if not bool(trained.any()):
        return {}
    k3 = kl_estimate(sampler_logprobs.detach(), old_logprobs.detach(), "k3")[trained]
    k3 = k3.clamp(min=0.0)  # e^x - x - 1 rounds below 0 for x near 0
    return {"kl_mean": float(k3.double().mean()), "kl_max": float(k3.max())}


def aggregate_loss(
    per_token_loss: torch.Tensor,
    mask: torch.Tensor,
    mode: str,
    *,
    num_tokens: float | torch.Tensor | None = None,
    num_seqs: float | torch.Tensor | None = None,
    seq_len_constant: int | None = None,
) -> torch.Tensor:
    """One scalar from a per-token loss; see :func:`batch_counts` for the normalisers.

    Pass the whole mini-batch's ``num_tokens``/``num_seqs`` to every micro-batch so that
    the micro-batch losses sum to the mini-batch loss. ``seq_len_constant`` defaults to T.
    """
    trained = mask.bool()
    loss = torch.where(trained, per_token_loss, 0.0)
    tokens = trained.sum() if num_tokens is None else num_tokens
    seqs = trained.any(dim=1).sum() if num_seqs is None else num_seqs
    if mode == "token-mean":
        return loss.sum() / _at_least_one(tokens)
    if mode == "seq-mean-token-mean":
        row_means = loss.sum(dim=1) / trained.sum(dim=1).clamp(min=1)
        return row_means.sum() / _at_least_one(seqs)
    if mode == "seq-mean-token-sum-norm":
        constant = seq_len_constant or mask.shape[-1]
        return loss.sum() / (_at_least_one(seqs) * constant)
    raise ValueError(
        f"unknown loss aggregation {mode!r}; use token-mean, seq-mean-token-mean "
        "or seq-mean-token-sum-norm"
    )


def batch_counts(mask: torch.Tensor) -> tuple[int, int]:
    """(masked tokens, rows with at least one masked token): the default normalisers."""
    trained = mask.bool()
    return int(trained.sum()), int(trained.any(dim=1).sum())


def kl_estimate(logprobs: torch.Tensor, ref_logprobs: torch.Tensor, kind: str) -> torch.Tensor:
    """Per-token KL(policy || reference) estimate, as verl's ``kl_penalty``: k1 (log ratio),
    k2 (half its square) or k3 (Schulman's e^x - x - 1 with x = ref - policy, x clamped to
    +-20 and the result to [0, MAX_K3]; no gradient where clamped)."""
    if kind == "k1":
        return logprobs - ref_logprobs
    if kind == "k2":
        return 0.5 * (logprobs - ref_logprobs) ** 2
    if kind == "k3":
        log_ratio = (ref_logprobs - logprobs).clamp(-MAX_LOG_RATIO, MAX_LOG_RATIO)
        return (log_ratio.exp() - log_ratio - 1.0).clamp(-MAX_K3, MAX_K3)
    raise ValueError(f"unknown KL estimator {kind!r}; use k1, k2 or k3")


def kl_token_rewards(
    logprobs_old: torch.Tensor,
    ref_logprobs: torch.Tensor,
    mask: torch.Tensor,
    config: AlgorithmSettings,
) -> torch.Tensor:
    """KL in the reward: -kl_coef * k1 per masked token, for ``AdvantageInput.token_rewards``."""
    trained = mask.bool()
    penalty = -config.kl_coef * (logprobs_old - ref_logprobs).detach()
    return torch.where(trained, penalty, 0.0)


def entropy_from_logits(logits: torch.Tensor) -> torch.Tensor:
    """Entropy of softmax(logits) over the last axis, in float32 or wider; -inf logits are fine.

    Uses log_softmax (max-shifted logsumexp), so huge logits lose no precision.
    """
    if logits.dtype in (torch.float16, torch.bfloat16):
        logits = logits.float()
    log_probs = torch.log_softmax(logits, dim=-1)
    finite = torch.where(torch.isfinite(log_probs), log_probs, 0.0)
    return -(finite.exp() * finite).sum(dim=-1)


def value_loss(
    values: torch.Tensor,
    old_values: torch.Tensor,
    returns: torch.Tensor,
    mask: torch.Tensor,
    clip: float | None,
) -> torch.Tensor:
    """Per-token 0.5 * max((v - R)^2, (v_clipped - R)^2), v_clipped within clip of old_values."""
    trained = mask.bool()
    loss = (values - returns) ** 2
    if clip is not None:
        clipped = old_values + (values - old_values).clamp(-clip, clip)
        loss = torch.maximum(loss, (clipped - returns) ** 2)
    return torch.where(trained, 0.5 * loss, 0.0)


def _clipped_objective(
    ratio: torch.Tensor, advantages: torch.Tensor, config: AlgorithmSettings
) -> tuple[torch.Tensor, torch.Tensor]:
    """-min(ratio * A, clip(ratio) * A) and where the clipped term won."""
    unclipped = -advantages * ratio
    bounded = ratio.clamp(1.0 - config.clip_ratio_low, 1.0 + config.clip_ratio_high)
    clipped = -advantages * bounded
    return torch.maximum(unclipped, clipped), clipped > unclipped


def _masked_mean(values: torch.Tensor, mask: torch.Tensor) -> float:
    count = int(mask.sum())
    if count == 0:
        return 0.0
    return float(torch.where(mask, values.to(torch.float32), 0.0).sum()) / count


def _at_least_one(count: float | torch.Tensor) -> float | torch.Tensor:
    if isinstance(count, torch.Tensor):
        return count.clamp(min=1)
    return max(count, 1)
