"""The built-in advantage estimators and policy losses, registered like a plugin's.

Each one is a thin wrapper that imports its torch module on the first call, so loading the
plugins (``agentfly --help``) never imports torch.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

from agentfly_cli.plugin_host.hookspecs import hookimpl

GROUP = {"group_relative": True}
BASELINES = "agentfly_cli.algorithms.baselines"
COVARIANCE = "agentfly_cli.algorithms.covariance_losses"
# name: (function, description, what the trainer must know)
ADVANTAGES = {
    "grpo": (
        "grpo_advantages",
        "GRPO: group-normalised reward (Dr.GRPO: norm_adv_by_std=False)",
        GROUP,
    ),
    "rloo": ("rloo_advantages", "RLOO: reward minus the mean of the group's other samples", GROUP),
    "reinforce_pp": ("reinforce_pp_advantages", "REINFORCE++: discounted returns, whitened", {}),
    "reinforce_pp_baseline": (
        "reinforce_pp_baseline_advantages",
        "REINFORCE++ with the group mean reward as baseline",
        GROUP,
    ),
    "gae": ("gae_advantages", "PPO's GAE with a value head (gamma, lam)", {"needs_values": True}),
    "gigpo": (
        "agentfly_cli.algorithms.turn_credit:gigpo_advantages",
        "GiGPO: GRPO plus credit per turn, in groups of turns that answered the same state",
        GROUP,
    ),
    "remax": (
        f"{BASELINES}:remax_advantages",
        "ReMax: reward minus the reward of the task's greedy rollout (one more chain per task)",
        {"needs_greedy": True},
    ),
    "opo": (
        f"{BASELINES}:opo_advantages",
        "OPO: reward minus the group's length-weighted mean reward (the optimal baseline)",
        GROUP,
    ),
    "gpg": (
        f"{BASELINES}:gpg_advantages",
        "GPG: reward minus the group mean, no std, times B / (B - samples without signal)",
        GROUP,
    ),
}
POLICY_LOSSES = {
    "ppo": ("ppo_loss", "Clipped PPO: clip_ratio_low/high (clip-higher), dual clip_ratio_c"),
    "gspo": ("gspo_loss", "GSPO: clipped sequence-level ratio, gradients per token"),
    "cispo": ("cispo_loss", "CISPO: REINFORCE on every token, clipped stop-gradient IS weight"),
    "sapo": ("sapo_loss", "SAPO: a smooth sigmoid gate (tau_pos, tau_neg) in place of the clip"),
    "clip_cov": (
        f"{COVARIANCE}:clip_cov_loss",
        "Clip-Cov: PPO, and a few high-covariance tokens lose their gradient",
    ),
    "kl_cov": (
        f"{COVARIANCE}:kl_cov_loss",
        "KL-Cov: -A * ratio, plus a |log-ratio| penalty on the top-covariance tokens",
    ),
    "gpg": ("gpg_loss", "GPG: the plain policy gradient -A * log p (no ratio, no clip)"),
}


def lazy(module: str, attribute: str, description: str) -> Callable[..., Any]:
    """A function that imports ``module.attribute`` on its first call and forwards to it."""

    def call(*args: Any, **kwargs: Any) -> Any:
        return getattr(importlib.import_module(module), attribute)(*args, **kwargs)

    call.__name__ = call.__qualname__ = attribute
    call.__doc__ = description
    return call


@hookimpl
def register_algorithms(register):
    for name, (attribute, description, traits) in ADVANTAGES.items():
        module, _, attribute = attribute.rpartition(":")
        function = lazy(module or "agentfly_cli.algorithms.advantages", attribute, description)
        register("advantage", name, function, description, **traits)
    for name, (attribute, description) in POLICY_LOSSES.items():
        module, _, attribute = attribute.rpartition(":")
        function = lazy(module or "agentfly_cli.algorithms.losses", attribute, description)
        register("policy_loss", name, function, description)
