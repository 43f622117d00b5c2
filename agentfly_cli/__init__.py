"""agentfly-cli: train LM agents with reinforcement learning on multi-turn tool use.

The public API is imported lazily, so that ``agentfly --help`` stays fast and never loads
torch::

    from agentfly_cli import tool, reward, hookimpl
    from agentfly_cli import load_settings, run_rollout, run_eval, run_training  # + *_async
    from agentfly_cli import Experiment  # components bound once, for a notebook
    from agentfly_cli import RolloutResult, EvalReport, TrainingResult, Trajectory, RunSettings

See docs/python.md.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from agentfly_cli.plugin_host.lazy_exports import lazy_exports

__version__ = "0.1.0"

_EXPORTS = {
    "tool": "agentfly_cli.components.tools",
    "Tool": "agentfly_cli.components.tools",
    "ToolResult": "agentfly_cli.components.tools",
    "ToolDefinitionError": "agentfly_cli.components.tools",
    "reward": "agentfly_cli.components.rewards",
    "Reward": "agentfly_cli.components.rewards",
    "RewardResult": "agentfly_cli.components.rewards",
    "CombinedReward": "agentfly_cli.components.rewards",
    "hookimpl": "agentfly_cli.plugin_host.hookspecs",
    "RecipeFamily": "agentfly_cli.plugin_host.registry",
    "Env": "agentfly_cli.envs.base",
    "BaseEnv": "agentfly_cli.envs.base",
    "EnvSpec": "agentfly_cli.envs.base",
    "get_plugin_host": "agentfly_cli.plugin_host.plugins",
    "UserError": "agentfly_cli.errors",
    "load_settings": "agentfly_cli.api.settings",
    "load_config": "agentfly_cli.api.settings",
    "run_rollout": "agentfly_cli.api.rollouts",
    "run_rollout_async": "agentfly_cli.api.rollouts",
    "run_eval": "agentfly_cli.api.rollouts",
    "run_eval_async": "agentfly_cli.api.rollouts",
    "run_training": "agentfly_cli.api.training",
    "run_training_async": "agentfly_cli.api.training",
    "Experiment": "agentfly_cli.api.experiment",
    "RolloutResult": "agentfly_cli.api.results",
    "EvalReport": "agentfly_cli.api.results",
    "TrainingResult": "agentfly_cli.api.results",
    "Trajectory": "agentfly_cli.trajectory",
    "RunSettings": "agentfly_cli.settings.run",
}

__all__ = [
    "BaseEnv",
    "CombinedReward",
    "Env",
    "EnvSpec",
    "EvalReport",
    "Experiment",
    "RecipeFamily",
    "Reward",
    "RewardResult",
    "RolloutResult",
    "RunSettings",
    "Tool",
    "ToolDefinitionError",
    "ToolResult",
    "TrainingResult",
    "Trajectory",
    "UserError",
    "__version__",
    "run_eval",
    "run_eval_async",
    "get_plugin_host",
    "hookimpl",
    "load_config",
    "load_settings",
    "reward",
    "run_rollout",
    "run_rollout_async",
    "tool",
    "run_training",
    "run_training_async",
]

if TYPE_CHECKING:
    from agentfly_cli.api.experiment import Experiment
    from agentfly_cli.api.results import EvalReport, RolloutResult, TrainingResult
    from agentfly_cli.api.rollouts import run_eval, run_eval_async, run_rollout, run_rollout_async
    from agentfly_cli.api.settings import load_config, load_settings
    from agentfly_cli.api.training import run_training, run_training_async
    from agentfly_cli.components.rewards import CombinedReward, Reward, RewardResult, reward
    from agentfly_cli.components.tools import Tool, ToolDefinitionError, ToolResult, tool
    from agentfly_cli.envs.base import BaseEnv, Env, EnvSpec
    from agentfly_cli.errors import UserError
    from agentfly_cli.plugin_host.hookspecs import hookimpl
    from agentfly_cli.plugin_host.plugins import get_plugin_host
    from agentfly_cli.plugin_host.registry import RecipeFamily
    from agentfly_cli.settings.run import RunSettings
    from agentfly_cli.trajectory import Trajectory


__getattr__ = lazy_exports(globals(), _EXPORTS)


def __dir__() -> list[str]:
    return sorted(__all__)
