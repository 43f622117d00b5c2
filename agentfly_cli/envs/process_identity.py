"""Who a pid is: its start time and command line, so that a recycled pid is never taken for ours.

After a crash the kernel may give a pool server's pid to any other process. A pid together with
its start time (``/proc/PID/stat`` field 22, clock ticks since boot) names one process for the
life of the machine; the command line is checked too.
"""

from __future__ import annotations

import os
from dataclasses import dataclass


@dataclass(frozen=True)
class ProcessIdentity:
    """What tells one process from a later one with the same pid."""

    start_time: int
    cmdline: str


def identify(pid: int) -> ProcessIdentity | None:
    """The identity of the live process ``pid``; None when it is gone or /proc cannot tell."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            stat = handle.read().decode(errors="replace")
        with open(f"/proc/{pid}/cmdline", "rb") as handle:
            arguments = handle.read().split(b"\0")
    except OSError:
        return None
    # the command name (field 2) may hold spaces and parentheses: fields 3.. follow the last ")"
    fields = stat.rsplit(")", 1)[-1].split()
    if len(fields) < 20 or not fields[19].isdigit():
        return None
    cmdline = " ".join(a.decode(errors="replace") for a in arguments if a)
    return ProcessIdentity(start_time=int(fields[19]), cmdline=cmdline)


def own_identity() -> ProcessIdentity | None:
    """This process's identity (None where there is no /proc)."""
    return identify(os.getpid())
