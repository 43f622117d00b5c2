"""ReMax, OPO and GPG against independent transcriptions of their papers' formulas, in float64
on random rewards over multi-turn rows with uneven masks, an agent episode of two segments
(one sample of its group) and token rewards (the KL in the reward): within 1e-6."""

from __future__ import annotations

import math

import pytest
import torch

from agentfly_cli.algorithms.baselines import gpg_advantages, opo_advantages, remax_advantages
from agentfly_cli.algorithms.interfaces import AdvantageInput, get_advantage_estimator
from agentfly_cli.settings.algorithm import AlgorithmSettings
from tests.algorithms.reference_inputs import multi_turn_mask, random_rewards

TOL = 1e-6
SEEDS = [0, 1, 2, 3, 4]
# five rows: group a = rows 0, 1 and the two-segment episode of rows 2 and 3; group b = row 4
GROUPS = ["a", "a", "a", "a", "b"]
EPISODES = [None, None, "ep", "ep", None]


def case(seed: int, *, shaping: bool = True, equal_group: bool = False) -> AdvantageInput:
    rewards = random_rewards(seed, 5)
    rewards[3] = rewards[2]  # the episode's segments share its reward
    if equal_group:
        rewards[0] = rewards[1] = rewards[2] = rewards[3]
    mask = multi_turn_mask()
    token_rewards = None
    if shaping:
        generator = torch.Generator().manual_seed(100 + seed)
        token_rewards = -0.05 * torch.rand(mask.shape, generator=generator, dtype=torch.float64)
        token_rewards = torch.where(mask.bool(), token_rewards, 9.0)  # junk off the mask
    return AdvantageInput(
        torch.tensor(rewards, dtype=torch.float64),
        mask,
        GROUPS,
        token_rewards=token_rewards,
        episodes=EPISODES,
    )


def episodes_of(data: AdvantageInput) -> dict:
    """{episode: (group, score, trained tokens, rows)} by hand: an episode's score is its reward
    plus every masked token reward of its segments."""
    out: dict = {}
    for row in range(len(GROUPS)):
        key = EPISODES[row] if EPISODES[row] is not None else ("row", row)
        shaped = 0.0
        tokens = 0
        for t in range(data.mask.shape[1]):
            if data.mask[row, t]:
                tokens += 1
                if data.token_rewards is not None:
                    shaped += float(data.token_rewards[row, t])
        group, score, length, rows = out.get(key, (GROUPS[row], float(data.rewards[row]), 0, []))
        out[key] = (group, score + shaped, length + tokens, [*rows, row])
    return out


def expand(per_episode: dict, data: AdvantageInput) -> list[list[float]]:
    """Each episode's advantage on every trained token of its rows."""
    out = [[0.0] * data.mask.shape[1] for _ in GROUPS]
    for key, value in per_episode.items():
        for row in episodes_of(data)[key][3]:
            for t in range(data.mask.shape[1]):
                if data.mask[row, t]:
                    out[row][t] = value
    return out


def close(actual, expected):
    torch.testing.assert_close(
        actual.to(torch.float64), torch.tensor(expected, dtype=torch.float64), atol=TOL, rtol=0
    )


# --- OPO: b = sum(|y| r) / sum(|y|) within the group --------------------------------------------


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("shaping", [True, False])
def test_opo_subtracts_the_length_weighted_group_mean(seed, shaping):
    data = case(seed, shaping=shaping)
    episodes = episodes_of(data)
    baseline = {}
    for group in set(GROUPS):
        members = [e for e in episodes.values() if e[0] == group]
        baseline[group] = sum(e[2] * e[1] for e in members) / sum(e[2] for e in members)
    expected = {key: score - baseline[group] for key, (group, score, _, _) in episodes.items()}
    close(opo_advantages(data, AlgorithmSettings()).advantages, expand(expected, data))
    assert episodes[("row", 4)][0] == "b"  # a group of one: its own reward is its baseline
    assert expected[("row", 4)] == pytest.approx(0.0)


def test_opos_baseline_weights_the_long_sample_more_than_grpos_mean():
    # rewards 1 (3 tokens) and 0 (1 token): the length-weighted mean is 0.75, not 0.5
    data = AdvantageInput(
        torch.tensor([1.0, 0.0]), torch.tensor([[1, 1, 1], [1, 0, 0]]).float(), ["g", "g"]
    )
    close(opo_advantages(data, AlgorithmSettings()).advantages, [[0.25] * 3, [-0.75, 0, 0]])


# --- GPG: alpha * (r - group mean), alpha = B / (B - M) ----------------------------------------


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("equal_group", [False, True])
def test_gpg_is_the_group_mean_baseline_rescaled_by_the_valid_share(seed, equal_group):
    data = case(seed, equal_group=equal_group, shaping=False)  # equal scores need no shaping
    episodes = episodes_of(data)
    scores = {}
    for group, score, _, _ in episodes.values():
        scores.setdefault(group, []).append(score)
    invalid = sum(len(s) for s in scores.values() if len(s) < 2 or len(set(s)) == 1)
    total = len(episodes)  # B: episodes, the two-segment one counted once
    alpha = total / (total - invalid) if total > invalid else 1.0
    expected = {}
    for key, (group, score, _, _) in episodes.items():
        members = scores[group]
        expected[key] = alpha * (score - sum(members) / len(members)) if len(members) > 1 else 0.0
    out = gpg_advantages(data, AlgorithmSettings())
    close(out.advantages, expand(expected, data))
    assert out.metrics["adv/gpg_alpha"] == pytest.approx(alpha)
    assert alpha == pytest.approx(4 / 3 if not equal_group else 1.0)  # group b is one sample


def test_gpg_does_not_divide_by_the_std():
    data = AdvantageInput(torch.tensor([2.0, 0.0]), torch.ones(2, 1), ["g", "g"])
    out = gpg_advantages(data, AlgorithmSettings(norm_adv_by_std=True))
    close(out.advantages, [[1.0], [-1.0]])  # GRPO's would be +-0.707


def test_gpgs_correction_counts_the_samples_of_groups_without_signal():
    # groups: a = [1, 0] (valid), b = [1, 1] and c = [0, 0] (no signal): alpha = 6 / 2
    data = AdvantageInput(
        torch.tensor([1.0, 0.0, 1.0, 1.0, 0.0, 0.0]),
        torch.ones(6, 2),
        ["a", "a", "b", "b", "c", "c"],
    )
    out = gpg_advantages(data, AlgorithmSettings())
    close(out.advantages, [[1.5] * 2, [-1.5] * 2, [0.0] * 2, [0.0] * 2, [0.0] * 2, [0.0] * 2])
    assert out.metrics["adv/gpg_alpha"] == 3.0


# --- ReMax: r - r(greedy) ----------------------------------------------------------------------


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("shaping", [True, False])
def test_remax_subtracts_the_greedy_rollouts_reward(seed, shaping):
    data = case(seed, shaping=shaping)
    greedy = {"a": 0.37 + seed / 10, "b": math.nan}  # b's greedy chain was not scored
    data.baselines = torch.tensor([greedy[g] for g in GROUPS], dtype=torch.float64)
    episodes = episodes_of(data)
    expected = {
        key: 0.0 if math.isnan(greedy[group]) else score - greedy[group]
        for key, (group, score, _, _) in episodes.items()
    }
    out = remax_advantages(data, AlgorithmSettings())
    close(out.advantages, expand(expected, data))
    assert out.metrics["adv/missing_baseline"] == 1.0


def test_remax_without_baselines_says_what_it_needs():
    data = AdvantageInput(torch.tensor([1.0]), torch.ones(1, 2), ["g"])
    with pytest.raises(ValueError, match="greedy-rollout reward"):
        remax_advantages(data, AlgorithmSettings())


# --- all three ---------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["remax", "opo", "gpg"])
@pytest.mark.parametrize("reward", [0.7, 1 / 3, 1e6 + 0.1])
def test_equal_scores_give_exactly_zero(name, reward):
    count = 8
    data = AdvantageInput(
        torch.full((count,), reward, dtype=torch.float32), torch.ones(count, 3), ["g"] * count
    )
    data.baselines = torch.full((count,), reward, dtype=torch.float32)
    out = get_advantage_estimator(name)(data, AlgorithmSettings())
    assert out.advantages.dtype == torch.float32
    assert torch.count_nonzero(out.advantages) == 0
