"""One training step's trajectories as tensors (:class:`StepBatch`), after dropping those it
cannot train on: an infrastructure failure (:mod:`.infra_filter`), not token-exact, nothing
sampled (or nothing left to train once ``branch_credit: none`` took an agent episode's branch
ends off), or (with dynamic sampling) a group whose rewards are all equal."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from agentfly_cli.algorithms import interfaces as alg
from agentfly_cli.algorithms.interfaces import TurnSpan
from agentfly_cli.algorithms.turn_credit import turn_spans
from agentfly_cli.errors import UserError
from agentfly_cli.rollout.infra_failures import infra_failure
from agentfly_cli.settings.algorithm import AlgorithmSettings
from agentfly_cli.train.tensors.batch import TrainRow, token_matrix, trained_mask
from agentfly_cli.train.tensors.branches import credited, episode_key
from agentfly_cli.train.tensors.infra_filter import without_infra_failures
from agentfly_cli.trajectory import Trajectory


@dataclass
class StepBatch:
    """One step's trajectories as training tensors."""

    rows: list[TrainRow]
    turns: list[list[TurnSpan]]  # each row's model turns (per-turn credit: gigpo)
    episodes: list  # each row's agent episode (its segments count once), None: its own
    mask: torch.Tensor  # [B, L] trained tokens
    rewards: torch.Tensor  # [B]
    sampler_logprobs: torch.Tensor  # [B, L] (0 where the backend gave none)
    has_sampler_logprobs: bool
    old_logprobs: torch.Tensor | None = None
    ref_logprobs: torch.Tensor | None = None
    teacher_logprobs: torch.Tensor | None = None  # on-policy distillation's teacher
    old_values: torch.Tensor | None = None
    advantages: torch.Tensor | None = None
    returns: torch.Tensor | None = None
    # [B, L] the tokens the loss trains: ``mask`` less those masked importance sampling
    # rejected (tis_mode: mask); None: ``mask``
    loss_mask: torch.Tensor | None = None
    # [B] the reward of the greedy chain of each row's task (remax), NaN where it has none;
    # None: no greedy chain was rolled out
    baselines: torch.Tensor | None = None

    @property
    def trained_mask(self) -> torch.Tensor:
        """The tokens the loss, its normalisers and its entropy and KL terms cover."""
        return self.mask if self.loss_mask is None else self.loss_mask

    @classmethod
    def of(cls, trajectories: list[Trajectory], algo: AlgorithmSettings | None = None) -> StepBatch:
        """The tensors of ``trajectories`` (each token-exact, with a reward); ``algo``'s
        ``turn_state`` keys the turns' states (default: ``auto``)."""
        turn_state = "auto" if algo is None else algo.turn_state
        rows = [TrainRow(t.ids, t.loss_mask, t.group_id) for t in trajectories]
        sampler = [
            [lp for lp, m in zip(t.logprobs, t.loss_mask, strict=True) if m] for t in trajectories
        ]
        has_sampler = all(lp is not None for row in sampler for lp in row)
        sampler = [[0.0 if lp is None else lp for lp in row] for row in sampler]
        return cls(
            rows,
            [turn_spans(t, turn_state) for t in trajectories],
            [episode_key(t) for t in trajectories],
            trained_mask(rows),
            torch.tensor([float(t.reward) for t in trajectories]),
            token_matrix(rows, sampler),
            has_sampler,
        )


def split_greedy(
    trajectories: list[Trajectory], exclude_infra: bool = False
) -> tuple[list[Trajectory], dict[str, float] | None]:
    """The sampled chains, and the reward of each group's greedy chain (``meta["greedy"]``,
    ReMax's baseline: never trained; a chain not scored gives none, nor, with
    ``exclude_infra``, one that ended in an infrastructure failure); None without any."""
    greedy = [t for t in trajectories if t.meta.get("greedy")]
    if not greedy:
        return trajectories, None
    if exclude_infra:
        greedy = [t for t in greedy if infra_failure(t) is None]
    rewards = {t.group_id: float(t.reward) for t in greedy if t.reward is not None}
    return [t for t in trajectories if not t.meta.get("greedy")], rewards


def greedy_baselines(batch: StepBatch, rewards: dict[str, float] | None) -> torch.Tensor | None:
    """[B] each row's group's greedy reward (NaN where there is none), or None."""
    if rewards is None:
        return None
    return torch.tensor([rewards.get(row.group, float("nan")) for row in batch.rows])


def trainable(
    trajectories: list[Trajectory], algo: AlgorithmSettings, metrics: dict[str, float]
) -> list[Trajectory]:
    """The trajectories a step trains on, as trained (:func:`~.branches.credited`); what was
    dropped, and why, goes to ``metrics``."""
    usable = []
    scored = without_infra_failures(trajectories, algo, metrics)  # the failure policy
    for t in credited(scored, algo.branch_credit, metrics):
        if not t.token_exact or sum(t.loss_mask) == 0:
            continue
        if t.reward is None:
            raise UserError(
                "trajectories have no reward: set `reward:` in the recipe (e.g. exact_match)"
            )
        usable.append(t)
    metrics["train/dropped_unusable"] = float(len(scored) - len(usable))
    if algo.dynamic_sampling and usable:
        rewards = [t.reward for t in usable]
        keep = alg.zero_variance_groups(rewards, [t.group_id for t in usable])
        metrics["train/dropped_zero_variance"] = float(len(usable) - sum(keep))
        usable = [t for t, k in zip(usable, keep, strict=True) if k]
    metrics["train/trajectories"] = float(len(usable))
    return usable
