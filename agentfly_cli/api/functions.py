"""The Python API: configs, rollouts, evals and training from a script or a notebook.

Everything the CLI does, as functions (the CLI is a thin layer over these)::

    from agentfly_cli import load_config, run_rollout, run_eval, run_training, tool, reward

``tools`` and ``reward`` take objects made with ``@tool`` and ``@reward`` (defined in the cell,
never registered) in place of the config's names. Each blocking function has an ``_async``
twin to ``await`` where an event loop already runs (Jupyter): the blocking ones refuse to start
a second loop there, with a message saying which twin to use. See docs/python.md.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from agentfly_cli.errors import UserError


def load_config(
    recipe: str | Path | None = None, *, sets: Sequence[str] = (), **fields: Any
) -> Any:
    """A run config: a recipe name or YAML file, then ``fields``, then ``sets``.

    ``fields`` are top-level keys with a value or a dict of sub-keys, merged into the recipe
    (``rollout={"n": 2}`` changes ``rollout.n`` only); ``sets`` are ``--set`` strings
    (``"trainer.steps=2"``). Errors are one-line :class:`UserError` s.
    """
    from agentfly_cli.recipes.loader import load_config as load

    return load(str(recipe) if recipe is not None else None, list(sets), **_dotted(fields))


def _dotted(fields: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    flat: dict[str, Any] = {}
    for key, value in fields.items():
        if isinstance(value, Mapping) and value:
            flat.update(_dotted(value, f"{prefix}{key}."))
        else:
            flat[f"{prefix}{key}"] = str(value) if isinstance(value, Path) else value
    return flat


def for_eval(config: Any) -> Any:
    """``config`` reading the recipe's held-out tasks (unless it chose ``data.split``)."""
    if config.data.holdout and "split" not in config.data.model_fields_set:
        data = config.data.model_copy(update={"split": "heldout"})
        config = config.model_copy(update={"data": data})
    return config


async def run_rollout_async(
    config: Any, *, tools: list | None = None, reward: Any = None, out: str | Path | None = None
) -> Any:
    """Roll out ``config``'s tasks (``rollout.n`` chains each); a ``RolloutResult`` with the
    token-exact ``trajectories``. ``out``: also write them as JSONL."""
    from agentfly_cli.rollout import from_settings as runner

    run = runner.build_rollout(config, tools=tools, reward=reward)
    return await runner.run_rollout_async(run, out=None if out is None else str(out))


def run_rollout(config: Any, **options: Any) -> Any:
    """Blocking :func:`run_rollout_async`."""
    _no_running_loop("run_rollout")
    return asyncio.run(run_rollout_async(config, **options))


async def run_eval_async(
    config: Any,
    *,
    threshold: float = 1.0,
    tools: list | None = None,
    reward: Any = None,
    out: str | Path | None = None,
) -> dict[str, Any]:
    """Score the held-out tasks: ``{"overall": {"pass@k", "mean@k", ...}, "tasks": [...]}``, as
    ``agentfly eval --json`` reports it (a chain passes when its reward >= ``threshold``)."""
    from agentfly_cli.rollout.summary import evaluate as evaluate_trajectories

    config = for_eval(config)
    if not config.reward and reward is None:
        raise UserError("run_eval needs a reward: set reward in the config or pass reward=")
    result = await run_rollout_async(config, tools=tools, reward=reward, out=out)
    return evaluate_trajectories(result.trajectories, threshold)


def run_eval(config: Any, **options: Any) -> dict[str, Any]:
    """Blocking :func:`run_eval_async`."""
    _no_running_loop("run_eval")
    return asyncio.run(run_eval_async(config, **options))


async def run_training_async(
    config: Any,
    *,
    out: str | Path | None = None,
    resume: bool = False,
    tools: list | None = None,
    reward: Any = None,
    console: bool = False,
) -> Any:
    """RL-train ``config``'s model (after its warm start, when the recipe has one); a
    ``TrainResult`` with the run folder, per-step metrics and held-out evals."""
    options = {"out": out, "resume": resume, "tools": tools, "reward": reward}
    # the warm start runs its own loop: in a thread, so that it never meets this one
    trainer = await asyncio.to_thread(_trainer, config, console=console, **options)
    return await trainer.fit_async()


def run_training(config: Any, **options: Any) -> Any:
    """Blocking :func:`run_training_async` (what ``agentfly train`` runs; SIGTERM stops it
    cleanly, with a checkpoint)."""
    _no_running_loop("run_training")
    return _trainer(config, **options).fit()


def _trainer(config: Any, *, out=None, resume=False, tools=None, reward=None, console=False) -> Any:
    """The run folder checked, the warm start done (when the recipe has one), the trainer made."""
    from agentfly_cli.files.run_folders import training_folder
    from agentfly_cli.train.plan import plan_run
    from agentfly_cli.train.tasks.run_tasks import RunTasks
    from agentfly_cli.train.trainer import Trainer

    run_dir = training_folder(config, out, resume=resume)
    components = {"tools": tools, "reward": reward}
    # the data file is read once: the warm start and RL take their sides of the same rows
    tasks = RunTasks.load(config.data) if config.trainer.warm_start.enabled else None
    plan = plan_run(config, run_dir, warm_start=True, tasks=tasks, console=console, **components)
    return Trainer(
        config, run_dir=run_dir, resume=resume, console=console, plan=plan, tasks=tasks,
        **components,
    )  # fmt: skip


def _no_running_loop(name: str) -> None:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return
    raise UserError(
        f"{name}() cannot start an event loop inside a running one (Jupyter): use "
        f"`await {name}_async(...)`"
    )
