"""Clip-Cov and KL-Cov (Cui et al. 2025, "The Entropy Mechanism of Reinforcement Learning for
Reasoning Language Models", arXiv:2505.22617, §4): policy losses that restrain the few tokens
whose log-probability and advantage covary most, the ones that drive the policy's entropy
down.

A token's covariance is the centred cross-product over the trained tokens of the batch the
loss sees, ``(log p - mean log p) * (A - mean A)``, as the paper's token-wise covariance and
verl's ``clip_cov`` / ``kl_cov`` compute it. The trainer calls a policy loss once per
micro-batch (so does verl), so the means and the number of tokens selected are a
micro-batch's: ``trainer.micro_batch_tokens`` changes which tokens are picked.
"""

from __future__ import annotations

import torch

from agentfly_cli.algorithms.losses import MAX_LOG_RATIO, _clipped_objective, _masked_mean
from agentfly_cli.settings.algorithm import AlgorithmSettings


def token_covariance(
    logprobs: torch.Tensor, advantages: torch.Tensor, mask: torch.Tensor
) -> torch.Tensor:
    """Each trained token's ``(log p - mean log p) * (A - mean A)``, the means over the trained
    tokens of the batch (detached; 0 off the mask)."""
    trained = mask.bool()
    count = trained.sum().clamp(min=1)
    logprobs = torch.where(trained, logprobs.detach(), 0.0)
    advantages = torch.where(trained, advantages.detach(), 0.0)
    centred_logp = logprobs - logprobs.sum() / count
    centred_adv = advantages - advantages.sum() / count
    return torch.where(trained, centred_logp * centred_adv, 0.0)


def selection_size(mask: torch.Tensor, ratio: float) -> int:
    """How many tokens a covariance loss selects: ``max(1, int(ratio * trained tokens))``."""
    return max(1, int(ratio * int(mask.bool().sum())))


def clip_cov_loss(
    logprobs: torch.Tensor,
    old_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    config: AlgorithmSettings,
) -> tuple[torch.Tensor, dict[str, float]]:
    """Clip-Cov: PPO's clipped loss, except that ``clip_cov.ratio`` of the trained tokens lose
    their gradient (their loss is multiplied by 0), drawn at random among the tokens PPO did
    not clip whose covariance lies strictly between ``clip_cov.low`` and ``clip_cov.high``
    (``max(1, int(ratio * N))`` of them, or all when fewer qualify).

    ``clip_frac``: PPO's clipped share; ``cov_detached_frac``: the share detached here."""
    trained = mask.bool()
    log_ratio = torch.where(trained, logprobs - old_logprobs, 0.0)
    ratio = log_ratio.clamp(-MAX_LOG_RATIO, MAX_LOG_RATIO).exp()
    advantages = torch.where(trained, advantages, 0.0)
    loss, clipped = _clipped_objective(ratio, advantages, config)
    band = config.clip_cov
    covariance = token_covariance(logprobs, advantages, trained)
    qualifies = trained & ~clipped & (covariance > band.low) & (covariance < band.high)
    candidates = torch.nonzero(qualifies)
    count = min(selection_size(trained, band.ratio), len(candidates))
    picked = candidates[torch.randperm(len(candidates))[:count].to(candidates.device)]
    keep = torch.ones_like(loss)
    keep[picked[:, 0], picked[:, 1]] = 0.0
    metrics = {
        "clip_frac": _masked_mean(clipped, trained),
        "cov_detached_frac": _masked_mean(keep == 0, trained),
        "approx_kl": _masked_mean(-log_ratio.detach(), trained),
    }
    return torch.where(trained, loss * keep, 0.0), metrics


def kl_cov_loss(
    logprobs: torch.Tensor,
    old_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    config: AlgorithmSettings,
) -> tuple[torch.Tensor, dict[str, float]]:
    """KL-Cov: the unclipped ``-A * r`` on every trained token, plus ``kl_cov.coef *
    |log p - log p_old|`` on the ``max(1, int(kl_cov.ratio * N))`` tokens of the largest
    covariance.

    ``cov_penalised_frac``: the share penalised; ``abs_kl``: the mean |log-ratio|."""
    trained = mask.bool()
    log_ratio = torch.where(trained, logprobs - old_logprobs, 0.0)
    ratio = log_ratio.clamp(-MAX_LOG_RATIO, MAX_LOG_RATIO).exp()
    advantages = torch.where(trained, advantages, 0.0)
    loss = -advantages * ratio
    settings = config.kl_cov
    penalised = torch.zeros_like(trained)
    if bool(trained.any()):
        covariance = token_covariance(logprobs, advantages, trained)
        positions = torch.nonzero(trained)
        values = covariance[trained]  # row-major, as ``positions``
        top = torch.topk(values, selection_size(trained, settings.ratio)).indices
        penalised[positions[top, 0], positions[top, 1]] = True
    loss = torch.where(penalised, loss + settings.coef * log_ratio.abs(), loss)
    metrics = {
        "cov_penalised_frac": _masked_mean(penalised, trained),
        "abs_kl": _masked_mean(log_ratio.detach().abs(), trained),
        "approx_kl": _masked_mean(-log_ratio.detach(), trained),
    }
    return torch.where(trained, loss, 0.0), metrics
