"""Start the openenv bridge's test servers (in ``.venv-openenv``) on a free port."""

from __future__ import annotations

import socket
import subprocess
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[2]
SERVER_PYTHON = ROOT / ".venv-openenv" / "bin" / "python"
INSTALL = "the openenv tests need an OpenEnv server: make install-openenv"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(script: str, sessions: int, *extra: str) -> tuple[subprocess.Popen, str]:
    """Run ``tests/bridges/<script>`` PORT SESSIONS EXTRA...; its URL once ``/health`` answers."""
    port = free_port()
    path = Path(__file__).with_name(script)
    process = subprocess.Popen([str(SERVER_PYTHON), str(path), str(port), str(sessions), *extra])
    url = f"http://127.0.0.1:{port}"
    for _ in range(120):
        try:
            if httpx.get(f"{url}/health", timeout=1).status_code == 200:
                return process, url
        except httpx.HTTPError:
            time.sleep(0.25)
    process.kill()
    raise RuntimeError(f"the OpenEnv test server {script} did not start at {url}")
