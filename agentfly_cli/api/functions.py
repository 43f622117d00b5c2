"""The API's functions under their first address (they live in the modules of their concept:
:mod:`~agentfly_cli.api.settings`, :mod:`~agentfly_cli.api.rollouts`,
:mod:`~agentfly_cli.api.training`)."""

from __future__ import annotations

from agentfly_cli.api.rollouts import run_eval, run_eval_async, run_rollout, run_rollout_async
from agentfly_cli.api.settings import for_eval, load_config, load_settings
from agentfly_cli.api.training import run_training, run_training_async

__all__ = [
    "for_eval",
    "load_config",
    "load_settings",
    "run_eval",
    "run_eval_async",
    "run_rollout",
    "run_rollout_async",
    "run_training",
    "run_training_async",
]
