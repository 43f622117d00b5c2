"""The trainer makes glibc give freed tensor-sized blocks back to the OS (train/heap.py)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from agentfly_cli.runtime import malloc as heap

# Frees 252 MB of 4 MB blocks below a live one, after an 8 MB free raised glibc's dynamic mmap
# threshold: from the heap, that space stays in the process (the live top block pins it).
FRAGMENTED_HEAP = """
import ctypes, sys
from agentfly_cli.runtime.malloc import return_freed_memory
if sys.argv[1] == "fixed":
    assert return_freed_memory()
libc = ctypes.CDLL(None)
libc.malloc.restype = ctypes.c_void_p
libc.malloc.argtypes = [ctypes.c_size_t]
libc.free.argtypes = [ctypes.c_void_p]
libc.memset.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_size_t]
MB = 1 << 20
first = libc.malloc(8 * MB)
libc.memset(first, 1, 8 * MB)
libc.free(first)
blocks = [libc.malloc(4 * MB) for _ in range(64)]
for block in blocks:
    libc.memset(block, 1, 4 * MB)
for block in blocks[:-1]:
    libc.free(block)
status = open("/proc/self/status").read()
print(int(status.split("VmRSS:")[1].split()[0]) // 1024)
"""


def rss_after_frees(mode: str, tuning: str = "0") -> int:
    """MB resident after the frees; ``tuning``: AGENTFLY_MALLOC_TUNING of the process."""
    env = {**os.environ, "AGENTFLY_MALLOC_TUNING": tuning}
    out = subprocess.run(
        [sys.executable, "-c", FRAGMENTED_HEAP, mode],
        capture_output=True,
        text=True,
        check=True,
        env=env,
    )
    return int(out.stdout.strip())


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt: Linux only")
def test_freed_blocks_go_back_to_the_os():
    default, fixed = rss_after_frees("default"), rss_after_frees("fixed")
    assert default - fixed > 200, (default, fixed)  # MB


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt: Linux only")
def test_with_the_decode_tuning_on_the_thresholds_are_left_to_the_backends():
    # the hf and torch backends raise them (agentfly_cli/runtime/malloc.py): fixing them first
    # would only be undone, so the freed blocks stay as without the call
    kept, fixed = rss_after_frees("fixed", tuning="1"), rss_after_frees("fixed")
    assert kept - fixed > 200, (kept, fixed)  # MB


# Four threads alive at once, each allocating: by default each gets an arena of its own.
THREAD_ARENAS = """
import ctypes, sys, threading
from agentfly_cli.runtime.malloc import return_freed_memory
if sys.argv[1] == "fixed":
    assert return_freed_memory()
libc = ctypes.CDLL(None)
libc.malloc.restype = ctypes.c_void_p
libc.malloc.argtypes = [ctypes.c_size_t]
together = threading.Barrier(4)
kept = []
def work():
    together.wait()
    kept.append(libc.malloc(1000))
    together.wait()
threads = [threading.Thread(target=work) for _ in range(4)]
for thread in threads:
    thread.start()
for thread in threads:
    thread.join()
libc.malloc_stats()
"""


def arenas(mode: str) -> int:
    out = subprocess.run(
        [sys.executable, "-c", THREAD_ARENAS, mode], capture_output=True, text=True, check=True
    )
    return sum(1 for line in out.stderr.splitlines() if line.startswith("Arena "))


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt: Linux only")
def test_threads_share_one_arena():
    assert arenas("default") > 1
    assert arenas("fixed") == 1


def test_the_cli_sets_it_before_torch_is_imported():
    code = (
        "import sys, agentfly_cli.runtime.malloc as heap\n"
        "calls = []\n"
        "heap.return_freed_memory = lambda: calls.append('torch' in sys.modules)\n"
        "from agentfly_cli.cli import app\n"
        "sys.argv = ['agentfly', '--help']\n"
        "try:\n"
        "    app.main()\n"
        "except SystemExit:\n"
        "    pass\n"
        "print(calls)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip().splitlines()[-1] == "[False]"


# 256 MB of 64 KiB blocks (under the mmap threshold: from the heap), all freed but the top one,
# which keeps the heap from shrinking: only malloc_trim hands the free pages below it back.
SMALL_BLOCKS = """
import ctypes, sys
from agentfly_cli.runtime.malloc import return_freed_memory, trim_heap
assert return_freed_memory()
libc = ctypes.CDLL(None)
libc.malloc.restype = ctypes.c_void_p
libc.malloc.argtypes = [ctypes.c_size_t]
libc.free.argtypes = [ctypes.c_void_p]
libc.memset.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_size_t]
def rss():
    return int(open("/proc/self/status").read().split("VmRSS:")[1].split()[0]) // 1024
blocks = [libc.malloc(64 << 10) for _ in range(4096)]
for block in blocks:
    libc.memset(block, 1, 64 << 10)
for block in blocks[:-1]:
    libc.free(block)
before = rss()
if sys.argv[1] == "trim":
    assert trim_heap()
print(before, rss())
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's malloc_trim: Linux only")
@pytest.mark.parametrize("mode", ["keep", "trim"])
def test_trimming_returns_the_free_pages_inside_the_heap(mode):
    out = subprocess.run(
        [sys.executable, "-c", SMALL_BLOCKS, mode], capture_output=True, text=True, check=True
    )
    before, after = map(int, out.stdout.split())
    assert before > 250  # MB: the freed blocks stayed in the process
    assert (before - after > 200) == (mode == "trim"), (before, after)


def test_no_glibc_is_a_quiet_no(monkeypatch):
    monkeypatch.setattr(heap.ctypes.util, "find_library", lambda name: None)
    monkeypatch.setattr(heap, "_trim", None)
    assert heap.return_freed_memory() is False
    assert heap.trim_heap() is False
