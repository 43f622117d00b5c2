"""Check, before any model loads, that an output path (``--out``) can be written.

``os.access`` is no test (root passes it everywhere, even on read-only mounts and ``/proc``),
so the nearest existing folder is probed by creating and removing a temporary file in it.
Nothing is created at the path itself.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from agentfly_cli.errors import UserError


def check_file_target(path: str | os.PathLike, flag: str = "--out") -> Path:
    """``path`` as a file that can be written (created, or replaced if it exists)."""
    path = Path(path)
    if path.is_dir():
        raise UserError(f"{flag} {str(path)!r} is a folder; pass a file name such as out.jsonl")
    if path.exists():
        try:
            with open(path, "ab"):  # opens for writing without changing a byte
                pass
        except OSError as exc:
            raise _unwritable(flag, path, exc) from None
        return path
    _probe_parent(path, flag)
    return path


def check_folder_target(path: str | os.PathLike, flag: str = "--out") -> Path:
    """``path`` as a folder that can be written (it may not exist yet)."""
    path = Path(path)
    if path.exists() and not path.is_dir():
        raise UserError(f"{flag} {str(path)!r} is a file; pass a folder (it is created if missing)")
    if path.is_dir():
        _probe(path, path, flag)
    else:
        _probe_parent(path, flag)
    return path


def _probe_parent(path: Path, flag: str) -> None:
    """The nearest existing ancestor of ``path`` must be a folder we can create files in."""
    ancestor = path.absolute().parent
    while not ancestor.exists():
        ancestor = ancestor.parent
    if not ancestor.is_dir():
        raise UserError(
            f"{flag} {str(path)!r} cannot be created: {str(ancestor)!r} is a file, not a folder; "
            "pick another path"
        )
    _probe(ancestor, path, flag)


def _probe(folder: Path, path: Path, flag: str) -> None:
    try:
        with tempfile.TemporaryFile(dir=folder):
            pass
    except OSError as exc:
        raise _unwritable(flag, path, exc, folder) from None


def _unwritable(flag: str, path: Path, exc: OSError, folder: Path | None = None) -> UserError:
    reason = exc.strerror or type(exc).__name__
    where = f": no file can be created in {str(folder)!r}" if folder is not None else ""
    return UserError(
        f"{flag} {str(path)!r} cannot be written{where} ({reason}); pick a writable folder"
    )
