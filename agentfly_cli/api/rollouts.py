"""Rollouts and evaluations as functions: one call, one :class:`Experiment` made and run."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from agentfly_cli.api.experiment import Experiment, OnFinish, Tasks, Tools, _no_running_loop
from agentfly_cli.api.results import EvalReport, RolloutResult
from agentfly_cli.errors import UserError

if TYPE_CHECKING:
    from agentfly_cli.settings.run import RunSettings


async def run_rollout_async(
    settings: RunSettings | str | Path,
    *,
    tasks: Tasks | None = None,
    tools: Tools | None = None,
    reward: Any = None,
    out: str | Path | None = None,
    on_finish: OnFinish | None = None,
    host: Any = None,
) -> RolloutResult:
    """Roll out the tasks (``rollout.n`` chains each): the token-exact ``trajectories``.
    ``tasks``, ``tools`` and ``reward`` replace the settings' own (see :class:`Experiment`);
    ``out``: also write the chains as JSONL."""
    experiment = Experiment(settings, tasks=tasks, tools=tools, reward=reward, host=host)
    return await experiment.rollout_async(out=out, on_finish=on_finish)


def run_rollout(
    settings: RunSettings | str | Path,
    *,
    tasks: Tasks | None = None,
    tools: Tools | None = None,
    reward: Any = None,
    out: str | Path | None = None,
    on_finish: OnFinish | None = None,
    host: Any = None,
) -> RolloutResult:
    """Blocking :func:`run_rollout_async`."""
    _no_running_loop("run_rollout")
    experiment = Experiment(settings, tasks=tasks, tools=tools, reward=reward, host=host)
    return experiment.rollout(out=out, on_finish=on_finish)


async def run_eval_async(
    settings: RunSettings | str | Path,
    *,
    threshold: float = 1.0,
    tasks: Tasks | None = None,
    tools: Tools | None = None,
    reward: Any = None,
    out: str | Path | None = None,
    on_finish: OnFinish | None = None,
    host: Any = None,
) -> EvalReport:
    """Score the held-out tasks: pass@k and mean@k per task and overall, as ``agentfly eval``
    reports them (a chain passes when its reward >= ``threshold``)."""
    experiment = _for_eval(settings, tasks, tools, reward, host)
    return await experiment.evaluate_async(threshold=threshold, out=out, on_finish=on_finish)


def run_eval(
    settings: RunSettings | str | Path,
    *,
    threshold: float = 1.0,
    tasks: Tasks | None = None,
    tools: Tools | None = None,
    reward: Any = None,
    out: str | Path | None = None,
    on_finish: OnFinish | None = None,
    host: Any = None,
) -> EvalReport:
    """Blocking :func:`run_eval_async`."""
    _no_running_loop("run_eval")
    experiment = _for_eval(settings, tasks, tools, reward, host)
    return experiment.evaluate(threshold=threshold, out=out, on_finish=on_finish)


def _for_eval(settings: Any, tasks: Any, tools: Any, reward: Any, host: Any) -> Experiment:
    experiment = Experiment(settings, tasks=tasks, tools=tools, reward=reward, host=host)
    if not experiment.settings.reward and reward is None:
        raise UserError("run_eval needs a reward: set reward in the settings or pass reward=")
    return experiment
