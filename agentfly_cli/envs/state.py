"""Where running pool servers are recorded: one JSON file per server in the state folder.

The folder is ``$AGENTFLY_STATE_DIR``, else ``pools/`` under the agentfly cache
(``$AGENTFLY_CACHE`` or ``~/.cache/agentfly``). It is private to the user (mode 0700), since a
record holds the server's token.

A server's name is its env's name and names its files, so it must be a plain file name. A record
also holds who the server process is (start time and command line): a pid that now belongs to
another process is a stale record, never a server to signal.
"""

from __future__ import annotations

import json
import os
import re
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

from agentfly_cli import settings
from agentfly_cli.envs.process_identity import identify
from agentfly_cli.errors import UserError

SERVER_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")
SERVER_MODULE = "agentfly_cli.pool_server.server"


def check_server_name(name: str) -> str:
    """``name`` when it is a plain name (no path, no ``..``); a one-line UserError otherwise."""
    if not SERVER_NAME.fullmatch(name) or ".." in name:
        raise UserError(
            f"{name!r} is not a valid pool server name: use 1 to 64 letters, digits, '_', '-' "
            "or '.', starting with a letter or digit (an env name, not a path)"
        )
    return name


def state_dir() -> Path:
    """The state folder, created private on first use."""
    folder = settings.state_dir()
    folder.mkdir(parents=True, exist_ok=True)
    folder.chmod(0o700)
    return folder


@dataclass
class ServerRecord:
    """One pool server: what ``agentfly env servers`` and a client need to find and trust it."""

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
    start_time: int | None = None  # /proc/PID/stat field 22 of the server process
    cmdline: str = ""

    def public(self) -> dict[str, Any]:
        """The record without its token."""
        data = asdict(self)
        data.pop("token")
        return data


def record_path(name: str) -> Path:
    return state_dir() / f"{check_server_name(name)}.json"


def write_record(record: ServerRecord) -> None:
    """Write atomically, readable by this user only."""
    path = record_path(record.name)
    temp = path.with_suffix(f".tmp{os.getpid()}")
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as handle:
        json.dump(asdict(record), handle)
    os.replace(temp, path)


def read_record(name: str) -> ServerRecord | None:
    """The record of ``name``; its file's name is its name, whatever the file says."""
    try:
        data = json.loads(record_path(name).read_text())
        return ServerRecord(**{**data, "name": name})
    except (FileNotFoundError, ValueError, TypeError):
        return None


def read_records() -> list[ServerRecord]:
    records = []
    for path in sorted(state_dir().glob("*.json")):
        if not SERVER_NAME.fullmatch(path.stem) or ".." in path.stem:
            continue  # not written by a server
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


ServerState = Literal["alive", "dead", "stale", "unverified"]


def server_state(record: ServerRecord) -> ServerState:
    """alive: the recorded server runs; dead: its pid is gone; stale: its pid is another process;
    unverified: a live pid that /proc cannot describe (ask the server itself, over its socket).

    A process counts as the server only when it is shown to be: same start time and command
    line as recorded (a record without them, from an older version, needs the server's module
    and name in the command line).
    """
    if not pid_alive(record.pid):
        return "dead"
    identity = identify(record.pid)
    if identity is None:
        return "unverified"
    if record.start_time is not None or record.cmdline:
        same = identity.start_time == record.start_time and identity.cmdline == record.cmdline
    else:
        arguments = identity.cmdline.split()
        same = SERVER_MODULE in arguments and record.name in arguments
    return "alive" if same else "stale"


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
