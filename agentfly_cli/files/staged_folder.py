"""Write a run's outputs into a hidden staging folder and publish them only when all are done.

``agentfly sft`` writes its model, task files, metrics and summary this way: a run that fails
(bad chains, a non-finite loss, a full disk, Ctrl-C) leaves ``OUT`` as it was, and a folder it
created is removed again. Nothing in ``OUT`` is deleted but the entries the run replaces.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path

from agentfly_cli.files.output_paths import missing_folders, remove_empty, write_failed


@contextmanager
def staged_folder(out: Path, *, replaces: Iterable[str] = ()) -> Iterator[Path]:
    """Yield a staging folder inside ``out``; on success move its entries into ``out`` (and
    remove the names in ``replaces`` that this run did not write again: stale outputs of an
    earlier run); on any failure remove the staging folder and the folders made for it."""
    created = missing_folders(out)
    stage = out / f".staging-{os.getpid()}"
    try:
        out.mkdir(parents=True, exist_ok=True)
        shutil.rmtree(stage, ignore_errors=True)
        stage.mkdir()
    except OSError as err:
        remove_empty(created)
        raise write_failed(stage, err, f"{out} is as it was") from None
    publishing = False
    try:
        yield stage
        publishing = True
        _publish(stage, out, replaces)
    except BaseException as err:
        shutil.rmtree(stage, ignore_errors=True)
        remove_empty(created)
        if isinstance(err, OSError):
            kept = (
                f"{out} may hold part of this run's output; a folder it replaces is kept"
                if publishing
                else f"{out} holds no output of this run"
            )
            raise write_failed(out, err, kept) from None
        raise


def _publish(stage: Path, out: Path, replaces: Iterable[str]) -> None:
    """Move every entry of ``stage`` into ``out``; a folder replaced there goes only once the
    new one is in place."""
    written = {entry.name for entry in stage.iterdir()}
    for name in set(replaces) - written:
        stale = out / name
        if stale.is_dir():
            shutil.rmtree(stale)
        else:
            stale.unlink(missing_ok=True)
    for entry in sorted(stage.iterdir()):
        target = out / entry.name
        if target.is_dir() and not target.is_symlink():
            old = out / f".old-{entry.name}-{os.getpid()}"
            os.replace(target, old)
            try:
                os.replace(entry, target)
            except BaseException:
                os.replace(old, target)  # the earlier folder back: OUT is never without it
                raise
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(entry, target)
    stage.rmdir()
