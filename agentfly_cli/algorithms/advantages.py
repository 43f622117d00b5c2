"""Advantage estimators: GRPO (and Dr.GRPO), RLOO, REINFORCE++ (with a group baseline), GAE.

Every estimator is ``fn(data: AdvantageInput, config: AlgorithmSettings) -> AdvantageOutput``.
Rows are trajectories, columns tokens; only positions where ``mask`` is 1 are trained, and
tokens in between (tool outputs, prompts) are skipped as if absent. The outcome estimators
(grpo, rloo) score a row by its reward plus the sum of its masked ``token_rewards``.

Statistics (group means and stds, batch whitening) are computed in float64 around a pivot
value of each set (shifted data): values that are all equal get exactly their value as mean,
a std of exactly 0 and so an advantage of exactly 0, whatever the value (in float32 a group of
eight 0.7 rewards got advantages of +-0.06 after dividing by std + eps). Advantages come back
in the rewards' dtype.

The group-relative estimators (grpo, rloo, reinforce_pp_baseline; gigpo) compare *episodes*:
the rows that ``AdvantageInput.episodes`` gives one key (an agent episode's segments) are one
sample of their group, whose score is their shared reward plus all their shaping, and each of
their tokens gets that episode's advantage. An episode of three segments counts once.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass

import torch

from agentfly_cli.algorithms.interfaces import AdvantageInput, AdvantageOutput
from agentfly_cli.settings.algorithm import AlgorithmSettings


def grpo_advantages(data: AdvantageInput, config: AlgorithmSettings) -> AdvantageOutput:
    """GRPO: (r - group mean) / (group std + eps); Dr.GRPO (norm_adv_by_std=False): r - mean."""
    mask, episodes, scores = episode_scores(data)
    advantage, _ = group_normalised(scores, episodes.groups, config)
    return _per_token(advantage[episodes.index], mask, data)


def rloo_advantages(data: AdvantageInput, config: AlgorithmSettings) -> AdvantageOutput:
    """RLOO: r_i minus the mean of the other rewards of its group (0 for a lone sample).

    Computed as n / (n - 1) * (r_i - group mean), the same number without the rounding of
    ``(sum - r_i) / (n - 1)``: equal rewards give exactly 0."""
    mask, episodes, scores = episode_scores(data)
    count, mean, _ = group_stats(scores, episodes.groups)
    advantage = (scores - mean) * count / (count - 1).clamp(min=1)
    advantage = torch.where(count > 1, advantage, torch.zeros_like(scores))
    return _per_token(advantage[episodes.index], mask, data)


def reinforce_pp_advantages(data: AdvantageInput, config: AlgorithmSettings) -> AdvantageOutput:
    """REINFORCE++: discounted return per token, whitened over the batch's masked tokens."""
    return _whitened_returns(data, _rewards(data), config)


def reinforce_pp_baseline_advantages(
    data: AdvantageInput, config: AlgorithmSettings
) -> AdvantageOutput:
    """REINFORCE++ with a baseline: rewards minus their group mean, then as REINFORCE++."""
    rewards = _rewards(data)
    episodes = episodes_of(data)
    _, mean, _ = group_stats(rewards[episodes.first()], episodes.groups)
    return _whitened_returns(data, rewards - mean[episodes.index], config)


def gae_advantages(data: AdvantageInput, config: AlgorithmSettings) -> AdvantageOutput:
    """PPO's GAE over masked tokens with a value head; advantages whitened over the batch."""
    if data.values is None:
        raise ValueError(
            "advantage 'gae' needs values from a value head (AdvantageInput.values); "
            "train a critic or pick an estimator without one, e.g. grpo"
        )
    mask = data.mask.bool()
    rewards = _rewards(data)
    values = torch.where(mask, data.values.detach().to(rewards.dtype), 0.0)
    level = token_level_rewards(rewards, mask, data.token_rewards)
    advantages = torch.zeros_like(level)
    next_value = torch.zeros_like(rewards)
    next_advantage = torch.zeros_like(rewards)
    for t in reversed(range(level.shape[1])):
        trained = mask[:, t]
        delta = level[:, t] + config.gamma * next_value - values[:, t]
        advantage = delta + config.gamma * config.lam * next_advantage
        advantages[:, t] = torch.where(trained, advantage, 0.0)
        next_value = torch.where(trained, values[:, t], next_value)
        next_advantage = torch.where(trained, advantage, next_advantage)
    returns = torch.where(mask, advantages + values, 0.0)
    whitened = masked_whiten(advantages, mask, config.adv_eps)
    dtype = output_dtype(data)
    return AdvantageOutput(whitened.to(dtype), returns.to(dtype))


@dataclass(frozen=True)
class Episodes:
    """A batch's rows grouped into episodes: the rows of one ``AdvantageInput.episodes`` key
    (an agent episode's segments, in row order), or one row alone."""

    index: torch.Tensor  # [B] each row's episode
    rows: list[list[int]]  # [E] each episode's rows
    groups: list[Hashable]  # [E] each episode's group

    def first(self) -> torch.Tensor:
        """[E] each episode's first row."""
        return torch.tensor([r[0] for r in self.rows], dtype=torch.long, device=self.index.device)


def episodes_of(data: AdvantageInput) -> Episodes:
    """The episodes of ``data``'s rows; the rows of one episode must share their group and
    their reward (ValueError otherwise)."""
    count = data.mask.shape[0]
    keys = data.episodes
    if keys is not None and len(keys) != count:
        raise ValueError(f"{count} rows but {len(keys)} episode keys")
    if len(data.group_ids) != count:
        raise ValueError(f"{count} rewards but {len(data.group_ids)} group ids")
    number: dict[Hashable, int] = {}
    rows: list[list[int]] = []
    groups: list[Hashable] = []
    index = []
    rewards = data.rewards.tolist()
    for row in range(count):
        key = None if keys is None else keys[row]
        episode = len(rows) if key is None else number.setdefault(key, len(rows))
        if episode == len(rows):
            rows.append([])
            groups.append(data.group_ids[row])
        first = rows[episode][0] if rows[episode] else row
        if groups[episode] != data.group_ids[row] or rewards[first] != rewards[row]:
            raise ValueError(
                f"the segments of episode {key!r} differ in their group or reward: an "
                "episode's segments share both (AdvantageInput.episodes)"
            )
        rows[episode].append(row)
        index.append(episode)
    return Episodes(torch.tensor(index, dtype=torch.long, device=data.rewards.device), rows, groups)


def episode_scores(data: AdvantageInput) -> tuple[torch.Tensor, Episodes, torch.Tensor]:
    """The float mask, the episodes, and each episode's score ([E], float64): its reward plus
    the masked token rewards of all its rows."""
    rewards = _rewards(data)
    mask = data.mask.to(rewards.dtype)
    episodes = episodes_of(data)
    first = episodes.first()
    if data.token_rewards is None:
        return mask, episodes, rewards[first]
    shaped = torch.where(mask.bool(), data.token_rewards.to(rewards.dtype), 0.0).sum(dim=1)
    shaping = shaped.new_zeros(len(episodes.rows)).index_add(0, episodes.index, shaped)
    return mask, episodes, rewards[first] + shaping


def group_stats(
    scores: torch.Tensor, group_ids: Sequence[Hashable]
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Per row, in float64: its group's size, mean and unbiased std (std 0 for a group of one).

    Sums run over each score minus its group's smallest score, so a group of equal scores has
    exactly that score as its mean and exactly 0 as its std."""
    if len(group_ids) != scores.shape[0]:
        raise ValueError(f"{scores.shape[0]} rewards but {len(group_ids)} group ids")
    scores = scores.to(torch.float64)
    keys: dict[Hashable, int] = {}
    index = torch.tensor(
        [keys.setdefault(key, len(keys)) for key in group_ids],
        dtype=torch.long,
        device=scores.device,
    )
    zeros = scores.new_zeros(len(keys))
    pivot = zeros.scatter_reduce(0, index, scores, reduce="amin", include_self=False)
    shifted = scores - pivot[index]
    count = zeros.index_add(0, index, torch.ones_like(scores))
    shift_mean = zeros.index_add(0, index, shifted) / count
    squares = zeros.index_add(0, index, (shifted - shift_mean[index]) ** 2)
    std = (squares / (count - 1).clamp(min=1)).sqrt()
    return count[index], (pivot + shift_mean)[index], std[index]


def group_normalised(
    scores: torch.Tensor, group_ids: Sequence[Hashable], config: AlgorithmSettings
) -> tuple[torch.Tensor, torch.Tensor]:
    """GRPO's advantage of each score in its group, (score - mean) / (std + eps) (Dr.GRPO,
    ``norm_adv_by_std=False``: score - mean), 0 in a group of one; and each group's size."""
    count, mean, std = group_stats(scores, group_ids)
    centered = scores - mean
    if config.norm_adv_by_std:
        centered = centered / (std + config.adv_eps)
    return torch.where(count > 1, centered, torch.zeros_like(centered)), count


def token_level_rewards(
    rewards: torch.Tensor, mask: torch.Tensor, token_rewards: torch.Tensor | None = None
) -> torch.Tensor:
    """[B, T]: ``token_rewards`` on masked tokens plus each scalar reward on its last one."""
    mask = mask.bool()
    level = torch.zeros(mask.shape, dtype=rewards.dtype, device=rewards.device)
    if token_rewards is not None:
        level = torch.where(mask, token_rewards.to(rewards.dtype), level)
    positions = torch.arange(mask.shape[1], device=mask.device)
    last = torch.where(mask, positions, -1).max(dim=1).values
    rows = torch.nonzero(last >= 0).squeeze(1)
    level[rows, last[rows]] += rewards[rows]
    return level


def discounted_returns(level: torch.Tensor, mask: torch.Tensor, gamma: float) -> torch.Tensor:
    """Backward discounted sum over masked tokens only (each masked token is one step)."""
    mask = mask.bool()
    level = torch.where(mask, level, 0.0)
    if gamma == 1.0:
        returns = level.flip(1).cumsum(1).flip(1)
        return torch.where(mask, returns, 0.0)
    returns = torch.zeros_like(level)
    running = level.new_zeros(level.shape[0])
    for t in reversed(range(level.shape[1])):
        running = torch.where(mask[:, t], level[:, t] + gamma * running, running)
        returns[:, t] = torch.where(mask[:, t], running, 0.0)
    return returns


def masked_whiten(values: torch.Tensor, mask: torch.Tensor, eps: float) -> torch.Tensor:
    """(x - mean) / (unbiased std + eps) over the masked entries, in float64 around their
    smallest value (equal values give exactly 0); 0 elsewhere."""
    mask = mask.bool()
    values = values.to(torch.float64)
    selected = values[mask]
    if selected.numel() == 0:
        return torch.zeros_like(values)
    pivot = selected.min()
    shifted = selected - pivot
    centered = values - pivot - shifted.mean()
    if selected.numel() > 1:
        centered = centered / (shifted.std() + eps)
    return torch.where(mask, centered, 0.0)


def _whitened_returns(
    data: AdvantageInput, rewards: torch.Tensor, config: AlgorithmSettings
) -> AdvantageOutput:
    level = token_level_rewards(rewards, data.mask, data.token_rewards)
    returns = discounted_returns(level, data.mask, config.gamma)
    whitened = masked_whiten(returns, data.mask, config.adv_eps)
    dtype = output_dtype(data)
    return AdvantageOutput(whitened.to(dtype), returns.to(dtype))


def _rewards(data: AdvantageInput) -> torch.Tensor:
    """The rewards in float64 (statistics are computed in float64), checked to be [B]."""
    rewards = data.rewards
    if rewards.dim() != 1 or rewards.shape[0] != data.mask.shape[0]:
        raise ValueError(
            f"rewards must be [B] with B = {data.mask.shape[0]} rows, got {tuple(rewards.shape)}"
        )
    return rewards.to(torch.float64)


def output_dtype(data: AdvantageInput) -> torch.dtype:
    """Advantages and returns come back in the rewards' float dtype (default for integers)."""
    dtype = data.rewards.dtype
    return dtype if dtype.is_floating_point else torch.get_default_dtype()


def _per_token(advantage: torch.Tensor, mask: torch.Tensor, data: AdvantageInput):
    """A row's advantage on each of its trained tokens, in the output dtype."""
    return AdvantageOutput((advantage[:, None] * mask).to(output_dtype(data)))


def mask_and_scores(data: AdvantageInput) -> tuple[torch.Tensor, torch.Tensor]:
    """The float mask and each row's score: reward plus its masked token rewards."""
    rewards = _rewards(data)
    mask = data.mask.to(rewards.dtype)
    if data.token_rewards is None:
        return mask, rewards
    shaped = torch.where(mask.bool(), data.token_rewards.to(rewards.dtype), 0.0)
    return mask, rewards + shaped.sum(dim=1)
