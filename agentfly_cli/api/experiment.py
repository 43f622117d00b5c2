"""An experiment: settings, tasks, tools and reward bound once, then rolled out, evaluated and
trained as often as a notebook likes (as TRL's trainers and verifiers' environments are)."""

from __future__ import annotations

import asyncio
import dataclasses
import json
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agentfly_cli.api.results import EvalReport, RolloutResult, TrainingResult
from agentfly_cli.api.settings import for_eval, settings_of
from agentfly_cli.errors import UserError

if TYPE_CHECKING:
    from agentfly_cli.settings.run import RunSettings
    from agentfly_cli.trajectory import Trajectory

Tasks = Sequence[Mapping[str, Any]] | str | Path  # rows, or a data file
Tools = Sequence[Any]  # registered names, Tool objects (@tool) or plain functions
OnFinish = Callable[["Trajectory"], Any]
TASKS_FILE = "tasks.jsonl"  # where a training run keeps the rows it was given in memory


class Experiment:
    """A run's settings with its components resolved once: the tasks, tools, reward, chat
    template and parser are looked up and checked on first use (or :meth:`load`) and kept.

    ``tasks``: rows (dicts, checked and split as a data file's rows are) or a data file;
    ``tools``: registered names, ``@tool`` objects or plain functions (made tools);
    ``reward``: a ``@reward`` object or a plain function. Each replaces the settings' own.
    """

    def __init__(
        self,
        settings: RunSettings | str | Path,
        *,
        tasks: Tasks | None = None,
        tools: Tools | None = None,
        reward: Any = None,
        host: Any = None,
    ) -> None:
        self.settings = settings_of(settings)
        self._rows: list[Mapping[str, Any]] | None = None
        if isinstance(tasks, (str, Path)):
            data = self.settings.data.model_copy(update={"path": str(tasks)})
            self.settings = self.settings.model_copy(update={"data": data})
        elif tasks is not None:
            self._rows = list(tasks)
        self._tools = _as_tools(tools)
        self._reward = _as_reward(reward)
        self.host = host
        self._resolved: Any = None  # the ResolvedRun of the settings, once made
        self._eval: Any = None  # the same components over the held-out tasks
        self._backend: Any = None  # loaded ahead for the next run (a run closes its backend)

    # ---- the components, resolved once ---------------------------------------------------
    def resolve(self) -> Experiment:
        """Look up and check the components now (errors are one-line UserErrors); kept."""
        if self._resolved is None:
            from agentfly_cli.rollout.from_settings import resolve_run

            rows = None if self._rows is None else _tasks_of(self.settings, self._rows)
            components = {"tasks": rows, "tools": self._tools, "reward": self._reward}
            self._resolved = resolve_run(self.settings, self.host, **components)
        return self

    def load(self) -> Experiment:
        """Resolve, and load the backend (the model's weights) for the next run."""
        self.resolve()
        if self._backend is None:
            self._backend = self._resolved.build_backend()
        return self

    @property
    def tasks(self) -> list[dict[str, Any]]:
        """The tasks a rollout runs (after ``data``'s split, ``where`` and ``limit``)."""
        return self.resolve()._resolved.tasks

    @property
    def eval_tasks(self) -> list[dict[str, Any]]:
        """The tasks an evaluation scores: the recipe's held-out ones, when it holds some out."""
        return self._for_eval().tasks

    @property
    def tools(self) -> list:
        """The run's tools, as ``Tool`` objects."""
        return self.resolve()._resolved.tools

    @property
    def reward(self) -> Any:
        """The run's reward (None when it has none)."""
        return self.resolve()._resolved.reward

    def _for_eval(self) -> Any:
        settings = for_eval(self.settings)
        if settings is self.settings:
            return self.resolve()._resolved
        if self._eval is None:
            self._eval = dataclasses.replace(
                self.resolve()._resolved, config=settings, tasks=_tasks_of(settings, self._rows)
            )
        return self._eval

    # ---- rollouts and evaluations ----------------------------------------------------------
    async def rollout_async(
        self, *, out: str | Path | None = None, on_finish: OnFinish | None = None
    ) -> RolloutResult:
        """Roll out the tasks (``rollout.n`` chains each); ``out``: also write them as JSONL;
        ``on_finish``: called with each chain as it finishes."""
        return await self._run(self.resolve()._resolved, out, on_finish)

    def rollout(
        self, *, out: str | Path | None = None, on_finish: OnFinish | None = None
    ) -> RolloutResult:
        """Blocking :meth:`rollout_async`."""
        return _blocking("rollout", self.rollout_async(out=out, on_finish=on_finish))

    async def evaluate_async(
        self,
        *,
        threshold: float = 1.0,
        out: str | Path | None = None,
        on_finish: OnFinish | None = None,
    ) -> EvalReport:
        """Score the held-out tasks: pass@k and mean@k (a chain passes when its reward >=
        ``threshold``), as ``agentfly eval`` reports them."""
        resolved = self._for_eval()
        if resolved.reward is None:
            raise UserError("evaluate needs a reward: set reward in the settings or pass reward=")
        return EvalReport.of(await self._run(resolved, out, on_finish), threshold)

    def evaluate(
        self,
        *,
        threshold: float = 1.0,
        out: str | Path | None = None,
        on_finish: OnFinish | None = None,
    ) -> EvalReport:
        """Blocking :meth:`evaluate_async`."""
        run = self.evaluate_async(threshold=threshold, out=out, on_finish=on_finish)
        return _blocking("evaluate", run)

    async def _run(self, resolved: Any, out: Any, on_finish: OnFinish | None) -> RolloutResult:
        from agentfly_cli.rollout.from_settings import assemble, run_rollout_async

        backend, self._backend = self._backend or resolved.build_backend(), None
        run = assemble(resolved, backend)
        path = None if out is None else str(out)
        done = await run_rollout_async(run, out=path, on_finish=on_finish)
        facts = (done.wall_s, done.setup_s, done.envs, run.info, path)
        return RolloutResult(done.trajectories, *facts)

    # ---- training --------------------------------------------------------------------------
    async def train_async(
        self, *, out: str | Path | None = None, resume: bool = False, console: bool = False
    ) -> TrainingResult:
        """RL-train the model (after its warm start, when the recipe has one): the run folder
        ``out`` (default: ``trainer.out``, else ``runs/<recipe>-<time>``), steps and metrics."""
        # the warm start runs its own loop: in a thread, so that it never meets this one
        trainer = await asyncio.to_thread(self._trainer, out, resume, console)
        return TrainingResult.of(await trainer.fit_async())

    def train(
        self, *, out: str | Path | None = None, resume: bool = False, console: bool = False
    ) -> TrainingResult:
        """Blocking :meth:`train_async` (SIGTERM stops it cleanly, with a checkpoint)."""
        _no_running_loop("train")
        return TrainingResult.of(self._trainer(out, resume, console).fit())

    def _trainer(self, out: Any, resume: bool, console: bool) -> Any:
        """The run folder checked, the warm start done (when the recipe has one), the trainer
        made; rows given in memory are kept in the run folder as its data file."""
        from agentfly_cli.files.run_folders import training_folder
        from agentfly_cli.rollout.tasks import RowRules
        from agentfly_cli.train.plan import plan_run
        from agentfly_cli.train.tasks.run_tasks import RunTasks
        from agentfly_cli.train.trainer import Trainer

        settings, tasks = self.settings, None
        run_dir = training_folder(settings, out, resume=resume)
        if self._rows is not None:  # the rows in memory, not a read of the file they are kept in
            settings, rows = _with_task_file(settings, self._rows, run_dir / TASKS_FILE)
            tasks = RunTasks.of_rows(rows, settings.data, str(settings.data.path))
        resolved = self._resolved  # objects already looked up need no second look-up
        tools = resolved.tools if resolved is not None else self._tools
        reward = resolved.reward if resolved is not None else self._reward
        components = {"tools": tools, "reward": reward, "host": self.host}
        # the data file is read once: the warm start and RL take their sides of the same rows
        if tasks is None and settings.trainer.warm_start.enabled:
            tasks = RunTasks.load(settings.data, RowRules.of(settings))
        plan = plan_run(
            settings, run_dir, warm_start=True, tasks=tasks, console=console, **components
        )
        return Trainer(
            settings, run_dir=run_dir, resume=resume, console=console, plan=plan, tasks=tasks,
            **components,
        )  # fmt: skip


def _as_tools(tools: Tools | None) -> list | None:
    if tools is None:
        return None
    if isinstance(tools, (str, bytes)) or not isinstance(tools, Sequence):
        raise UserError("tools: expected a list of tool names, @tool objects or functions")
    from agentfly_cli.components.tools import Tool, tool

    return [t if isinstance(t, (str, Tool)) or not callable(t) else tool(t) for t in tools]


def _as_reward(reward: Any) -> Any:
    from agentfly_cli.components.rewards import CombinedReward, Reward
    from agentfly_cli.components.rewards import reward as make_reward

    if reward is None or isinstance(reward, (Reward, CombinedReward)) or not callable(reward):
        return reward
    return make_reward(reward)


def _checked_rows(rows: Any, settings: RunSettings) -> list[dict[str, Any]]:
    """Task rows given in memory, each checked as a data file's row is."""
    from agentfly_cli.rollout.tasks import RowRules, check_tasks

    if isinstance(rows, (str, bytes)) or not isinstance(rows, Sequence) or not rows:
        raise UserError("tasks: expected a non-empty list of task rows (dicts with 'question')")
    return [dict(row) for row in check_tasks(rows, "tasks", RowRules.of(settings))]


def _tasks_of(settings: RunSettings, rows: list | None) -> list[dict[str, Any]]:
    """``settings``' tasks: from ``rows`` when given (selected as a file's rows are: the
    held-out split, ``where``, ``shuffle``, ``limit``), else its data file."""
    from agentfly_cli.rollout.tasks import RowRules, data_side, read_tasks

    if rows is not None:
        return data_side(_checked_rows(rows, settings), settings.data, "tasks")
    rules = RowRules.of(settings)
    return data_side(read_tasks(settings.data.path, rules), settings.data, str(settings.data.path))


def _with_task_file(
    settings: RunSettings, rows: list, path: Path
) -> tuple[RunSettings, list[dict[str, Any]]]:
    """``settings`` reading ``rows`` (checked) from ``path``, where they are written as JSONL
    (the run folder's record of its data), and the checked rows."""
    rows = _checked_rows(rows, settings)
    path.parent.mkdir(parents=True, exist_ok=True)
    text = "".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows)
    path.write_text(text, encoding="utf-8")
    data = settings.data.model_copy(update={"path": str(path)})
    return settings.model_copy(update={"data": data}), rows


def _blocking(name: str, main: Any) -> Any:
    """``main`` run to its end in a new event loop, SIGTERM cancelling it cleanly."""
    from agentfly_cli.runtime.shutdown import run_with_clean_shutdown

    try:
        _no_running_loop(name)
    except UserError:
        main.close()  # never awaited: say so without a "never awaited" warning
        raise
    return run_with_clean_shutdown(main)


def _no_running_loop(name: str) -> None:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return
    raise UserError(
        f"{name}() cannot start an event loop inside a running one (Jupyter): use "
        f"`await {name}_async(...)`"
    )
