"""What the API's runs return: a rollout's chains, an eval's scores, a training run's record."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from agentfly_cli.trajectory import Trajectory


@dataclass
class RolloutResult:
    """The chains of one rollout, in task order (``rollout.n`` per task), token-exact."""

    trajectories: list[Trajectory]
    wall_s: float  # the rollout itself
    setup_s: float  # resolving components and loading the backend
    envs: dict[str, dict[str, Any]] = field(default_factory=dict)  # env pool counters, by name
    info: dict[str, Any] = field(default_factory=dict)  # model, backend, parser, template
    out: str | None = None  # the JSONL file the chains were written to

    def summary(self) -> dict[str, Any]:
        """Rewards, turns, tool calls, errors, finish reasons and speed, with the run's facts:
        the ``summary`` of ``agentfly rollout --json``."""
        from agentfly_cli.rollout.summary import summarize

        summary = summarize(self.trajectories, self.wall_s)
        summary.update(self.info)
        if self.envs:
            summary["envs"] = self.envs
        return summary


@dataclass
class EvalReport(Mapping[str, Any]):
    """pass@k and mean@k per task and overall; a chain passes when its reward >= ``threshold``.

    It reads as the ``eval`` document of ``agentfly eval --json`` too: ``report["overall"]``,
    ``report["tasks"]``, ``report["threshold"]`` (and :meth:`to_dict`).
    """

    tasks: list[dict[str, Any]]  # per task: task_index, id, n, correct, pass@k..., mean@n
    overall: dict[str, Any]  # tasks, n, pass@k..., mean@n: the tasks' means
    threshold: float
    rollout: RolloutResult | None = field(default=None, compare=False, repr=False)

    @classmethod
    def of(cls, rollout: RolloutResult, threshold: float = 1.0) -> EvalReport:
        """The report on ``rollout``'s chains."""
        from agentfly_cli.rollout.summary import evaluate

        scores = evaluate(rollout.trajectories, threshold)
        return cls(scores["tasks"], scores["overall"], scores["threshold"], rollout)

    @property
    def n(self) -> int:
        """Chains scored per task."""
        return int(self.overall.get("n", 0))

    @property
    def ks(self) -> list[int]:
        """The k of every pass@k reported: 1, 2, 4, ... and n."""
        return [int(key[5:]) for key in self.overall if key.startswith("pass@")]

    def pass_at(self, k: int) -> float:
        """Overall pass@k: the chance that one of k chains of a task passes, over the tasks."""
        if f"pass@{k}" not in self.overall:
            raise KeyError(f"pass@{k} is not in this report; it has {self.ks}")
        return float(self.overall[f"pass@{k}"])

    @property
    def mean(self) -> float:
        """Overall mean@n: the mean reward of a chain."""
        return float(self.overall[f"mean@{self.n}"])

    def to_dict(self) -> dict[str, Any]:
        """The ``eval`` document of ``agentfly eval --json``."""
        return {"tasks": self.tasks, "overall": self.overall, "threshold": self.threshold}

    def __getitem__(self, key: str) -> Any:
        return self.to_dict()[key]

    def __iter__(self) -> Iterator[str]:
        return iter(("tasks", "overall", "threshold"))

    def __len__(self) -> int:
        return 3


@dataclass
class TrainingResult:
    """What a finished training run leaves behind."""

    run_dir: Path  # metrics.jsonl, plot.png, checkpoints/
    steps: int
    history: list[dict[str, float]] = field(default_factory=list)  # one metrics dict per step
    evals: list[dict[str, float]] = field(default_factory=list)  # {"updates", "eval/..."}
    is_main: bool = True  # rank 0 (the one that reports)

    @classmethod
    def of(cls, result: Any) -> TrainingResult:
        """From the trainer's ``TrainResult``."""
        return cls(Path(result.run_dir), result.steps, result.history, result.evals, result.is_main)

    @property
    def final_metrics(self) -> dict[str, float]:
        """The last step's metrics (empty when no step ran)."""
        return self.history[-1] if self.history else {}
