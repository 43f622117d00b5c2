"""Outcome estimators with other baselines than GRPO's: ReMax (a greedy rollout's reward), OPO
(the length-weighted optimal baseline) and GPG (the group mean, rescaled by the share of
samples that carry a signal).

Like GRPO's, they score each *episode* (its reward plus all its masked token rewards; an agent
episode's segments count once), give each of its trained tokens the episode's advantage, and
compute in float64 around each group's smallest score, so equal scores give exactly 0.
"""

from __future__ import annotations

import torch

from agentfly_cli.algorithms.advantages import _per_token, episode_scores, group_stats
from agentfly_cli.algorithms.interfaces import AdvantageInput, AdvantageOutput
from agentfly_cli.settings.algorithm import AlgorithmSettings


def remax_advantages(data: AdvantageInput, config: AlgorithmSettings) -> AdvantageOutput:
    """ReMax (Li et al. 2023, "ReMax: A Simple, Effective, and Efficient Reinforcement Learning
    Method for Aligning Large Language Models", arXiv:2310.10505, Algorithm 1): ``A = r(x, y) -
    r(x, y_greedy)``, the baseline being the reward of the task's greedy (temperature 0)
    rollout, ``AdvantageInput.baselines``.

    An episode without a baseline (NaN: its task's greedy chain was not scored) gets 0;
    ``adv/missing_baseline`` counts them."""
    if data.baselines is None:
        raise ValueError(
            "advantage 'remax' needs each task's greedy-rollout reward "
            "(AdvantageInput.baselines); the trainer rolls one greedy chain per task out "
            "for it, or pick another estimator, e.g. grpo"
        )
    mask, episodes, scores = episode_scores(data)
    first = episodes.first()
    baselines = data.baselines.to(scores.dtype)[first]
    known = ~torch.isnan(baselines)
    advantage = torch.where(known, scores - torch.where(known, baselines, 0.0), 0.0)
    out = _per_token(advantage[episodes.index], mask, data)
    out.metrics["adv/missing_baseline"] = float((~known).sum())
    return out


def opo_advantages(data: AdvantageInput, config: AlgorithmSettings) -> AdvantageOutput:
    """OPO (Hao et al. 2025, "On-Policy RL with Optimal Reward Baseline", arXiv:2505.23585):
    ``A_i = r_i - b`` with the baseline that minimises the gradient's variance when a
    sequence's squared gradient norm grows with its length, ``b = sum_j |y_j| r_j / sum_j
    |y_j|`` over the episodes of i's group; ``|y|`` is an episode's trained tokens (every
    segment's).

    A group of one gets 0 (its baseline is its own reward), as GRPO's; verl's ``opo`` gives
    such a sample its raw reward instead."""
    mask, episodes, scores = episode_scores(data)
    lengths = mask.sum(dim=1).new_zeros(len(episodes.rows))
    lengths = lengths.index_add(0, episodes.index, mask.sum(dim=1))
    keys: dict = {}
    group = torch.tensor(
        [keys.setdefault(g, len(keys)) for g in episodes.groups],
        dtype=torch.long,
        device=scores.device,
    )
    zeros = scores.new_zeros(len(keys))
    pivot = zeros.scatter_reduce(0, group, scores, reduce="amin", include_self=False)
    shifted = scores - pivot[group]
    weight = zeros.index_add(0, group, lengths)
    weighted = zeros.index_add(0, group, lengths * shifted)
    spread = torch.where(weight > 0, weighted / weight.clamp(min=1), 0.0)
    advantage = torch.where(weight[group] > 0, shifted - spread[group], 0.0)
    return _per_token(advantage[episodes.index], mask, data)


def gpg_advantages(data: AdvantageInput, config: AlgorithmSettings) -> AdvantageOutput:
    """GPG (Chu et al. 2025, "GPG: A Simple and Strong Reinforcement Learning Baseline for
    Model Reasoning", arXiv:2504.02546): ``A_i = alpha * (r_i - mean of i's group)``, no
    division by the std, with the correction ``alpha = B / (B - M)`` for the samples that
    carry no signal: ``B`` episodes in the batch, ``M`` of them in groups whose scores are all
    equal (a group of one included), whose advantage is 0. The loss, normalised over all
    ``B``'s tokens, then has the gradient of the valid samples alone (the paper's accurate
    gradient estimation; its code's ``adjust_gd``).

    ``alpha`` is over the rows this estimator sees (one rank's share of a step with several
    ranks); ``adv/gpg_alpha`` logs it. Pair it with ``policy_loss: gpg`` for the paper's plain
    ``-A log p`` (``ppo``'s gradient is the same on a batch's first update)."""
    mask, episodes, scores = episode_scores(data)
    count, mean, std = group_stats(scores, episodes.groups)
    valid = (count > 1) & (std > 0)
    total = float(len(episodes.rows))
    alpha = total / float(valid.sum()) if bool(valid.any()) else 1.0
    advantage = torch.where(valid, (scores - mean) * alpha, 0.0)
    out = _per_token(advantage[episodes.index], mask, data)
    out.metrics["adv/gpg_alpha"] = alpha
    return out
