"""Check, before any model loads, that an output path (``--out``) can be written; and say in
one line why a write failed later (a full disk, most often).

``os.access`` is no test (root passes it everywhere, even on read-only mounts and ``/proc``),
so the nearest existing folder is probed by creating and removing a temporary file in it.
Nothing is created at the path itself.
"""

from __future__ import annotations

import errno
import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO, TypeVar

from agentfly_cli.errors import UserError

T = TypeVar("T")


def check_file_target(
    path: str | os.PathLike, flag: str = "--out", example: str = "out.jsonl"
) -> Path:
    """``path`` as a file that can be written (created, or replaced if it exists)."""
    path = Path(path)
    if path.is_dir():
        raise UserError(f"{flag} {str(path)!r} is a folder; pass a file name such as {example}")
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


def rename_target(path: str | os.PathLike) -> Path | None:
    """Where an all-or-nothing write of ``path`` renames its temporary file to: the file itself,
    or the file a symbolic link points to (the link stays); ``None`` when ``path`` exists but is
    not a regular file (``/dev/null``, a FIFO): renaming over it would replace the device (as
    root, for every process of the machine), so such a path is written in place."""
    path = Path(path)
    target = path.resolve() if path.is_symlink() else path
    if target.exists() and not target.is_file():
        return None
    return target


def write_all(fd: int, data: bytes) -> None:
    """Write every byte of ``data`` (``os.write`` may write fewer and raises on a full disk)."""
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def write_whole(path: str | os.PathLike, write: Callable[[BinaryIO], T]) -> T:
    """Write ``path`` all or nothing through ``write(file)`` (unbuffered binary): into a
    temporary file beside it (or beside the file a link points to), renamed over it at the end;
    a device or FIFO is written in place (see :func:`rename_target`). A failed write removes
    the temporary file, leaves ``path`` as it was and is one :class:`UserError`
    (:func:`write_failed`). Returns what ``write`` returns."""
    path = Path(path)
    target = rename_target(path)
    if target is None:  # /dev/null, a FIFO: a rename would replace it
        try:
            with open(path, "wb", buffering=0) as out:
                return write(out)
        except OSError as err:
            raise write_failed(path, err, "it is a device or pipe, written in place") from None
    temp = target.with_name(f".{target.name}.tmp-{os.getpid()}")
    try:
        with open(temp, "wb", buffering=0) as out:
            result = write(out)
        os.replace(temp, target)
    except Exception as err:
        temp.unlink(missing_ok=True)
        kept = f"{path.name} is as it was" if path.exists() else f"{path.name} was not written"
        raise write_failed(path, err, kept) from None
    return result


LOW_SPACE = 512 * 2**20  # a failed write with less free than this ran out of disk
_FULL_TEXTS = ("no space left on device", "os error 28", "storagefull")


def out_of_space(err: BaseException, folder: str | os.PathLike) -> bool:
    """Whether a failed write is the disk running full: ENOSPC anywhere in the error's chain,
    a library's text for it (safetensors: ``os error 28``), or a write error (an OSError, or
    a RuntimeError such as torch's zip writer's ``unexpected pos``) with almost nothing left on
    the disk; any other error (a bug) is never guessed from the free space."""
    seen: BaseException | None = err
    while seen is not None:
        if isinstance(seen, OSError) and seen.errno == errno.ENOSPC:
            return True
        if any(text in str(seen).lower() for text in _FULL_TEXTS):
            return True
        seen = seen.__cause__ or seen.__context__
    return isinstance(err, (OSError, RuntimeError)) and free_bytes(folder) < LOW_SPACE


def free_bytes(folder: str | os.PathLike) -> int:
    """Free bytes on the disk of ``folder`` (or of its nearest existing parent)."""
    folder = Path(folder).absolute()
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    try:
        return shutil.disk_usage(folder).free
    except OSError:
        return 2**62  # unknown: not reported as a full disk


def write_failed(path: str | os.PathLike, err: BaseException, kept: str) -> UserError:
    """One line for a write of ``path`` that failed (``kept``: what is intact), or re-raise
    ``err`` when it is not a full disk or an OS refusal (a bug is not the user's to fix)."""
    path = Path(path)
    if out_of_space(err, path.parent):
        free = free_bytes(path.parent) / 2**20
        return UserError(
            f"the disk ran out of space writing {path} ({free:.0f} MiB free after removing "
            f"the partial write; {kept}): free space or pick another folder, then run again"
        )
    if isinstance(err, OSError):
        reason = err.strerror or str(err)
        return UserError(f"cannot write {path} ({reason}; {kept}); pick a writable folder")
    raise err


def missing_folders(path: str | os.PathLike) -> list[Path]:
    """The folders that creating ``path`` (a folder) would create, deepest first."""
    missing, folder = [], Path(path).absolute()
    while not folder.exists() and folder != folder.parent:
        missing.append(folder)
        folder = folder.parent
    return missing


def remove_empty(folders: list[Path]) -> None:
    """Remove each folder of ``folders`` (deepest first) that is empty; never anything else."""
    for folder in folders:
        try:
            folder.rmdir()
        except OSError:
            return  # not empty, or gone: its parents are not ours to judge
