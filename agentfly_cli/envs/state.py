"""Where running pool servers are recorded: one JSON file per server in the state folder.

The folder is ``$AGENTFLY_STATE_DIR``, else ``pools/`` under the agentfly cache
(``$AGENTFLY_CACHE`` or ``~/.cache/agentfly``). It is private to the user (mode 0700), since a
record holds the server's token.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any


def state_dir() -> Path:
    """The state folder, created private on first use."""
    root = os.environ.get("AGENTFLY_STATE_DIR")
    if root:
        folder = Path(root)
    else:
        cache = os.environ.get("AGENTFLY_CACHE") or os.path.join(
            os.path.expanduser("~"), ".cache", "agentfly"
        )
        folder = Path(cache) / "pools"
    folder.mkdir(parents=True, exist_ok=True)
    folder.chmod(0o700)
    return folder


@dataclass
class ServerRecord:
    """One pool server: what ``agentfly env ls`` and a client need to find and trust it."""

    name: str
    pid: int
    address: str
    provider: str = "local"
    size: int = 0
    pool_max: int = 0
    token: str = ""
    log: str = ""
    started_at: float = field(default_factory=time.time)
    ready: bool = False
    error: str = ""

    def public(self) -> dict[str, Any]:
        """The record without its token."""
        data = asdict(self)
        data.pop("token")
        return data


def record_path(name: str) -> Path:
    return state_dir() / f"{name}.json"


def write_record(record: ServerRecord) -> None:
    """Write atomically, readable by this user only."""
    path = record_path(record.name)
    temp = path.with_suffix(f".tmp{os.getpid()}")
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as handle:
        json.dump(asdict(record), handle)
    os.replace(temp, path)


def read_record(name: str) -> ServerRecord | None:
    try:
        data = json.loads(record_path(name).read_text())
        return ServerRecord(**data)
    except (FileNotFoundError, ValueError, TypeError):
        return None


def read_records() -> list[ServerRecord]:
    records = []
    for path in sorted(state_dir().glob("*.json")):
        record = read_record(path.stem)
        if record is not None:
            records.append(record)
    return records


def remove_record(name: str, pid: int | None = None) -> None:
    """Remove a record (only if it still belongs to ``pid``, when given)."""
    record = read_record(name)
    if record is not None and pid is not None and record.pid != pid:
        return
    record_path(name).unlink(missing_ok=True)


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # a zombie is not alive
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().split(") ", 1)[1][:1] != "Z"
    except (OSError, IndexError):
        return True
