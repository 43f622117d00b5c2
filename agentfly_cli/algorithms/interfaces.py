"""The RL algorithm settings, the estimator/loss interfaces, and their lookup by name.

This module does not import torch, so configs can be built and validated cheaply. The
estimators live in :mod:`agentfly_cli.algorithms.advantages`, the losses in
:mod:`agentfly_cli.algorithms.losses`; both are registered (like a plugin's) through the
``register_algorithms`` hook and found by :func:`get_advantage_estimator` and
:func:`get_policy_loss`.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from agentfly_cli.errors import UnknownComponentError
from agentfly_cli.plugin_host.registry import RegisteredEstimator
from agentfly_cli.settings.algorithm import AlgorithmSettings

if TYPE_CHECKING:
    import torch


@dataclass
class AdvantageInput:
    """What an advantage estimator sees: one row per trajectory."""

    rewards: torch.Tensor  # [B] one scalar per trajectory
    mask: torch.Tensor  # [B, T] 1 on trained (model-sampled) tokens
    group_ids: Sequence[Hashable]  # [B] trajectories of one task share a key
    values: torch.Tensor | None = None  # [B, T] value-head estimates (gae)
    token_rewards: torch.Tensor | None = None  # [B, T] shaping, e.g. the KL-in-reward penalty
    turns: Sequence[Sequence[TurnSpan]] | None = None  # [B] each row's model turns (gigpo)
    # [B] rows with one key are the segments of one episode (an agent's session), which counts
    # once in its group's statistics; None (or a None key): each row is an episode of its own
    episodes: Sequence[Hashable | None] | None = None
    # [B] the reward of the greedy (temperature 0) rollout of each row's task (remax); NaN
    # where its task has none
    baselines: torch.Tensor | None = None


@dataclass(frozen=True)
class TurnSpan:
    """One model turn of a row: the state it answered and its trained tokens, as columns
    ``start:end`` of the ``[B, T]`` trained-token matrices."""

    state: Hashable  # the state it answered (turn_state: the last observation, or the prefix)
    start: int
    end: int
    # its place in its episode's time (agent captures: the gateway's record order); spans of
    # one episode with the same step are one turn (a fork's copy); None: in row order
    step: int | None = None


@dataclass
class AdvantageOutput:
    """Per-token advantages (0 where mask is 0) and, where defined, returns for a value loss."""

    advantages: torch.Tensor  # [B, T]
    returns: torch.Tensor | None = None  # [B, T]
    metrics: dict[str, float] = field(default_factory=dict)  # logged with the step's metrics


AdvantageEstimator = Callable[[AdvantageInput, AlgorithmSettings], AdvantageOutput]
PolicyLoss = Callable[..., "tuple[torch.Tensor, dict[str, float]]"]


def needs_reference(config: AlgorithmSettings) -> bool:
    """Whether a reference model must be loaded (only when the KL has a weight)."""
    return config.kl_coef > 0.0


def zero_variance_groups(rewards: Any, group_ids: Sequence[Hashable]) -> list[bool]:
    """DAPO dynamic sampling: ``keep[i]`` is False when all rewards of i's group are equal."""
    values = [float(r) for r in rewards]
    if len(values) != len(group_ids):
        raise ValueError(f"{len(values)} rewards but {len(group_ids)} group ids")
    spans: dict[Hashable, tuple[float, float]] = {}
    for key, value in zip(group_ids, values, strict=True):
        low, high = spans.get(key, (value, value))
        spans[key] = (min(low, value), max(high, value))
    return [spans[key][0] != spans[key][1] for key in group_ids]


def get_advantage_estimator(name: str, host: Any = None) -> RegisteredEstimator:
    """The advantage estimator registered as ``name`` (a built-in or a plugin's), from
    ``host`` (default: the installed plugins)."""
    return _lookup("advantages", "advantage estimator", "algorithm.advantage", name, host)


def get_policy_loss(name: str, host: Any = None) -> PolicyLoss:
    """The policy loss registered as ``name`` (a built-in or a plugin's), from ``host``
    (default: the installed plugins)."""
    return _lookup("policy_losses", "policy loss", "algorithm.policy_loss", name, host)


def _lookup(kind: str, label: str, setting: str, name: str, host: Any) -> Any:
    if host is None:
        from agentfly_cli.plugin_host.plugins import get_plugin_host

        host = get_plugin_host()
    registry = host.components.of(kind)
    try:
        return registry.get(name)
    except UnknownComponentError:
        close = difflib.get_close_matches(name, list(registry), n=1)
        hint = f"did you mean '{close[0]}'? " if close else ""
        available = ", ".join(registry) or "none"
        failed = ", ".join(p.name for p in host.failed)
        note = f"; plugin(s) {failed} failed to load (see `agentfly plugins`)" if failed else ""
        raise UnknownComponentError(
            f"unknown {label} '{name}' in {setting}; {hint}available: {available}{note}"
        ) from None
