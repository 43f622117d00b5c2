"""``agentfly export``: a run's newest checkpoint as a standalone Hugging Face model folder."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from agentfly_cli.errors import UserError
from agentfly_cli.train.checkpoint import find_model_folder


def export_model(run_dir: str | Path, out: str | Path, *, force: bool = False) -> Path:
    """Copy the model folder of ``run_dir``'s newest checkpoint to ``out`` (atomically)."""
    source = find_model_folder(run_dir)
    out = Path(out)
    if out.exists() and not force:
        raise UserError(f"{out} exists; pass --force to replace it or pick another folder")
    if out.exists() and not out.is_dir():
        raise UserError(f"{out} is a file; pass a folder to write the model into")
    temp = out.with_name(f".{out.name}.tmp-{os.getpid()}")
    shutil.rmtree(temp, ignore_errors=True)
    shutil.copytree(source, temp)
    if out.exists():
        shutil.rmtree(out)
    os.replace(temp, out)
    return out
