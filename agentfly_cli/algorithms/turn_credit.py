"""Credit per turn for multi-turn agents: GiGPO's group-in-group advantages.

GiGPO (Feng et al. 2025, "Group-in-Group Policy Optimization for LLM Agent Training") adds a
step-level advantage to GRPO's episode-level one. Turns of one task's chains that answered the
same state (an *anchor state*: here the exact tokens the model saw last, the prompt for the
first turn, else the observation before the turn) form a step group, wherever in their chains
they came, a chain's repeated visits included. Each turn's return is its chain's score
discounted by the turns left (``turn_gamma ** (turns after it)``), and its step advantage is
that return normalised within its step group (0 in a group of one). A turn's tokens get

    A = A_episode + turn_weight * A_step

so of two actions taken in the same state, the one that led to the reward sooner gets more
credit, even inside chains whose episode rewards are equal; a loop back to a state it had
already been in makes the earlier, wasted action worse than the later one.
"""

from __future__ import annotations

from collections.abc import Hashable

import torch

from agentfly_cli.algorithms.advantages import group_normalised, mask_and_scores, output_dtype
from agentfly_cli.algorithms.interfaces import AdvantageInput, AdvantageOutput, TurnSpan
from agentfly_cli.settings.algorithm import AlgorithmSettings
from agentfly_cli.trajectory import Trajectory


def turn_spans(trajectory: Trajectory) -> list[TurnSpan]:
    """Each assistant turn's trained tokens (as trained-token columns) and the state it
    answered: the tokens of the span before it. A trajectory without turn records is one turn
    answering its prompt."""
    ids, mask = trajectory.ids, trajectory.loss_mask
    trained_before = [0]
    for m in mask:
        trained_before.append(trained_before[-1] + (1 if m else 0))
    turns = trajectory.turns or []
    if not any(turn.role == "assistant" for turn in turns):
        first = mask.index(1) if 1 in mask else len(mask)
        return [TurnSpan(tuple(ids[:first]), 0, trained_before[-1])] if first < len(mask) else []
    spans: list[TurnSpan] = []
    state: Hashable = ()
    for turn in turns:
        if turn.role != "assistant":
            state = tuple(ids[turn.start : turn.end])
            continue
        start, end = trained_before[turn.start], trained_before[turn.end]
        if end > start:
            spans.append(TurnSpan(state, start, end))
    return spans


def gigpo_advantages(data: AdvantageInput, config: AlgorithmSettings) -> AdvantageOutput:
    """GRPO's episode advantage plus ``turn_weight`` x the turn's advantage in its step
    group (turns of one group that answered the same state); see the module's docstring."""
    if data.turns is None or len(data.turns) != data.mask.shape[0]:
        raise ValueError(
            "gigpo needs each row's turns (AdvantageInput.turns, one list per row): "
            "the trainer passes them; a direct caller builds them with turn_spans()"
        )
    mask, scores = mask_and_scores(data)
    episode, _ = group_normalised(scores, data.group_ids, config)
    advantages = episode[:, None] * mask
    keys, returns, where = [], [], []
    for row, spans in enumerate(data.turns):
        for index, span in enumerate(spans):
            keys.append((data.group_ids[row], span.state))
            returns.append(config.turn_gamma ** (len(spans) - 1 - index) * scores[row])
            where.append((row, span.start, span.end))
    shared = 0.0
    if keys:
        step, step_count = group_normalised(torch.stack(returns), keys, config)
        for (row, start, end), value in zip(where, step.tolist(), strict=True):
            advantages[row, start:end] += config.turn_weight * value
        shared = float((step_count > 1).double().mean())
    metrics = {"adv/turns": float(len(keys)), "adv/turns_in_step_groups": shared}
    out = torch.where(mask.bool(), advantages, 0.0).to(output_dtype(data))
    return AdvantageOutput(out, metrics=metrics)
