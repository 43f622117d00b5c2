"""Where a run writes: a rollout's trajectory file and a training run's folder.

The policy of every entry point (the CLI, the Python API): a default under ``runs/`` named after
the recipe, the command and the time, never an existing file; a training folder that already
holds checkpoints is continued only when asked (``resume``), never overwritten. Each target is
checked for writability before anything loads, so no work is thrown away at the end.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from agentfly_cli.errors import UserError
from agentfly_cli.files.output_paths import check_file_target, check_folder_target

RUNS = Path("runs")


def trajectory_file(config: Any, command: str) -> Path:
    """``config.out``, else a fresh ``runs/<recipe>-<command>-<time>.jsonl``; checked."""
    out = config.out or _fresh(f"{config.name}-{command}-{_now()}")
    return check_file_target(out, "--out")


def step_trajectory_file(run_dir: Path, stem: str, rank: int = 0, world_size: int = 1) -> Path:
    """``RUN_DIR/trajectories/<stem>.jsonl`` (one file per rank when there are several), its
    folder created."""
    folder = Path(run_dir) / "trajectories"
    folder.mkdir(parents=True, exist_ok=True)
    return folder / (f"{stem}.jsonl" if world_size == 1 else f"{stem}-rank{rank}.jsonl")


def training_folder(config: Any, out: str | Path | None, *, resume: bool) -> Path:
    """``out``, else ``trainer.out``, else ``runs/<recipe>-<time>``; checked, with the resume
    guard: continuing needs a named folder, and a folder with checkpoints needs ``resume``."""
    chosen = out or config.trainer.out
    if resume and not chosen:
        raise UserError("--resume needs --out RUN_DIR: the folder of the run to continue")
    folder = check_folder_target(Path(chosen) if chosen else RUNS / f"{config.name}-{_now()}")
    checkpoints = folder / "checkpoints"
    if not resume and checkpoints.is_dir() and any(checkpoints.iterdir()):
        raise UserError(
            f"{folder} already holds a run; add --resume to continue it or pick another --out"
        )
    return folder


def _now() -> str:
    return time.strftime("%Y%m%d-%H%M%S")


def _fresh(stem: str) -> Path:
    """``runs/<stem>.jsonl``, or ``runs/<stem>-2.jsonl`` (and so on) if that one exists."""
    path, number = RUNS / f"{stem}.jsonl", 1
    while path.exists():
        number += 1
        path = RUNS / f"{stem}-{number}.jsonl"
    return path
