"""The RL algorithm settings, the estimator/loss interfaces, and their lookup by name.

This module does not import torch, so configs can be built and validated cheaply. The
estimators live in :mod:`agentfly_cli.train.advantages`, the losses in
:mod:`agentfly_cli.train.losses`; both are registered (like a plugin's) through the
``register_algorithms`` hook and found by :func:`get_advantage_estimator` and
:func:`get_policy_loss`.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from agentfly_cli.errors import UnknownComponentError
from agentfly_cli.registry import RegisteredEstimator

if TYPE_CHECKING:
    import torch

LossAggregation = Literal["token-mean", "seq-mean-token-mean", "seq-mean-token-sum-norm"]
#: ``loss_agg`` of a policy loss when the user sets none (others: token-mean). GSPO's objective
#: is a mean over sequences of per-sequence terms (Zheng et al. 2025; verl's GSPO recipe).
DEFAULT_LOSS_AGG = {"gspo": "seq-mean-token-mean"}


class AlgorithmConfig(BaseModel):
    """How advantages and the policy loss are computed."""

    model_config = ConfigDict(extra="forbid")

    advantage: str = Field(
        "grpo",
        description="Advantage estimator: grpo, rloo, reinforce_pp, reinforce_pp_baseline, gae "
        "or one a plugin registers.",
    )
    policy_loss: str = Field("ppo", description="Policy loss: ppo, gspo or one a plugin registers.")
    loss_agg: LossAggregation = Field(
        "token-mean",
        description="How per-token losses become one number: token-mean, seq-mean-token-mean "
        "or seq-mean-token-sum-norm (Dr.GRPO). Unset, gspo uses seq-mean-token-mean.",
    )
    norm_adv_by_std: bool = Field(
        True, description="GRPO: divide by the group's std (False is Dr.GRPO)."
    )
    gamma: float = Field(1.0, ge=0.0, le=1.0, description="Discount per trained token.")
    lam: float = Field(1.0, ge=0.0, le=1.0, description="GAE lambda.")
    clip_ratio_low: float = Field(
        0.2, ge=0.0, description="The ratio is clipped below at 1 - clip_ratio_low."
    )
    clip_ratio_high: float = Field(
        0.2, ge=0.0, description="The ratio is clipped above at 1 + clip_ratio_high (DAPO: 0.28)."
    )
    clip_ratio_c: float | None = Field(
        None, description="Dual-clip bound for negative advantages (e.g. 3.0); None is off."
    )
    kl_coef: float = Field(
        0.0, ge=0.0, description="Weight of the KL to the reference model; 0 loads no reference."
    )
    kl_kind: Literal["k1", "k2", "k3"] = Field(
        "k3", description="KL estimator of the KL loss term: k1, k2 or k3 (Schulman)."
    )
    kl_in_reward: bool = Field(
        False,
        description="Subtract kl_coef * k1 from the per-token reward instead of adding a KL loss.",
    )
    entropy_coef: float = Field(0.0, ge=0.0, description="Weight of the entropy bonus.")
    tis_cap: float | None = Field(
        None,
        gt=0.0,
        description="Truncated importance sampling cap on trainer/sampler probability ratios "
        "(e.g. 2.0); None is off.",
    )
    dynamic_sampling: bool = Field(
        False, description="DAPO: drop groups whose rewards are all equal."
    )
    value_coef: float = Field(0.5, ge=0.0, description="Weight of the value loss (gae).")
    value_clip: float | None = Field(
        0.2, gt=0.0, description="Clip range of the value update; None is unclipped."
    )
    seq_len_constant: int | None = Field(
        None,
        ge=1,
        description="Dr.GRPO normaliser of seq-mean-token-sum-norm; None: the generation budget.",
    )
    adv_eps: float = Field(1e-6, ge=0.0, description="Added to a std before dividing by it.")

    @model_validator(mode="after")
    def _loss_agg_of_the_policy_loss(self) -> AlgorithmConfig:
        """A policy loss with its own aggregation (gspo) gets it unless loss_agg is set."""
        if "loss_agg" not in self.model_fields_set and self.policy_loss in DEFAULT_LOSS_AGG:
            self.loss_agg = DEFAULT_LOSS_AGG[self.policy_loss]
        return self

    @field_validator("clip_ratio_c")
    @classmethod
    def _dual_clip_above_one(cls, value: float | None) -> float | None:
        if value is not None and value <= 1.0:
            raise ValueError(f"clip_ratio_c must be > 1 (e.g. 3.0), got {value}")
        return value


@dataclass
class AdvantageInput:
    """What an advantage estimator sees: one row per trajectory."""

    rewards: torch.Tensor  # [B] one scalar per trajectory
    mask: torch.Tensor  # [B, T] 1 on trained (model-sampled) tokens
    group_ids: Sequence[Hashable]  # [B] trajectories of one task share a key
    values: torch.Tensor | None = None  # [B, T] value-head estimates (gae)
    token_rewards: torch.Tensor | None = None  # [B, T] shaping, e.g. the KL-in-reward penalty


@dataclass
class AdvantageOutput:
    """Per-token advantages (0 where mask is 0) and, where defined, returns for a value loss."""

    advantages: torch.Tensor  # [B, T]
    returns: torch.Tensor | None = None  # [B, T]


AdvantageEstimator = Callable[[AdvantageInput, AlgorithmConfig], AdvantageOutput]
PolicyLoss = Callable[..., "tuple[torch.Tensor, dict[str, float]]"]


def needs_reference(config: AlgorithmConfig) -> bool:
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
        from agentfly_cli.plugins import get_plugin_host

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
