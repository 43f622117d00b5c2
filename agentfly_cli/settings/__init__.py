"""Every setting agentfly reads, in one package, each model named ``...Settings``.

- :mod:`~agentfly_cli.settings.variables`: the ``AGENTFLY_*`` environment variables
  (declared, read and validated there; re-exported here, so ``settings.tool_timeout()`` works).
- :mod:`~agentfly_cli.settings.run`: a run's settings (:class:`RunSettings`): data, chat, reward.
- :mod:`~agentfly_cli.settings.rollout`: ``rollout:`` and ``backend:``.
- :mod:`~agentfly_cli.settings.chat`: how observations come back (``chat.observation``).
- :mod:`~agentfly_cli.settings.envs`: ``envs.NAME`` and the pool limits.
- :mod:`~agentfly_cli.settings.train`: ``trainer:`` and ``sft``; its algorithm and backend.

The models import pydantic only (no torch, nothing else of agentfly's but errors), so a run's
settings are validated before anything heavy loads. Import a model from its module:
``from agentfly_cli.settings.rollout import RolloutSettings``.
"""

from agentfly_cli.settings.variables import (
    NO_LIMIT,
    VARIABLES,
    Variable,
    cache_dir,
    check_environment,
    debug_enabled,
    malloc_tuning_enabled,
    max_observation_chars,
    plugin_selection,
    reward_timeout,
    state_dir,
    tool_timeout,
    worker_threads,
)

__all__ = [
    "NO_LIMIT",
    "VARIABLES",
    "Variable",
    "cache_dir",
    "check_environment",
    "debug_enabled",
    "malloc_tuning_enabled",
    "max_observation_chars",
    "plugin_selection",
    "reward_timeout",
    "state_dir",
    "tool_timeout",
    "worker_threads",
]
