"""The escape suite: each attack is contained within its limit, answered with a clear
observation, and leaves the host as it was.

An attack is a cell (``{placeholders}`` are filled from the host: a TCP port the test listens
on, the test's tmp folder, the repo, the host's HOME and a secret environment variable), the
regex its observation must match, and the sandbox modes it runs in. After each attack the env
must still answer (maybe after a restart), and after close no process of the sandbox may remain.
"""

from __future__ import annotations

import asyncio
import os
import re
import socket
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from envs_builtin.python_sandbox import PythonSandboxEnv, bwrap_problem

REPO = Path(__file__).resolve().parents[1]
BWRAP_PROBLEM = bwrap_problem()
SECRET_NAME, SECRET_VALUE = "AGENTFLY_TEST_SECRET", "hunter2-d41d8cd9"
RESTARTED = r"the interpreter was restarted, so its state .* is lost"
LIMITS = {"cpu_seconds": 1, "wall_seconds": 1.5, "memory_mb": 256, "disk_mb": 8}
SLOW_CLOCK = {"wall_seconds": 6}  # the CPU limit must come first, even on a busy machine
pytestmark = pytest.mark.filterwarnings("ignore::envs_builtin.python_sandbox.SandboxWarning")


@dataclass
class Attack:
    name: str
    code: str
    expect: str  # regex the observation must match
    modes: tuple[str, ...] = ("bwrap", "none")
    host_paths: tuple[str, ...] = ()  # files the attack tries to create on the host
    options: dict = field(default_factory=dict)


ATTACKS = [
    # -- network: the sandbox has no network, and its own loopback ------------------------------
    Attack(
        "internet",
        "import socket\nsocket.create_connection(('1.1.1.1', 80), timeout=3)",
        r"OSError: \[Errno 101\] Network is unreachable",
        modes=("bwrap",),
    ),
    Attack(
        "host-loopback",
        "import socket\nsocket.create_connection(('127.0.0.1', {port}), timeout=3)",
        r"ConnectionRefusedError",
        modes=("bwrap",),
    ),
    # -- the file system: /usr is read-only, the host's folders are not there -------------------
    Attack(
        "write-usr",
        "open('/usr/agentfly-escape', 'w')",
        r"(Read-only file system|Permission denied): '/usr/agentfly-escape'",
        host_paths=("/usr/agentfly-escape",),
    ),
    Attack(
        "write-repo",
        "open('{repo}/agentfly-escape', 'w')",
        r"FileNotFoundError",
        modes=("bwrap",),
        host_paths=("{repo}/agentfly-escape",),
    ),
    Attack(
        "write-host-tmp",
        "open('{tmp}/agentfly-escape', 'w')",
        r"FileNotFoundError",
        modes=("bwrap",),
        host_paths=("{tmp}/agentfly-escape",),
    ),
    Attack(
        "host-folders",
        "import os\n[os.path.exists(p) for p in ('{home}', '/root', '/work', '{repo}', '/etc')]",
        r"^\[False, False, False, False, False\]$",
        modes=("bwrap",),
    ),
    Attack(
        "huge-file",
        "open('big', 'wb').write(b'x' * (9 << 20))",
        r"OSError: \[Errno 27\] File too large",
    ),
    # -- secrets: the host's environment stays outside ------------------------------------------
    Attack(
        "environment",
        "import os\nsorted(os.environ)",
        r"^\['HOME', 'LANG', 'PATH', 'PWD'\]$",
        modes=("bwrap",),
    ),
    Attack("environment-secret", "import os\n'{secret}' in os.environ", r"^False$"),
    Attack(
        "proc-environ",
        "import os\nfound = []\nfor pid in filter(str.isdigit, os.listdir('/proc')):\n"
        "    try:\n        found += [pid] * (b'{value}' in open(f'/proc/{{pid}}/environ', 'rb')"
        ".read())\n    except OSError:\n        pass\nfound",
        r"^\[\]$",
        modes=("bwrap",),
    ),
    # -- processes: a fork bomb meets the process limit -----------------------------------------
    Attack(
        "fork-bomb",
        "import os\nwhile True:\n    os.fork()",
        r"BlockingIOError: \[Errno 11\] Resource temporarily unavailable",
    ),
    Attack(
        "shell-fork-bomb",
        "import os, time\nos.system(\"bash -c ':(){{ :|:& }};:' &\")\ntime.sleep(0.5)\n'bombed'",
        r"bombed",
    ),
    Attack(  # kill(-1) signals every process we may signal: none is visible in the sandbox
        "kill-everything",
        "import os\nos.kill(-1, 9)",
        r"ProcessLookupError: \[Errno 3\] No such process$",
        modes=("bwrap",),
    ),
    # -- memory: the address-space limit gives a MemoryError at once ----------------------------
    Attack("memory-bytearray", "bytearray(8 << 30)", r"MemoryError$"),
    Attack(
        "memory-list",
        "x = []\nwhile True:\n    x.append(bytearray(1 << 20))",
        r"MemoryError$",
        options=SLOW_CLOCK,
    ),
    # -- time: the CPU limit, then SIGINT, then a kill and a restart ----------------------------
    Attack(
        "busy-loop",
        "while True:\n    pass",
        r"TimeoutError: the cell used more than 1 s of CPU time$",
        options=SLOW_CLOCK,
    ),
    Attack("c-level-loop", "sum(range(10**12))", RESTARTED),
    Attack(
        "sleep",
        "import time\ntime.sleep(3600)",
        r"TimeoutError: the cell ran longer than 1.5 s \(wall clock\) and was interrupted; "
        r"the interpreter's state is kept$",
        modes=("bwrap",),
    ),
    Attack(
        "ignore-sigint",
        "import signal, time\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\ntime.sleep(3600)",
        RESTARTED,
        modes=("bwrap",),
    ),
    # -- output: floods are cut, never buffered whole -------------------------------------------
    Attack(
        "print-flood",
        "while True:\n    print('x' * 1000)",
        r"(?s)^x{100}\n\[output truncated: \d+ more characters\].*CPU time$",
        options={"max_output_chars": 100, **SLOW_CLOCK},
    ),
    Attack(
        "child-flood",
        "import os\nos.system('yes | head -c 20000000')",
        r"^(y\n){50}\n\[output truncated: 199999\d\d more characters\]\n0$",
        options={"max_output_chars": 100},
    ),
]


def session_processes(session: int) -> list[int]:
    """Live processes of one session (the sandbox's), from /proc."""
    found = []
    for name in filter(str.isdigit, os.listdir("/proc")):
        try:
            fields = Path(f"/proc/{name}/stat").read_text().rpartition(")")[2].split()
        except OSError:
            continue
        if fields[0] != "Z" and int(fields[3]) == session:
            found.append(int(name))
    return found


@pytest.fixture
def host(tmp_path, monkeypatch):
    """What the attacks aim at: a listening port on the host's loopback, folders, a secret."""
    monkeypatch.setenv(SECRET_NAME, SECRET_VALUE)
    server = socket.create_server(("127.0.0.1", 0))
    server.setblocking(False)
    yield {
        "port": server.getsockname()[1],
        "tmp": str(tmp_path),
        "repo": str(REPO),
        "home": os.path.expanduser("~"),
        "secret": SECRET_NAME,
        "value": SECRET_VALUE,
        "server": server,
    }
    server.close()


def cases() -> list:
    reason = f"bubblewrap cannot sandbox here: {BWRAP_PROBLEM}"
    skip = pytest.mark.skipif(BWRAP_PROBLEM is not None, reason=reason)
    return [
        pytest.param(
            attack, mode, id=f"{attack.name}-{mode}", marks=skip if mode == "bwrap" else ()
        )
        for attack in ATTACKS
        for mode in attack.modes
    ]


@pytest.mark.parametrize(("attack", "mode"), cases())
def test_attack_is_contained(attack, mode, host):
    code = attack.code.format(**host)
    host_paths = [path.format(**host) for path in attack.host_paths]

    async def scenario():
        env = PythonSandboxEnv(sandbox=mode, **{**LIMITS, **attack.options})
        await env.start()
        try:
            started = time.monotonic()
            observation = await env.step(code)
            elapsed = time.monotonic() - started
            after = await env.step("print('still here')")
            session = env._interpreter.proc.pid
        finally:
            await env.close()
        return observation, elapsed, after, session

    observation, elapsed, after, session = asyncio.run(scenario())
    assert re.search(attack.expect, observation), observation[-2000:]
    assert elapsed < 8, f"{attack.name} took {elapsed:.1f} s"
    assert after.endswith("still here")
    for path in host_paths:
        assert not os.path.exists(path), path
    with pytest.raises(BlockingIOError):
        host["server"].accept()  # nobody reached the host's loopback
    deadline = time.monotonic() + 3
    while session_processes(session) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert session_processes(session) == []
