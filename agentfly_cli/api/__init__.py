"""The typed public API, what the CLI itself runs: settings (:mod:`.settings`), rollouts and
evaluations (:mod:`.rollouts`), training (:mod:`.training`), an :class:`~.experiment.Experiment`
that binds a run's components once, and the results (:mod:`.results`); the command groups'
modules beside them. See docs/python.md.

The functions import on first use (``from agentfly_cli.api import run_rollout`` still works, as
it did when the API was one module), so importing a module of this package stays cheap.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from agentfly_cli.plugin_host.lazy_exports import lazy_exports

_EXPORTS = {
    "load_settings": "agentfly_cli.api.settings",
    "load_config": "agentfly_cli.api.settings",
    "for_eval": "agentfly_cli.api.settings",
    "run_rollout": "agentfly_cli.api.rollouts",
    "run_rollout_async": "agentfly_cli.api.rollouts",
    "run_eval": "agentfly_cli.api.rollouts",
    "run_eval_async": "agentfly_cli.api.rollouts",
    "run_training": "agentfly_cli.api.training",
    "run_training_async": "agentfly_cli.api.training",
    "Experiment": "agentfly_cli.api.experiment",
}

if TYPE_CHECKING:
    from agentfly_cli.api.experiment import Experiment
    from agentfly_cli.api.rollouts import run_eval, run_eval_async, run_rollout, run_rollout_async
    from agentfly_cli.api.settings import for_eval, load_config, load_settings
    from agentfly_cli.api.training import run_training, run_training_async

__all__ = [
    "Experiment",
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

__getattr__ = lazy_exports(globals(), _EXPORTS)
