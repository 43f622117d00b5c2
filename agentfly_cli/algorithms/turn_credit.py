"""Credit per turn for multi-turn agents: GiGPO's group-in-group advantages.

GiGPO (Feng et al. 2025, "Group-in-Group Policy Optimization for LLM Agent Training") adds a
step-level advantage to GRPO's episode-level one. Turns of one task's episodes that answered
the same state (an *anchor state*) form a step group, wherever in their episodes they came, an
episode's repeated visits included. The state (``turn_state``) is the exact tokens the model
saw last (the prompt for the first turn, else the observation before the turn), or the whole
token prefix the turn answered, which is what a black-box agent's turn is known to share with
another (``auto``: prefix for agent episodes, observation for the recipe's turn loop). Each
turn's return is its episode's score discounted by the turns left in the episode
(``turn_gamma ** (turns after it)``; an agent episode's turns in all its segments, in the
order the gateway recorded them), and its step advantage is that return normalised within its
step group (0 in a group of one). A turn's tokens get

    A = A_episode + turn_weight * A_step

so of two actions taken in the same state, the one that led to the reward sooner gets more
credit, even inside episodes whose rewards are equal; a loop back to a state it had already
been in makes the earlier, wasted action worse than the later one.
"""

from __future__ import annotations

import hashlib
from array import array
from collections.abc import Hashable, Sequence

import torch

from agentfly_cli.algorithms.advantages import episode_scores, group_normalised, output_dtype
from agentfly_cli.algorithms.interfaces import AdvantageInput, AdvantageOutput, TurnSpan
from agentfly_cli.settings.algorithm import AlgorithmSettings
from agentfly_cli.trajectory import Trajectory

Place = tuple[int, int, int]  # (row, start, end) of a turn's trained-token columns


def anchor_kind(trajectory: Trajectory, turn_state: str) -> str:
    """``observation`` or ``prefix``: ``auto`` is prefix for an agent (gateway) episode's
    segment (its ``meta`` names the episode), observation otherwise."""
    if turn_state != "auto":
        return turn_state
    return "prefix" if trajectory.meta.get("episode") is not None else "observation"


def turn_spans(
    trajectory: Trajectory, turn_state: str = "observation", mask: Sequence[int] | None = None
) -> list[TurnSpan]:
    """Each assistant turn's trained tokens (as trained-token columns) and the state it
    answered: the tokens of the span before it (``observation``), or a digest of every token
    before it (``prefix``). ``mask``: the loss mask to read (default the trajectory's); a
    turn with no trained token is no turn. A trajectory without turn records is one turn
    answering its prompt."""
    ids = trajectory.ids
    mask = trajectory.loss_mask if mask is None else mask
    trained_before = [0]
    for m in mask:
        trained_before.append(trained_before[-1] + (1 if m else 0))
    turns = trajectory.turns or []
    if not any(turn.role == "assistant" for turn in turns):
        first = list(mask).index(1) if 1 in mask else len(mask)
        return [TurnSpan(tuple(ids[:first]), 0, trained_before[-1])] if first < len(mask) else []
    prefix = anchor_kind(trajectory, turn_state) == "prefix"
    digest = hashlib.blake2b(digest_size=16)
    spans: list[TurnSpan] = []
    state: Hashable = ()
    for turn in turns:
        if turn.role == "assistant":
            start, end = trained_before[turn.start], trained_before[turn.end]
            if prefix:
                state = ("prefix", turn.start, digest.digest())
            if end > start:
                spans.append(TurnSpan(state, start, end, turn.episode_turn))
        elif not prefix:
            state = tuple(ids[turn.start : turn.end])
        if prefix:
            digest.update(array("q", ids[turn.start : turn.end]).tobytes())
    return spans


def episode_turns(segments: Sequence[tuple[int, Sequence[TurnSpan]]]):
    """One episode's distinct turns in time, each as ``(state, places)``: ``segments`` are
    its rows with their spans. When every span has a ``step``, turns are ordered by it and the
    spans of one step are one turn (a fork's copy of a shared prefix); else in row order."""
    spans = [(row, span) for row, row_spans in segments for span in row_spans]
    if not (spans and all(span.step is not None for _, span in spans)):
        return [(span.state, [(row, span.start, span.end)]) for row, span in spans]
    by_step: dict[int, tuple[Hashable, list[Place]]] = {}
    for row, span in spans:
        by_step.setdefault(span.step, (span.state, []))[1].append((row, span.start, span.end))
    return [by_step[step] for step in sorted(by_step)]


def gigpo_advantages(data: AdvantageInput, config: AlgorithmSettings) -> AdvantageOutput:
    """GRPO's episode advantage plus ``turn_weight`` x the turn's advantage in its step
    group (turns of one group that answered the same state); see the module's docstring."""
    if data.turns is None or len(data.turns) != data.mask.shape[0]:
        raise ValueError(
            "gigpo needs each row's turns (AdvantageInput.turns, one list per row): "
            "the trainer passes them; a direct caller builds them with turn_spans()"
        )
    mask, episodes, scores = episode_scores(data)
    episode, _ = group_normalised(scores, episodes.groups, config)
    advantages = episode[episodes.index][:, None] * mask
    keys, returns, places = [], [], []
    for number, rows in enumerate(episodes.rows):
        turns = episode_turns([(row, data.turns[row]) for row in rows])
        for position, (state, where) in enumerate(turns):
            keys.append((episodes.groups[number], state))
            returns.append(config.turn_gamma ** (len(turns) - 1 - position) * scores[number])
            places.append(where)
    shared = 0.0
    if keys:
        step, step_count = group_normalised(torch.stack(returns), keys, config)
        for where, value in zip(places, step.tolist(), strict=True):
            for row, start, end in where:
                advantages[row, start:end] += config.turn_weight * value
        shared = float((step_count > 1).double().mean())
    metrics = {"adv/turns": float(len(keys)), "adv/turns_in_step_groups": shared}
    out = torch.where(mask.bool(), advantages, 0.0).to(output_dtype(data))
    return AdvantageOutput(out, metrics=metrics)
