"""The escape suite: each attack is contained within its limit, answered with a clear
observation, and leaves the host as it was.

An attack is a cell (``{placeholders}`` are filled from the host: a TCP port the test listens
on, the test's tmp folder, the repo, the host's HOME and a secret environment variable), the
regex its observation must match, and the sandbox modes it runs in. After each attack the env
must still answer (maybe after a restart), and after close no process of the sandbox may remain.
"""

from __future__ import annotations

import asyncio
import json
import os
import platform
import re
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from envs_builtin.python_sandbox import PythonSandboxEnv, bwrap_problem
from envs_builtin.sandbox_cgroup import unavailable

REPO = Path(__file__).resolve().parents[2]
BWRAP_PROBLEM = bwrap_problem()
NO_CGROUP = unavailable()
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
    then: tuple[str, str] | None = None  # a next cell and the regex its observation must match
    needs_cgroup: bool = False  # the bound comes from the sandbox's cgroup
    seconds: float = 8.0  # the most it may take


FORGED = '{{"value": "FORGED", "ready": true, "pong": true}}'  # braces doubled: .format
ANSWER_PIPES = (  # the cell's pipes but its output: the answer pipe (and the command pipe)
    "import os, stat\nout = os.fstat(1)\npipes = []\nfor fd in range(3, 256):\n    try:\n"
    "        info = os.fstat(fd)\n    except OSError:\n        continue\n"
    "    if stat.S_ISFIFO(info.st_mode) and info.st_ino != out.st_ino:\n"
    "        pipes.append(fd)\n"
)


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
        # the memory limit must come first: on a loaded machine the page faults of 256 MB took
        # over 1 s of CPU time
        options={"cpu_seconds": 4, "wall_seconds": 6},
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
    # -- limits of the sandbox as a whole, not of each process -----------------------------------
    Attack(  # 3 x 100 MB under a 256 MB limit: RLIMIT_AS allows each, the cgroup not all
        "memory-of-all-processes",
        "import os, time\nkids = []\nfor _ in range(3):\n    pid = os.fork()\n"
        "    if pid == 0:\n        block = b'x' * (100 << 20)\n        time.sleep(0.5)\n"
        "        os._exit(0)\n    kids.append(pid)\n"
        "statuses = [os.waitpid(pid, 0)[1] for pid in kids]\n"
        "'killed: %d' % sum(os.WIFSIGNALED(s) and os.WTERMSIG(s) == 9 for s in statuses)",
        r"^'killed: [123]'$",
        options=SLOW_CLOCK,
        needs_cgroup=True,
    ),
    Attack(  # /tmp and /dev/shm share disk_mb (8 MB); / and /dev take no files at all
        "files-everywhere",
        "found = []\nfor path in ('/tmp/a', '/dev/shm/b', '/c', '/dev/d'):\n    try:\n"
        "        with open(path, 'wb') as f:\n            f.write(b'x' * (5 << 20))\n"
        "        found.append('ok')\n    except OSError as e:\n"
        "        found.append(e.strerror)\nfound",
        r"^\['ok', 'No space left on device', 'Read-only file system', "
        r"'Read-only file system'\]$",
        modes=("bwrap",),
    ),
    Attack(  # a child that loops after its cell returned is killed, not left to run
        "child-outlives-its-cell",
        "import subprocess\np = subprocess.Popen(['sh', '-c', 'while :; do :; done'])\n'started'",
        r"^'started'$",
        then=(
            "import os, time\ntime.sleep(0.3)\nstate = 'running'\ntry:\n"
            "    os.kill(p.pid, 0)\nexcept ProcessLookupError:\n    state = 'gone'\nstate",
            r"^'gone'$",
        ),
    ),
    Attack(  # the CPU limit counts the children's CPU time (the cell itself only waits)
        "children-burn-cpu",
        "import os\nos.system(\"sh -c 'while :; do :; done' & sh -c 'while :; do :; done' & "
        'sleep 30")',
        r"used more than 0.5 s of CPU time and did not stop; " + RESTARTED,
        options={"cpu_seconds": 0.5, "wall_seconds": 20},  # a busy machine gives them little
        seconds=20,
    ),
    # -- the kernel: no nested user namespaces ---------------------------------------------------
    Attack(
        "nested-user-namespace",
        "import ctypes\nlibc = ctypes.CDLL(None, use_errno=True)\n"
        "libc.unshare(0x10000000), ctypes.get_errno()",  # CLONE_NEWUSER
        r"^\(-1, (1|22|28)\)$",  # EPERM, EINVAL or ENOSPC
        modes=("bwrap",),
    ),
    # -- the REPL protocol: answers cannot be forged ---------------------------------------------
    Attack(  # answers written by the cell on the answer pipe are not taken for its answer
        "forge-an-answer",
        ANSWER_PIPES + f"for fd in pipes:\n    try:\n        os.write(fd, b'{FORGED}\\n')\n"
        "    except OSError:\n        pass\n'genuine'",
        r"^'genuine'$",
    ),
    Attack(  # a thread forging answers all the time cannot answer the next cell either
        "forge-later-answers",
        ANSWER_PIPES + "import threading, time\ndef forge():\n    while True:\n"
        f"        for fd in pipes:\n            try:\n                os.write(fd, b'{FORGED}\\n')"
        "\n            except OSError:\n                pass\n        time.sleep(0.005)\n"
        "threading.Thread(target=forge, daemon=True).start()\ntime.sleep(0.1)\n'genuine'",
        r"^'genuine'$",
        then=("import time\ntime.sleep(0.2)\n6 * 7", r"^42$"),
    ),
    Attack(  # a child process cannot reach the interpreter's pipes through /proc
        "forge-through-proc",
        "import os\nos.system(\"for f in /proc/$PPID/fd/*; do echo '"
        + FORGED.replace('"', '\\"')
        + "' > $f; done 2>/dev/null\")\n'genuine'",
        r"^'genuine'$",
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
    no_bwrap = pytest.mark.skipif(
        BWRAP_PROBLEM is not None, reason=f"bubblewrap cannot sandbox here: {BWRAP_PROBLEM}"
    )
    no_cgroup = pytest.mark.skipif(
        NO_CGROUP is not None, reason=f"no cgroup for sandboxes here: {NO_CGROUP}"
    )
    return [
        pytest.param(
            attack,
            mode,
            id=f"{attack.name}-{mode}",
            marks=[no_bwrap] * (mode == "bwrap") + [no_cgroup] * attack.needs_cgroup,
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
            then = await env.step(attack.then[0]) if attack.then else None
            after = await env.step("print('still here')")
            session = env._interpreter.proc.pid
        finally:
            await env.close()
        return observation, elapsed, then, after, session

    observation, elapsed, then, after, session = asyncio.run(scenario())
    assert re.search(attack.expect, observation), observation[-2000:]
    if attack.then:
        assert re.search(attack.then[1], then), then[-2000:]
    assert elapsed < attack.seconds, f"{attack.name} took {elapsed:.1f} s"
    assert after.endswith("still here")
    for path in host_paths:
        assert not os.path.exists(path), path
    with pytest.raises(BlockingIOError):
        host["server"].accept()  # nobody reached the host's loopback
    deadline = time.monotonic() + 3
    while session_processes(session) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert session_processes(session) == []


# -- the kernel keyring: the host's keys stay out of reach ----------------------------------------
KEYRING_HOST = """
import asyncio, ctypes, json, platform, sys, warnings
warnings.simplefilter("ignore")
sys.path.insert(0, {repo!r})
from envs_builtin.python_sandbox import PythonSandboxEnv

KEYCTL, ADD_KEY = {{"x86_64": (250, 248), "aarch64": (219, 217)}}[platform.machine()]
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
if libc.syscall(KEYCTL, 1, b"agentfly-test-session") < 0:  # KEYCTL_JOIN_SESSION_KEYRING
    print(json.dumps({{"skip": f"no kernel keyrings here (errno {{ctypes.get_errno()}})"}}))
    sys.exit()
secret = {secret!r}.encode()
if libc.syscall(ADD_KEY, b"user", b"agentfly-secret", secret, len(secret), -3) < 0:
    print(json.dumps({{"skip": f"cannot add a key (errno {{ctypes.get_errno()}})"}}))
    sys.exit()

async def main():
    env = PythonSandboxEnv(sandbox={mode!r})
    await env.start()
    try:
        return await env.step({cell!r})
    finally:
        await env.close()

print(json.dumps({{"observation": asyncio.run(main())}}))
"""
KEYRING_CELL = """
import ctypes, platform
KEYCTL = {"x86_64": 250, "aarch64": 219}[platform.machine()]
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
key = libc.syscall(KEYCTL, 10, -3, b"user", b"agentfly-secret", 0)  # KEYCTL_SEARCH, session
found = "no key"
if key > 0:
    buffer = ctypes.create_string_buffer(256)
    size = libc.syscall(KEYCTL, 11, key, buffer, 256)  # KEYCTL_READ
    found = buffer.raw[: max(size, 0)].decode(errors="replace")
found, "agentfly-secret" in open("/proc/keys").read()
"""


KEYCTL_ARCH = pytest.mark.skipif(
    platform.machine() not in ("x86_64", "aarch64"), reason="keyctl is known on x86_64, aarch64"
)
NO_BWRAP = pytest.mark.skipif(BWRAP_PROBLEM is not None, reason=f"no bubblewrap: {BWRAP_PROBLEM}")


@KEYCTL_ARCH
@pytest.mark.parametrize("mode", [pytest.param("bwrap", marks=NO_BWRAP), "none"])
def test_the_hosts_keyring_is_out_of_reach(mode):
    """The host joins a session keyring and puts a secret in it; a cell finds neither."""
    script = KEYRING_HOST.format(repo=str(REPO), secret=SECRET_VALUE, mode=mode, cell=KEYRING_CELL)
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120, cwd=REPO
    )
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    if "skip" in result:
        pytest.skip(result["skip"])
    assert SECRET_VALUE not in result["observation"]
    assert result["observation"] == "('no key', False)"
