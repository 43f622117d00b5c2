"""Where the verifiers venvs are, and running the driver script in one of them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from agentfly_cli.errors import UserError
from agentfly_cli.settings.variables import verifiers_path, verifiers_venv_dir

DRIVERS = {
    "0.3": Path(__file__).with_name("verifiers_driver.py"),
    "0.4": Path(__file__).with_name("verifiers_driver_v04.py"),
}
APIS = tuple(DRIVERS)


def venv_python(api: str) -> Path:
    """The python of the verifiers venv of ``api`` (``.venv-verifiers-0.3``), or one line."""
    if api not in APIS:
        raise UserError(f"--set verifiers.api={api!r}: give one of {', '.join(APIS)}")
    root = verifiers_venv_dir()
    python = root / f".venv-verifiers-{api}" / "bin" / "python"
    if not python.exists():
        raise UserError(
            f"no verifiers {api} venv at {python.parent.parent}: run make install-verifiers "
            "(or set AGENTFLY_VERIFIERS_VENV_DIR to the folder holding it)"
        )
    return python


def _driver_env(api: str) -> dict[str, str]:
    """The driver's environment: not our PYTHONPATH (its own venv's packages, plus the folders
    of ``AGENTFLY_VERIFIERS_PATH``), and uv's cache out of the home folder; for 0.4 also the
    venv's offline harness setup (verifiers_offline.py)."""
    from bridges_builtin.verifiers_offline import offline_env

    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    if verifiers_path():
        env["PYTHONPATH"] = verifiers_path()
    env.setdefault("UV_CACHE_DIR", "/tmp/agentfly-uv-cache")
    if api == "0.4":
        env.update(offline_env(venv_python(api).parent.parent, env.get("PATH", "")))
    return env


def run_driver(api: str, args: list[str], stdin: str = "", timeout: float = 600) -> str:
    """The driver's stdout; its failure is a RuntimeError carrying its last stderr line."""
    done = subprocess.run(
        [str(venv_python(api)), "-P", str(DRIVERS[api]), *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=timeout,
        env=_driver_env(api),
    )
    if done.returncode != 0:
        lines = done.stderr.strip().splitlines() or [f"exit {done.returncode}"]
        raise RuntimeError(f"verifiers driver failed: {lines[-1]}")
    return done.stdout


def episode(task: dict, base_url: str, model: str = "agentfly") -> dict:
    """One episode of ``task`` through the gateway at ``base_url``: the rubric's reward, metrics."""
    api = task["verifiers"]["api"]
    request = json.dumps({"task": task, "base_url": base_url, "model": model})
    return json.loads(run_driver(api, ["episode"], stdin=request).strip().splitlines()[-1])


if __name__ == "__main__":  # pragma: no cover - a manual probe
    print(run_driver(sys.argv[1], sys.argv[2:]))
