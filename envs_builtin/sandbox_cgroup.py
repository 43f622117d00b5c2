"""A cgroup per ``python`` sandbox: memory, processes and CPU bounded for all its processes
together, its CPU time measured, and its processes listed (so none can hide from a kill).

cgroup v2 is used where our own cgroup can hold child cgroups with the ``memory`` and ``pids``
controllers (the root cgroup, or one whose controllers can be enabled); cgroup v1 where its
``memory`` and ``pids`` hierarchies are mounted and writable (as root). The sandbox cgroup is
made under our own, so the host's limits still bound it. :func:`unavailable` says why not.
"""

from __future__ import annotations

import contextlib
import os
import re
import secrets
from dataclasses import dataclass
from pathlib import Path

NEEDED = ("memory", "pids")  # without these a cgroup bounds nothing we need
OPTIONAL = ("cpu", "cpuacct")  # CPU rate limit; CPU time (v1; v2 always has cpu.stat)
PREFIX = "agentfly-sandbox-"
CPU_PERIOD_US = 100_000


@dataclass(frozen=True)
class Limits:
    memory_bytes: int
    pids: int
    cpus: float


class CgroupUnavailable(RuntimeError):
    """No cgroup can be made here; the message says why."""


def _unescape(path: str) -> str:
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), path)


def _mounts() -> tuple[Path | None, dict[str, Path]]:
    """Our cgroup folder in the v2 hierarchy, and in each v1 hierarchy by controller."""
    own: dict[str, str] = {}
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        for name in controllers.split(",") if controllers else [""]:
            own[name] = path
    unified, legacy = None, {}
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        left, _, right = line.partition(" - ")
        fields, (fstype, _, options) = left.split(), (right.split() + ["", "", ""])[:3]
        root, point = _unescape(fields[3]), Path(_unescape(fields[4]))
        names = {"cgroup2": [""], "cgroup": options.split(",")}.get(fstype, [])
        for name in names:
            path = own.get(name)
            if path is None or not path.startswith(root):
                continue
            folder = point / path[len(root) :].lstrip("/")
            if name == "":
                unified = folder
            elif name in NEEDED + OPTIONAL:
                legacy[name] = folder
    return unified, legacy


def _v2_parent(folder: Path | None) -> Path | None:
    """Our v2 cgroup if it can hold child cgroups with memory and pids, else None."""
    if folder is None or not (folder / "cgroup.controllers").exists():
        return None
    if not set(NEEDED) <= set((folder / "cgroup.controllers").read_text().split()):
        return None
    enabled = set((folder / "cgroup.subtree_control").read_text().split())
    missing = [name for name in (*NEEDED, "cpu") if name not in enabled]
    with contextlib.suppress(OSError):  # refused (EBUSY) in a non-root cgroup with processes
        if missing:
            (folder / "cgroup.subtree_control").write_text(" ".join(f"+{m}" for m in missing))
    enabled = set((folder / "cgroup.subtree_control").read_text().split())
    return folder if set(NEEDED) <= enabled else None


def _write(path: Path, value: str) -> None:
    path.write_text(value)


class Cgroup:
    """One sandbox's cgroup: a folder (v2) or a folder per controller (v1)."""

    def __init__(self, version: int, folders: dict[str, Path]):
        self.version, self.folders = version, folders

    @classmethod
    def create(cls, limits: Limits) -> Cgroup:
        """A new cgroup under ours, with ``limits`` set; raises :class:`CgroupUnavailable`."""
        global _why_not
        if _why_not is not None:
            raise CgroupUnavailable(_why_not)
        name = f"{PREFIX}{os.getpid()}-{secrets.token_hex(4)}"
        try:
            unified, legacy = _mounts()
            parent = _v2_parent(unified)
            if parent is not None:
                group = cls(2, {"": parent / name})
            elif set(NEEDED) <= set(legacy):
                group = cls(1, {c: folder / name for c, folder in legacy.items()})
            else:
                raise CgroupUnavailable(
                    "no cgroup v2 with the memory and pids controllers to delegate, nor "
                    "cgroup v1 memory and pids hierarchies"
                )
            _sweep(group.folders.values())
            group._make(limits)
        except CgroupUnavailable as exc:
            _why_not = str(exc)
            raise
        except OSError as exc:
            _why_not = f"cannot make a cgroup ({exc.strerror or exc}: {exc.filename or ''})"
            raise CgroupUnavailable(_why_not) from exc
        return group

    def _make(self, limits: Limits) -> None:
        made = []
        try:
            for folder in dict.fromkeys(self.folders.values()):
                folder.mkdir()
                made.append(folder)
            quota = f"{max(int(limits.cpus * CPU_PERIOD_US), 1000)}"
            if self.version == 2:
                folder = self.folders[""]
                _write(folder / "memory.max", str(limits.memory_bytes))
                if (folder / "memory.swap.max").exists():
                    _write(folder / "memory.swap.max", "0")
                _write(folder / "pids.max", str(limits.pids))
                if (folder / "cpu.max").exists():
                    _write(folder / "cpu.max", f"{quota} {CPU_PERIOD_US}")
                return
            memory = self.folders["memory"]
            _write(memory / "memory.limit_in_bytes", str(limits.memory_bytes))
            if (memory / "memory.memsw.limit_in_bytes").exists():  # swap counted too
                _write(memory / "memory.memsw.limit_in_bytes", str(limits.memory_bytes))
            _write(self.folders["pids"] / "pids.max", str(limits.pids))
            if "cpu" in self.folders:
                _write(self.folders["cpu"] / "cpu.cfs_period_us", str(CPU_PERIOD_US))
                _write(self.folders["cpu"] / "cpu.cfs_quota_us", quota)
        except BaseException:
            for folder in made:
                with contextlib.suppress(OSError):
                    folder.rmdir()
            raise

    def attach(self, pids: list[int]) -> None:
        """Move processes in (each hierarchy of v1); what they start later is inside too."""
        for folder in dict.fromkeys(self.folders.values()):
            for pid in pids:
                _write(folder / "cgroup.procs", str(pid))

    def pids(self) -> list[int]:
        """Every process in the cgroup."""
        folder = self.folders.get("pids", self.folders.get(""))
        with contextlib.suppress(OSError, ValueError):
            return [int(pid) for pid in (folder / "cgroup.procs").read_text().split()]
        return []

    def cpu_seconds(self) -> float | None:
        """CPU time of every process that ever ran in it, or None where not measured."""
        with contextlib.suppress(OSError, ValueError, StopIteration):
            if self.version == 2:
                stat = (self.folders[""] / "cpu.stat").read_text().split()
                return int(stat[stat.index("usage_usec") + 1]) / 1e6
            if "cpuacct" in self.folders:
                return int((self.folders["cpuacct"] / "cpuacct.usage").read_text()) / 1e9
        return None

    def remove(self) -> bool:
        """Remove the cgroup; False while processes are still leaving it (try again)."""
        done = True
        for folder in dict.fromkeys(self.folders.values()):
            try:
                folder.rmdir()
            except FileNotFoundError:
                pass
            except OSError:
                done = False
        return done


def _sweep(folders) -> None:
    """Remove empty sandbox cgroups left by processes that died without cleaning up (once)."""
    global _swept
    if _swept:
        return
    _swept = True
    for parent in {folder.parent for folder in folders}:
        for stale in parent.glob(f"{PREFIX}*"):
            owner = stale.name[len(PREFIX) :].partition("-")[0]
            if owner.isdigit() and not Path(f"/proc/{owner}").exists():
                with contextlib.suppress(OSError):
                    stale.rmdir()


_why_not: str | None = None  # why no cgroup can be made here (found once per process)
_swept = False


def unavailable() -> str | None:
    """Why sandboxes get no cgroup here, or None (tries to make one once)."""
    try:
        group = Cgroup.create(Limits(64 << 20, 8, 1.0))
        group.remove()
    except CgroupUnavailable as exc:
        return str(exc)
    return None
