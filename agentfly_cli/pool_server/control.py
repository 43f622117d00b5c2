"""Start, list and stop pool servers: the library behind ``agentfly env up / servers / down``.

A process is signalled only when it is shown to be the recorded server (its start time and
command line, or where /proc cannot tell, its own pid over its socket): after a crash its pid
may belong to anything.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pydantic

from agentfly_cli.envs.manager import check_options
from agentfly_cli.envs.remote import Connection, server_request
from agentfly_cli.envs.state import (
    ServerRecord,
    check_server_name,
    read_record,
    read_records,
    remove_record,
    server_state,
    state_dir,
)
from agentfly_cli.errors import UserError
from agentfly_cli.settings.envs import EnvPoolSettings


class ServerStartError(RuntimeError):
    """The pool server process failed to come up; the message holds the end of its log."""


def recorded_server_state(record: ServerRecord, timeout: float = 3.0) -> str:
    """alive, dead or stale (its pid now belongs to another process); see :func:`server_state`.

    Where /proc cannot tell, the server is asked for its pid over its socket.
    """
    state = server_state(record)
    if state != "unverified":
        return state
    try:
        hello = asyncio.run(_say_hello(record, timeout))
    except Exception:
        return "stale"
    return "alive" if hello.get("pid") == record.pid else "stale"


async def _say_hello(record: ServerRecord, timeout: float) -> dict[str, Any]:
    connection = Connection(record.address, record.token)
    try:
        return await connection.open(timeout)
    finally:
        connection.close()


def check_not_running(name: str) -> None:
    record = read_record(check_server_name(name))
    if record is not None and recorded_server_state(record) == "alive":
        raise UserError(
            f"a pool server for '{name}' already runs (pid {record.pid}, {record.address}); "
            f"stop it first with `agentfly env down {name}`"
        )
    if record is not None:
        _forget(record)


def _env_spec(name: str, plugin_host: Any) -> Any:
    if plugin_host is None:
        from agentfly_cli.plugin_host.plugins import get_plugin_host

        plugin_host = get_plugin_host()
    return plugin_host.components.envs.get(name)


def start_server(
    name: str,
    config: EnvPoolSettings,
    *,
    host: str | None = None,
    port: int = 0,
    wait: float = 120.0,
    plugin_host: Any = None,
) -> ServerRecord:
    """Start a pool server in the background and wait until its warm envs are up.

    The env ``name`` is looked up in ``plugin_host`` (default: the installed plugins); the
    server process loads the installed plugins itself, so the env must be installed."""
    check_server_name(name)
    spec = _env_spec(name, plugin_host)  # unknown names fail here, clearly
    try:
        config.pool_limits(spec)
    except ValueError as exc:
        raise UserError(f"{exc}; lower --size or raise --max") from None
    check_options(spec, config.options)
    check_not_running(name)
    log_path = state_dir() / f"{name}.log"
    command = [sys.executable, "-m", "agentfly_cli.pool_server.server", name]
    command += ["--config", config.model_dump_json(exclude_defaults=True)]
    if host:
        command += ["--host", host, "--port", str(port)]
    with open(log_path, "ab") as log:
        process = subprocess.Popen(
            command,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # outlives this command and the terminal's Ctrl-C
        )
    deadline = time.monotonic() + wait
    while time.monotonic() < deadline:
        record = read_record(name)
        if record is not None and record.pid == process.pid and record.ready:
            return record
        if process.poll() is not None:
            remove_record(name, pid=process.pid)
            raise ServerStartError(
                f"the '{name}' pool server exited with code {process.returncode}:\n"
                + _log_tail(log_path)
            )
        time.sleep(0.05)
    _terminate(process.pid, grace=5.0)
    remove_record(name, pid=process.pid)
    raise ServerStartError(
        f"the '{name}' pool server was not ready within {wait:g} s (see {log_path}):\n"
        + _log_tail(log_path)
    )


def list_servers(timeout: float = 3.0) -> list[dict[str, Any]]:
    """Every recorded server with its live pool state; dead and stale ones are reported once,
    then forgotten."""
    rows = []
    for record in read_records():
        row: dict[str, Any] = {**record.public(), "status": "starting", "stats": {}}
        state = recorded_server_state(record, timeout)
        if state != "alive":
            row["status"] = state
            if state == "stale":
                row["error"] = f"pid {record.pid} now belongs to another process"
            _forget(record)
        elif record.ready:
            try:
                described = asyncio.run(
                    server_request(record.address, {"op": "stats"}, record.token, timeout)
                )
                row["status"] = "ready"
                row["stats"] = described.get("stats", {})
                row["settings"] = described.get("settings", {})
                row["provider_info"] = {
                    k: v for k, v in described.items() if k not in ("stats", "settings")
                }
            except Exception as exc:
                row["status"] = "unresponsive"
                row["error"] = f"{type(exc).__name__}: {exc}"
        row["uptime_s"] = round(time.time() - record.started_at, 1)
        rows.append(row)
    return rows


def stop_server(name: str, timeout: float = 30.0) -> dict[str, Any]:
    """Ask the server to close its envs and exit; escalate to SIGTERM, then SIGKILL."""
    record = read_record(check_server_name(name))
    if record is None:
        running = ", ".join(r.name for r in read_records()) or "none"
        raise UserError(f"no pool server named '{name}'; running: {running}")
    state = recorded_server_state(record)
    if state == "dead":
        how = "already dead"
    elif state == "stale":
        how = f"not signalled: pid {record.pid} now belongs to another process"
    else:
        how = "shutdown"
        try:
            asyncio.run(server_request(record.address, {"op": "shutdown"}, record.token, 5.0))
        except Exception:
            how = "SIGTERM" if _signal(record, signal.SIGTERM) else _UNVERIFIED.format(record.pid)
        if not _wait_gone(record, timeout):
            how = "SIGKILL" if _signal(record, signal.SIGKILL) else _UNVERIFIED.format(record.pid)
            _wait_gone(record, 5.0)
    _forget(record)
    return {"name": name, "pid": record.pid, "stopped_by": how}


_UNVERIFIED = "not signalled: /proc cannot show that pid {} is the server; stop it by hand"


def _signal(record: ServerRecord, signum: int) -> bool:
    """Send ``signum`` to the recorded server, only if /proc shows the pid is still it."""
    if server_state(record) != "alive":
        return False
    with contextlib.suppress(ProcessLookupError):
        os.kill(record.pid, signum)
    return True


def _forget(record: ServerRecord) -> None:
    """Remove the record and the socket of a server that is gone (unless a new one took over)."""
    current = read_record(record.name)
    if current is not None and current.pid != record.pid:
        return
    remove_record(record.name, pid=record.pid)
    if not record.address.startswith("unix://") or server_state(record) == "alive":
        return
    socket = Path(record.address[len("unix://") :])
    if socket.parent == state_dir():  # only the sockets servers make; never a path elsewhere
        socket.unlink(missing_ok=True)


def _wait_gone(record: ServerRecord, timeout: float) -> bool:
    """Wait until the recorded server has exited (its pid is gone or is another process)."""
    deadline = time.monotonic() + timeout
    while True:
        with contextlib.suppress(ChildProcessError):
            os.waitpid(record.pid, os.WNOHANG)  # reap it when it is our child
        if server_state(record) in ("dead", "stale"):
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.05)


def _terminate(pid: int, grace: float) -> None:
    """Stop our own child (not yet reaped, so its pid cannot have been reused)."""
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline:
        with contextlib.suppress(ChildProcessError):
            if os.waitpid(pid, os.WNOHANG)[0] == pid:
                return
        time.sleep(0.05)
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, 0)


def _log_tail(path: Path, lines: int = 15) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


_FLAGS = {"warm_size": "--size", "pool_max": "--max", "lease_timeout": "--lease-timeout"}


def pool_config(**values: Any) -> EnvPoolSettings:
    """The server's pool config from ``env up``'s flags; a bad value is a one-line error."""
    try:
        return EnvPoolSettings(**values)
    except pydantic.ValidationError as exc:
        error = exc.errors()[0]
        field = str(error["loc"][0]) if error["loc"] else ""
        flag = _FLAGS.get(field, f"--{field.replace('_', '-')}")
        raise UserError(f"{flag}: {error['msg']} (got {error.get('input')!r})") from None


def parse_options(items: list[str]) -> dict[str, Any]:
    """``--option key=value`` pairs; values are parsed as JSON where they can be."""
    options: dict[str, Any] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise UserError(f"--option {item!r}: use KEY=VALUE, e.g. --option memory_mb=512")
        try:
            options[key] = json.loads(value)
        except ValueError:
            options[key] = value
    return options
