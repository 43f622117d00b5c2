"""GiGPO's credit per turn (agentfly_cli/algorithms/turn_credit.py): turn spans read from
trajectories, step groups of turns that answered the same state, and the advantages."""

from __future__ import annotations

import math

import pytest
import torch

from agentfly_cli.algorithms.advantages import grpo_advantages
from agentfly_cli.algorithms.interfaces import AdvantageInput, get_advantage_estimator
from agentfly_cli.algorithms.turn_credit import gigpo_advantages, turn_spans
from agentfly_cli.settings.algorithm import AlgorithmSettings
from agentfly_cli.train.tensors.batch import TrainRow, trained_mask
from agentfly_cli.trajectory import Trajectory

PROMPT = [1, 2, 3]
ROOT2 = math.sqrt(0.5)  # (1 - 0.5) / unbiased std of [1, 0]


def chain(*steps: tuple[list[int], list[int]], reward: float, group: str = "g") -> Trajectory:
    """A chain from PROMPT: (action ids, observation ids) per turn; an empty observation
    ends it."""
    t = Trajectory(group_id=group, reward=reward)
    t.append("prompt", PROMPT, sampled=False)
    for action, observation in steps:
        t.append("assistant", action, sampled=True)
        if observation:
            t.append("observation", observation, sampled=False)
    return t


def data_of(chains: list[Trajectory]) -> AdvantageInput:
    rows = [TrainRow(t.ids, t.loss_mask, t.group_id) for t in chains]
    return AdvantageInput(
        torch.tensor([float(t.reward) for t in chains]),
        trained_mask(rows),
        [t.group_id for t in chains],
        turns=[turn_spans(t) for t in chains],
    )


def test_turn_spans_are_trained_columns_keyed_by_what_the_turn_answered():
    t = chain(([10, 11], [50, 51, 52]), ([12], [60]), ([13, 14, 15], []), reward=1.0)
    spans = turn_spans(t)
    assert [(s.start, s.end) for s in spans] == [(0, 2), (2, 3), (3, 6)]
    assert [s.state for s in spans] == [tuple(PROMPT), (50, 51, 52), (60,)]
    # the columns pick exactly each turn's sampled tokens out of the trained ones
    trained = [i for i, m in zip(t.ids, t.loss_mask, strict=True) if m]
    assert [trained[s.start : s.end] for s in spans] == [[10, 11], [12], [13, 14, 15]]


def test_a_chain_without_turn_records_is_one_turn_answering_its_prompt():
    t = Trajectory(ids=[1, 2, 3, 7, 8], loss_mask=[0, 0, 0, 1, 1], group_id="g", reward=1.0)
    (span,) = turn_spans(t)
    assert (span.state, span.start, span.end) == ((1, 2, 3), 0, 2)
    assert turn_spans(Trajectory(ids=[1, 2], loss_mask=[0, 0])) == []


def test_first_turns_share_the_prompt_state_and_get_step_credit():
    config = AlgorithmSettings(advantage="gigpo", turn_gamma=0.9, turn_weight=1.0)
    win = chain(([10], [50]), ([11], []), reward=1.0)
    lose = chain(([20], [60]), ([21], []), reward=0.0)
    out = gigpo_advantages(data_of([win, lose]), config)
    episode = ROOT2
    # first turns: one step group (the prompt), returns 0.9 and 0 -> +-ROOT2 again;
    # second turns answered different observations: groups of one, no step credit
    expected = torch.tensor([[episode + ROOT2, episode], [-episode - ROOT2, -episode]])
    torch.testing.assert_close(out.advantages, expected, rtol=0, atol=1e-5)  # adv_eps
    assert out.metrics == {"adv/turns": 4.0, "adv/turns_in_step_groups": 0.5}


def test_a_loop_back_to_a_state_makes_the_wasted_action_worse_than_the_next_one():
    """Both chains win, so GRPO gives nothing; GiGPO prefers the direct path's actions."""
    config = AlgorithmSettings(advantage="gigpo")
    direct = chain(([10], [50]), ([11], []), reward=1.0)  # prompt -> S -> done
    looping = chain(([12], [50]), ([13], [50]), ([11], []), reward=1.0)  # S, wasted, S again
    data = data_of([direct, looping])
    assert torch.count_nonzero(grpo_advantages(data, config).advantages) == 0
    out = gigpo_advantages(data, config).advantages
    # state S: direct's last turn (return 1), looping's wasted turn (0.95^1) and last (1)
    assert out[1, 1] < 0 < out[0, 1]  # the action that looped back to S
    assert out[1, 2] > 0 and out[1, 2] == pytest.approx(out[0, 1].item())
    assert out[1, 0] < out[0, 0]  # from the prompt: the longer chain's first action


def test_equal_rewards_in_equal_states_give_exactly_zero_and_groups_stay_apart():
    config = AlgorithmSettings(advantage="gigpo")
    same = [chain(([10], [50]), ([11], []), reward=0.7, group=g) for g in "aab"]
    out = gigpo_advantages(data_of(same), config)
    assert torch.count_nonzero(out.advantages) == 0
    # the same state in another task's group is another step group
    other = [chain(([10], []), reward=r, group=g) for g, r in (("a", 1.0), ("b", 0.0))]
    assert torch.count_nonzero(gigpo_advantages(data_of(other), config).advantages) == 0


def test_turn_weight_zero_is_grpo_and_the_output_is_zero_off_the_mask():
    chains = [
        chain(([10, 11], [50]), ([12], []), reward=1.0),
        chain(([20], [60]), ([21, 22, 23], []), reward=0.0),
        chain(([30], []), reward=0.5),
    ]
    data = data_of(chains)
    grpo = grpo_advantages(data, AlgorithmSettings())
    plain = gigpo_advantages(data, AlgorithmSettings(advantage="gigpo", turn_weight=0.0))
    torch.testing.assert_close(plain.advantages, grpo.advantages)
    full = gigpo_advantages(data, AlgorithmSettings(advantage="gigpo")).advantages
    assert torch.all(full[data.mask == 0] == 0) and torch.count_nonzero(full) > 0


def test_gigpo_is_registered_and_needs_turns():
    estimator = get_advantage_estimator("gigpo")
    assert estimator.group_relative
    data = data_of([chain(([10], []), reward=1.0), chain(([11], []), reward=0.0)])
    data.turns = None
    with pytest.raises(ValueError, match="gigpo needs each row's turns"):
        estimator(data, AlgorithmSettings(advantage="gigpo"))
