"""How a ``python`` sandbox process is started: bubblewrap's command line and the uid drop when
the host runs as root.

Everything here runs on the host. See ``docs/python-sandbox.md`` for what each layer blocks.
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

NOBODY = 65534  # uid/gid the sandbox runs as when we are root (RLIMIT_NPROC spares root)
PATH = "/usr/local/bin:/usr/bin:/bin"


def bwrap_command(bwrap: str, disk_mb: int, *, disable_userns: bool = True) -> list[str]:
    """The bubblewrap prefix: nothing from the host but a read-only /usr (and its links).

    The only writable place is one tmpfs of ``disk_mb``, mounted on /dev/shm and reached as
    /tmp too (a link), so files anywhere count against one size; / and /dev are read-only.
    ``disable_userns``: no user namespaces inside (bubblewrap 0.8+). The command runs as pid 1
    of the sandbox (``--as-pid-1``): no process of bubblewrap's is inside with it.
    """
    command = [bwrap, "--unshare-all", "--unshare-user", "--die-with-parent", "--as-pid-1"]
    command += ["--cap-drop", "ALL"]
    if disable_userns:
        command.append("--disable-userns")
    command += ["--ro-bind", "/usr", "/usr"]
    for name in ("bin", "sbin", "lib", "lib32", "lib64", "libx32"):
        path = Path("/", name)
        if path.is_symlink():
            command += ["--symlink", os.readlink(path), str(path)]
        elif path.is_dir():
            command += ["--ro-bind", str(path), str(path)]
    command += ["--proc", "/proc", "--dev", "/dev"]
    command += ["--size", str(disk_mb << 20), "--tmpfs", "/dev/shm", "--remount-ro", "/dev"]
    command += ["--symlink", "/dev/shm", "/tmp", "--remount-ro", "/"]
    command += ["--chdir", "/tmp", "--clearenv"]
    for name, value in (("PATH", PATH), ("HOME", "/tmp"), ("LANG", "C.UTF-8")):
        command += ["--setenv", name, value]
    return command


@functools.lru_cache(maxsize=8)
def supports_disable_userns(bwrap: str) -> bool:
    """Whether this bubblewrap has ``--disable-userns`` (0.8.0 and later)."""
    try:
        done = subprocess.run([bwrap, "--help"], capture_output=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return False
    return b"--disable-userns" in done.stdout + done.stderr


def bwrap_problem(bwrap: str | None = None) -> str | None:
    """Why bubblewrap cannot sandbox here, or None when it can (runs ``true`` in it once)."""
    path = bwrap or shutil.which("bwrap")
    if not path:
        return "bubblewrap is not installed (apt-get install bubblewrap)"
    try:
        command = [*bwrap_command(path, 1, disable_userns=False), "/usr/bin/true"]
        done = subprocess.run(as_nobody(command), capture_output=True, timeout=30, **drop_root())
    except (OSError, subprocess.SubprocessError) as exc:
        return f"{path}: {exc}"
    if done.returncode:
        return done.stderr.decode(errors="replace").strip() or f"exit status {done.returncode}"
    return None


def drop_root() -> dict[str, Any]:
    """Subprocess arguments that start a child as nobody when we are root and ``setpriv`` is
    missing (uvloop, which Ray's async actors run on, does not take these arguments)."""
    if os.geteuid() != 0 or setpriv():
        return {}
    return {"user": NOBODY, "group": NOBODY, "extra_groups": []}


def as_nobody(command: list[str]) -> list[str]:
    """``command``, prefixed to run as nobody when we are root (util-linux ``setpriv``)."""
    path = setpriv() if os.geteuid() == 0 else None
    if not path:
        return command
    return [path, f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", "--", *command]


def setpriv() -> str | None:
    return shutil.which("setpriv")
