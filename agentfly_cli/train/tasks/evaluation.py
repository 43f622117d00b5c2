"""Held-out evaluation during training: which tasks, and their pass@k as step metrics.

The eval set is the rows of ``eval.path``, or the held-out side of the data (``data.holdout``,
fixed per recipe: no phase trains on it; ``trainer.eval.holdout`` is its deprecated alias, moved
there when the settings load), each narrowed by ``eval.where`` and ``eval.limit``. The
trainer rolls them out with the current policy before the first step, every ``eval.every``
steps and after the last, and logs ``eval/*`` metrics under the number of steps done (0:
before the first step; steps are numbered from 1).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agentfly_cli.errors import UserError
from agentfly_cli.files.surrogates import json_line
from agentfly_cli.settings.train import EvalSettings
from agentfly_cli.trajectory import Trajectory

if TYPE_CHECKING:
    from agentfly_cli.rollout.engine_protocol import Engine

#: The held-out rows of a run, written into its folder for ``agentfly eval --data``.
EVAL_TASKS_FILE = "eval_tasks.jsonl"


@dataclass
class EvalSplit:
    """The training tasks and the held-out eval tasks of a run."""

    train: list[dict[str, Any]]
    eval: list[dict[str, Any]]
    notes: list[str] = field(default_factory=list)  # warnings for the user (e.g. overlap)


def split_tasks(
    rows: Sequence[dict[str, Any]],
    settings: EvalSettings,
    *,
    data: Any,
    file_rows: Sequence[dict[str, Any]] | None = None,
    rules: Any = None,
) -> EvalSplit:
    """The eval tasks, and the training rows that remain. Without eval, all rows train.

    ``rows`` are the run's tasks (``data``'s train side when ``data.holdout`` is set); the eval
    tasks are the rows of ``settings.path``, or else the held-out side of ``data.path`` (all of
    it without a holdout), then ``settings.where``, ``data.shuffle`` and ``settings.limit``.
    ``file_rows``: every row of ``data.path``, read already (a run reads its data file once);
    None: read it here. ``rules``: what the run asks of each row read here (a ``RowRules``)."""
    from agentfly_cli.rollout.tasks import pick_tasks, read_tasks

    rows = list(rows)
    shuffle_seed = data.shuffle_seed if data.shuffle else None  # which rows a limit keeps
    if settings.holdout:  # RunSettings moves the alias to data.holdout; these were not loaded
        raise UserError(
            "trainer.eval.holdout is a deprecated alias of data.holdout; set data.holdout "
            f"{settings.holdout:g} instead (or load the settings as a run does)"
        )
    if not settings.enabled:
        return EvalSplit(rows, [])
    if settings.path and not Path(settings.path).exists():
        raise UserError(
            f"trainer.eval.path {settings.path!r} not found; give a data file of eval tasks"
        )
    split = {}
    if not settings.path and data.holdout:
        split = {"holdout": data.holdout, "holdout_seed": data.holdout_seed, "side": "heldout"}
    path = settings.path or data.path
    if settings.path or file_rows is None:
        file_rows = read_tasks(path, rules)
    evaluated = pick_tasks(
        file_rows, str(path), settings.limit, settings.where, "trainer.eval.where",
        shuffle_seed=shuffle_seed, **split,
    )  # fmt: skip
    notes = []
    seen = {_key(row) for row in rows}
    shared = sum(1 for row in evaluated if _key(row) in seen)
    if shared:
        notes.append(
            f"{shared} of the {len(evaluated)} eval tasks are also training tasks, so eval "
            "reward is not held out; select disjoint rows (e.g. data.where / trainer.eval.where "
            "on a split field) or use data.holdout"
        )
    return EvalSplit(rows, evaluated, notes)


def _key(row: Mapping[str, Any]) -> str:
    return json.dumps(row, sort_keys=True, default=str)


def task_results(trajectories: Sequence[Trajectory], threshold: float) -> list[dict[str, Any]]:
    """Per-task ``pass@k`` and ``mean@n`` rows (as ``agentfly eval``), mergeable across ranks."""
    from agentfly_cli.rollout.summary import evaluate

    return evaluate(trajectories, threshold)["tasks"]


def eval_metrics(rows: Sequence[Mapping[str, Any]], seconds: float) -> dict[str, float]:
    """``eval/reward_mean``, ``eval/pass@k`` (k = 1, 2, 4, ..., n), ``eval/tasks`` and
    ``eval/seconds``: the means over the task rows of :func:`task_results`."""
    from agentfly_cli.rollout.summary import ks_for

    if not rows:
        return {}
    n = min(row["n"] for row in rows)
    out = {
        "eval/reward_mean": sum(row[f"mean@{n}"] for row in rows) / len(rows),
        "eval/tasks": float(len(rows)),
        "eval/seconds": float(seconds),
    }
    for k in ks_for(n):
        out[f"eval/pass@{k}"] = sum(row[f"pass@{k}"] for row in rows) / len(rows)
    return out


class HeldOutEval:
    """When and how a training run evaluates its held-out tasks.

    Steps are numbered from 1; an eval is logged under the number of steps done: 0 before
    the first step, then every ``every`` steps, and after the last step.
    """

    def __init__(self, split: EvalSplit, settings: EvalSettings, total_steps: int) -> None:
        self.split = split
        self.settings = settings
        self.total_steps = total_steps

    def due(self, steps_done: int) -> bool:
        """Evaluate after ``steps_done`` steps? (0: before the first)."""
        every = self.settings.every
        return bool(every) and (steps_done % every == 0 or steps_done == self.total_steps)

    def write_tasks(self, run_dir: Path) -> None:
        """``RUN_DIR/eval_tasks.jsonl``: the held-out rows, for ``agentfly eval --data``."""
        run_dir.mkdir(parents=True, exist_ok=True)
        lines = (json_line(row) for row in self.split.eval)  # a lone surrogate is escaped
        (run_dir / EVAL_TASKS_FILE).write_text("".join(line + "\n" for line in lines))

    async def run(self, steps_done: int, *, engine: Engine, train: Any, progress: Any) -> tuple:
        """Roll out this rank's share of the eval tasks with the current policy. Returns
        (``eval/*`` metrics merged over the ranks, this rank's trajectories)."""
        import time

        from agentfly_cli.rollout.summary import evaluate
        from agentfly_cli.train_backends import distributed

        tasks = self.split.eval
        n = self.settings.n
        share = -(-len(tasks) // train.world_size)
        start = train.rank * share
        mine = tasks[start : start + share]
        started = time.perf_counter()
        train.model.eval()
        trajectories: list[Trajectory] = []
        if mine:
            base = engine.sampled_tokens
            progress.begin(
                "eval",
                step=steps_done,
                total=len(mine) * n,
                unit="chains",
                live_tokens=lambda: engine.sampled_tokens - base,
            )
            try:
                trajectories = await engine.run(
                    mine,
                    batch_id=f"eval{steps_done}",
                    task_offset=start,
                    n=n,
                    on_finish=lambda _: progress.advance(),
                )
            finally:
                progress.end()
        report = evaluate(trajectories, self.settings.threshold)
        results = distributed.gather_lists(report["tasks"])
        metrics = eval_metrics(results, time.perf_counter() - started)
        if metrics:  # chains an infrastructure failure ended: left out of the scores above
            lost = sum(report["overall"].get("infra_failures", {}).values())
            metrics["eval/infra_failures"] = float(sum(distributed.gather_lists([lost])))
        return metrics, trajectories
