"""Training as functions: RL (``agentfly train``) and supervised fine-tuning (``agentfly sft``)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agentfly_cli.api.experiment import Experiment, Tasks, Tools, _no_running_loop
from agentfly_cli.api.results import TrainingResult

if TYPE_CHECKING:
    from agentfly_cli.settings.run import RunSettings


async def run_training_async(
    settings: RunSettings | str | Path,
    *,
    out: str | Path | None = None,
    resume: bool = False,
    tasks: Tasks | None = None,
    tools: Tools | None = None,
    reward: Any = None,
    console: bool = False,
    host: Any = None,
) -> TrainingResult:
    """RL-train the settings' model (after its warm start, when the recipe has one): the run
    folder ``out``, its steps, per-step metrics and held-out evals."""
    experiment = Experiment(settings, tasks=tasks, tools=tools, reward=reward, host=host)
    return await experiment.train_async(out=out, resume=resume, console=console)


def run_training(
    settings: RunSettings | str | Path,
    *,
    out: str | Path | None = None,
    resume: bool = False,
    tasks: Tasks | None = None,
    tools: Tools | None = None,
    reward: Any = None,
    console: bool = False,
    host: Any = None,
) -> TrainingResult:
    """Blocking :func:`run_training_async` (what ``agentfly train`` runs; SIGTERM stops it
    cleanly, with a checkpoint)."""
    _no_running_loop("run_training")
    experiment = Experiment(settings, tasks=tasks, tools=tools, reward=reward, host=host)
    return experiment.train(out=out, resume=resume, console=console)


def sft_settings(overrides: Sequence[str] = (), **fields: Any) -> Any:
    """The ``SFTSettings`` of ``agentfly sft``: ``fields`` by dotted name (``epochs``,
    ``backend.lr``, ...; None keeps the default), then ``overrides`` (``--set`` strings)."""
    from agentfly_cli.train.sft.fine_tune import build_settings

    return build_settings(list(overrides), **fields)


def sft_folder(out: str | Path) -> Path:
    """``out`` checked as a folder an SFT run can write (it may not exist yet)."""
    from agentfly_cli.files.output_paths import check_folder_target

    return check_folder_target(out, "--out")


def run_sft(
    trajectories: Sequence[str | Path],
    *,
    out: str | Path,
    settings: Any = None,
    model: str | None = None,
    force: bool = False,
    console: bool = False,
) -> Any:
    """Fine-tune ``model`` (default: the chains' own) on the trained tokens of trajectory
    files, the warm start before RL (``agentfly sft``): an ``SFTResult`` (``model_dir``, the
    losses before and after). ``settings``: :func:`sft_settings` (default: the defaults)."""
    from agentfly_cli.train.sft.fine_tune import fine_tune

    folder = sft_folder(out)
    settings = sft_settings() if settings is None else settings
    paths = [Path(p) for p in trajectories]
    return fine_tune(paths, model, folder, settings, console=console, force=force)


def heldout_tasks_file(out: str | Path) -> Path:
    """Where an SFT run in ``out`` wrote the tasks of its held-out chains."""
    from agentfly_cli.train.sft.fine_tune import HELDOUT_FILE

    return Path(out) / HELDOUT_FILE


def export_model(run_dir: str | Path, out: str | Path, *, force: bool = False) -> Path:
    """The newest checkpoint of a training run (or a checkpoint folder) written to ``out`` as
    a Hugging Face model folder (``agentfly export``); the folder written."""
    from agentfly_cli.train.export import export_model as export

    return export(run_dir, out, force=force)
