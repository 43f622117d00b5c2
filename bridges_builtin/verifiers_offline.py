"""verifiers 0.4's harness program, offline.

Even 0.4's plain ``null`` harness runs verifiers' own chat program as a PEP 723 script: the
subprocess runtime runs ``uv sync --script`` on it (bootstrapping ``uv`` from the network when
it is not on PATH), then the script's interpreter. The install step (``python
bridges_builtin/verifiers_offline.py VENV``, run by ``make install-verifiers``) puts ``uv`` in
the venv, downloads the script's dependencies into ``VENV/vf-wheels`` and syncs the script
once; ``offline_env`` is the environment under which the driver's episodes then find all of
it locally: uv from the venv, its only package index a local one over the wheel folder, verifiers'
cache and uv's under the venv. Standard library only: agentfly imports it, and make runs it with any
python.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

#: the dependencies of verifiers 0.4.0's chat program (harnesses/utils/launch.py)
CHAT_PROGRAM_DEPS = ("openai", "mcp==2.0.0", "httpx", "httpx2", "tenacity", "certifi")
UV = "uv==0.13.9"
MARKER = ".offline-ready"


def offline_env(venv: Path, path: str) -> dict[str, str]:
    """The variables that keep a 0.4 episode's harness setup on this machine."""
    venv = Path(venv).resolve()
    return {
        "HOME": str(venv / "home"),  # verifiers' cache: the synced script's stable path
        "PATH": os.pathsep.join([str(venv / "bin"), path]) if path else str(venv / "bin"),
        "UV_CACHE_DIR": str(venv / "uv-cache"),
        "UV_DEFAULT_INDEX": (venv / "vf-index").as_uri(),  # the only index: local wheels
        "UV_PYTHON": str(venv / "bin" / "python"),
        "UV_PYTHON_DOWNLOADS": "never",
        "UV_NO_PROGRESS": "1",
    }


def write_index(wheels: Path, index: Path) -> int:
    """A PEP 503 simple index of the wheels in ``wheels`` (uv 0.13 has no ``--no-index``
    variable, and ``prepare_uv_script`` forces ``UV_OFFLINE=false``): one page per project."""
    projects: dict[str, list[Path]] = {}
    for wheel in sorted(wheels.glob("*.whl")):
        name = re.sub(r"[-_.]+", "-", wheel.name.split("-")[0]).lower()
        projects.setdefault(name, []).append(wheel)
    for name, files in projects.items():
        page = index / name
        page.mkdir(parents=True, exist_ok=True)
        links = "".join(f'<a href="{f.resolve().as_uri()}">{f.name}</a>\n' for f in files)
        (page / "index.html").write_text(f"<!DOCTYPE html>\n<html><body>\n{links}</body></html>\n")
    return len(projects)


def offline_ready(venv: Path) -> bool:
    """Whether the install step ran to its end in ``venv``."""
    return (Path(venv) / MARKER).exists()


def prepare(venv: Path) -> None:
    """Install uv, download the chat program's wheels, sync the script once (network here)."""
    venv = Path(venv).resolve()
    pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "-q"]
    subprocess.run([*pip, UV], check=True)
    wheels = venv / "vf-wheels"
    wheels.mkdir(exist_ok=True)
    subprocess.run(
        [str(venv / "bin" / "python"), "-m", "pip", "download", "-q", "-d", str(wheels),
         *CHAT_PROGRAM_DEPS],
        check=True,
    )  # fmt: skip
    write_index(wheels, venv / "vf-index")
    (venv / "home").mkdir(exist_ok=True)
    env = {**os.environ, **offline_env(venv, os.environ.get("PATH", ""))}
    env.pop("PYTHONPATH", None)
    driver = Path(__file__).with_name("verifiers_driver_v04.py")
    done = subprocess.run(
        [str(venv / "bin" / "python"), "-P", str(driver), "prepare"],
        env=env, capture_output=True, text=True, check=False,
    )  # fmt: skip
    if done.returncode != 0:
        sys.exit(f"syncing verifiers' chat program failed: {done.stderr.strip()[-800:]}")
    print(json.dumps({"chat_program": done.stdout.strip()}))
    (venv / MARKER).write_text("ok\n")


if __name__ == "__main__":
    prepare(Path(sys.argv[1]))
