"""The processes of one ``python`` sandbox, seen from the host: who they are, how much CPU they
used together, and a kill for every one but the interpreter (at the end of each cell).

With a cgroup the kernel keeps the list; without one it is the process tree under the
sandbox's root (bubblewrap's pid 1, or the interpreter, which adopts orphans as a subreaper).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import time
from pathlib import Path

from envs_builtin.sandbox_cgroup import Cgroup

TICKS = os.sysconf("SC_CLK_TCK")


def _stat(pid: int) -> list[str] | None:
    """The fields of /proc/PID/stat after the command name (state first), or None."""
    with contextlib.suppress(OSError):
        return Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return None


def children(pid: int) -> list[int]:
    found = []
    with contextlib.suppress(OSError):
        for task in os.listdir(f"/proc/{pid}/task"):
            with contextlib.suppress(OSError, ValueError):
                found += map(int, Path(f"/proc/{pid}/task/{task}/children").read_text().split())
    return found


def first_child(pid: int | None) -> int | None:
    found = children(pid) if pid is not None else []
    return found[0] if found else None


def tree(root: int) -> list[int]:
    """``root`` and all its descendants."""
    found, pending = [], [root]
    while pending:
        pid = pending.pop()
        found.append(pid)
        pending += children(pid)
    return found


def cpu_seconds(pid: int | None, *, reaped: bool = False) -> float | None:
    """User + system CPU seconds of one process (``reaped``: and of its waited-for children)."""
    fields = _stat(pid) if pid is not None else None
    with contextlib.suppress(TypeError, ValueError, IndexError):
        ticks = int(fields[11]) + int(fields[12])
        if reaped:
            ticks += int(fields[13]) + int(fields[14])
        return ticks / TICKS
    return None


def alive(pid: int) -> bool:
    fields = _stat(pid)
    return fields is not None and fields[0] not in ("Z", "X")


class SandboxProcesses:
    """One sandbox's processes: ``keep`` (bubblewrap and the interpreter) and the strays."""

    def __init__(self, root: int, keep: set[int], cgroup: Cgroup | None = None):
        self.root, self.keep, self.cgroup = root, keep, cgroup

    def members(self) -> list[int]:
        return self.cgroup.pids() if self.cgroup is not None else tree(self.root)

    def cpu_seconds(self) -> float | None:
        """CPU time of the whole sandbox (the processes gone included)."""
        if self.cgroup is not None:
            used = self.cgroup.cpu_seconds()
            if used is not None:
                return used
        total = 0.0
        for pid in self.members():
            total += cpu_seconds(pid, reaped=True) or 0.0
        return total

    def strays(self) -> list[int]:
        return [pid for pid in self.members() if pid not in self.keep and alive(pid)]

    def kill_strays(self) -> int:
        """SIGKILL every live process but ``keep`` once; returns how many were signalled."""
        found = self.strays()
        for pid in found:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
        return len(found)

    async def end_strays(self, timeout: float = 2.0) -> None:
        """Kill every process but ``keep`` until none is left (at most ``timeout``): a killed
        process must run once more to exit, and may have forked in the meantime."""
        deadline = time.monotonic() + timeout
        while self.kill_strays() and time.monotonic() < deadline:
            await asyncio.sleep(0.002)

    def kill_all(self) -> None:
        """SIGKILL every process of the sandbox once (the cgroup's; the tree's otherwise)."""
        self.keep = set()
        self.kill_strays()
