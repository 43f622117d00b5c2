"""Checks of a training run's settings that need more than one section (or the world size):
each fails with a one-line :class:`UserError` before anything is rolled out."""

from __future__ import annotations

from typing import Any

from agentfly_cli.errors import UserError


def check_reward(config: Any, reward_component: Any) -> None:
    """Training needs a reward: from the recipe, or an object passed in."""
    if not config.reward and reward_component is None:
        raise UserError(
            "training needs a reward: set `reward:` in the recipe or pass --reward "
            "(e.g. exact_match); see `agentfly rewards list`"
        )


def check_group_size(advantage_fn: Any, algo: Any, n: int) -> None:
    """Group-relative estimators compare the chains of a task: one chain learns nothing."""
    if advantage_fn.group_relative and n < 2:
        raise UserError(
            f"trainer.algorithm.advantage {algo.advantage} compares the chains of a "
            f"task, but rollout.n is {n}; set rollout.n to 2 or more (e.g. 8)"
        )


def check_world_size(settings: Any, world: int) -> None:
    """Each rank trains an equal share of a step's tasks; async runs in one process."""
    if settings.mode == "async" and world > 1:
        raise UserError(
            f"trainer.mode: async runs in one process for now, and this run has {world} "
            "ranks; train with trainer.mode: sync, or on one process"
        )
    if settings.tasks_per_step % world:
        raise UserError(
            f"trainer.tasks_per_step ({settings.tasks_per_step}) must split evenly "
            f"over the {world} ranks; make it a multiple of {world}"
        )


def check_agent(config: Any) -> None:
    """An agent program trains sampled with the rollout's settings (the trainer's
    log-probabilities use ``rollout.temperature``)."""
    agent = config.agent
    if agent is None:
        return
    if agent.sampling != "rollout":
        raise UserError(
            "agent.sampling: agent cannot train: the trainer's log-probabilities assume "
            "rollout.temperature, top_p and top_k; use agent.sampling: rollout"
        )
