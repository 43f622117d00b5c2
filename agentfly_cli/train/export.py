"""``agentfly export``: a run's newest checkpoint as a standalone Hugging Face model folder.

The copy goes into a temporary folder beside ``out`` and is renamed into place at the end, so
``out`` is never half-written. ``export`` deletes nothing it did not write: an output that is,
holds or lies inside the run (symlinks resolved) is refused, and ``--force`` replaces only a
folder that an earlier ``export`` wrote (it holds :data:`MARKER`) or an empty one.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path

from agentfly_cli.errors import UserError
from agentfly_cli.files.output_paths import (
    check_folder_target,
    missing_folders,
    remove_empty,
    write_failed,
)
from agentfly_cli.train.checkpoint import find_model_folder

MARKER = "agentfly_export.json"  # written into every export: what --force may replace


def export_model(run_dir: str | Path, out: str | Path, *, force: bool = False) -> Path:
    """Copy the model folder of ``run_dir``'s newest checkpoint to ``out`` (atomically)."""
    run_dir, out = Path(run_dir), Path(out)
    if run_dir.exists() and not run_dir.is_dir():
        raise UserError(f"{run_dir} is a file; pass the folder of an `agentfly train` run")
    if not run_dir.exists():
        raise UserError(f"run folder {str(run_dir)!r} not found; pass an `agentfly train` --out")
    source = find_model_folder(run_dir)
    _refuse_overlap(out, run_dir, source)
    check_folder_target(out, "OUT")
    if out.exists():
        _check_replaceable(out, force)
    target = out.resolve()
    created = missing_folders(target.parent)
    target.parent.mkdir(parents=True, exist_ok=True)
    temp: Path | None = None
    try:
        # a name no one holds: a leftover of a killed run (same pid, a container) fails nothing
        temp = Path(tempfile.mkdtemp(prefix=f".{target.name}.export-tmp-", dir=target.parent))
        shutil.copytree(source, temp, symlinks=False, dirs_exist_ok=True)
        marker = {
            "written_by": "agentfly export",
            "source": str(source.resolve()),
            "files": sorted(_entries(temp)),  # what --force may replace, and nothing else
        }
        (temp / MARKER).write_text(json.dumps(marker, indent=2) + "\n", encoding="utf-8")
    except BaseException as err:  # Ctrl-C too: a model's copy is big, leave none of it
        if temp is not None:
            shutil.rmtree(temp, ignore_errors=True)
        remove_empty(created)
        if not isinstance(err, Exception):
            raise
        kept = f"{out} is as it was" if out.exists() else f"{out} was not created"
        raise write_failed(out, err, kept) from None
    _swap(temp, target)
    return out


def _refuse_overlap(out: Path, run_dir: Path, source: Path) -> None:
    """``out`` must not be, hold or lie inside the run folder or the model folder it copies."""
    where = out.resolve()
    for folder in dict.fromkeys((run_dir.resolve(), source.resolve())):
        if where == folder or where in folder.parents or folder in where.parents:
            relation = (
                "is" if where == folder else "holds" if where in folder.parents else "lies inside"
            )
            raise UserError(
                f"OUT {str(out)!r} {relation} the run being exported ({folder}); writing there "
                "would delete its checkpoints: pick a folder outside the run"
            )


def _check_replaceable(out: Path, force: bool) -> None:
    if not out.is_dir():
        raise UserError(f"{out} is a file; pass a folder to write the model into")
    if not force:
        raise UserError(f"{out} exists; pass --force to replace it or pick another folder")
    if not any(out.iterdir()):
        return
    if not (out / MARKER).is_file():
        foreign = f"no {MARKER}"
    else:
        foreign = ", ".join(sorted(_entries(out) - _written(out / MARKER) - {MARKER})[:3])
        if not foreign:
            return
    raise UserError(
        f"{out} holds files that `agentfly export` did not write ({foreign}), so --force "
        "does not replace it; pick another folder, or remove it yourself"
    )


def _entries(folder: Path) -> set[str]:
    """Every file and folder under ``folder`` (links not followed), as relative paths."""
    found = set()
    for top, folders, files in os.walk(folder):
        for name in folders + files:
            found.add(str((Path(top) / name).relative_to(folder)))
    return found


def _written(marker: Path) -> set[str]:
    """The paths an earlier export's marker lists (none if it cannot be read)."""
    try:
        files = json.loads(marker.read_text(encoding="utf-8")).get("files")
    except (OSError, ValueError, AttributeError):
        return set()
    return {str(f) for f in files} if isinstance(files, list) else set()


def _swap(temp: Path, target: Path) -> None:
    """Rename ``temp`` to ``target``; an earlier export there goes only once the new one is in
    (if a rename fails, the earlier one is put back and the copy removed)."""
    old = Path(tempfile.mkdtemp(prefix=f".{target.name}.export-old-", dir=target.parent))
    moved = False
    try:
        if target.exists():
            os.replace(target, old)
            moved = True
        os.replace(temp, target)
    except OSError as err:
        if moved:
            os.replace(old, target)
        else:
            old.rmdir()
        shutil.rmtree(temp, ignore_errors=True)
        raise write_failed(target, err, f"{target} is as it was") from None
    shutil.rmtree(old, ignore_errors=True)
