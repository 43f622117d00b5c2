"""How a ``python`` sandbox process is started: bubblewrap's command line, the uid drop when the
host runs as root, and a private kernel keyring.

Everything here runs on the host. See ``docs/python-sandbox.md`` for what each layer blocks.
"""

from __future__ import annotations

import ctypes
import functools
import os
import platform
import shutil
import subprocess
from pathlib import Path
from typing import Any

NOBODY = 65534  # uid/gid the sandbox runs as when we are root (RLIMIT_NPROC spares root)
PATH = "/usr/local/bin:/usr/bin:/bin"
KEYCTL_JOIN_SESSION_KEYRING = 1
SYS_KEYCTL = {"x86_64": 250, "aarch64": 219, "riscv64": 219, "ppc64le": 311, "s390x": 280}


def bwrap_command(bwrap: str, disk_mb: int, *, disable_userns: bool = True) -> list[str]:
    """The bubblewrap prefix: nothing from the host but a read-only /usr (and its links).

    The only writable place is one tmpfs of ``disk_mb``, mounted on /dev/shm and reached as
    /tmp too (a link), so files anywhere count against one size; / and /dev are read-only.
    ``disable_userns``: no user namespaces inside (bubblewrap 0.8+).
    """
    command = [bwrap, "--unshare-all", "--unshare-user", "--die-with-parent", "--cap-drop", "ALL"]
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


def _keyctl():
    number = SYS_KEYCTL.get(platform.machine())
    if number is None:
        return None
    try:
        syscall = ctypes.CDLL(None, use_errno=True).syscall
    except (OSError, AttributeError):
        return None
    syscall.restype = ctypes.c_long
    return functools.partial(syscall, number, KEYCTL_JOIN_SESSION_KEYRING, None)


_join_new_session_keyring = _keyctl()  # made here: the child after fork only calls it


def detach_keyring() -> None:
    """``preexec_fn`` of a sandbox: join a new, empty session keyring before exec.

    A child otherwise shares the host's session keyring, and whoever holds a keyring may read
    the keys in it whatever its uid (the possessor permissions). Where the kernel has no
    keyrings the call fails, and there is nothing to detach from.
    """
    if _join_new_session_keyring is not None:
        _join_new_session_keyring()
