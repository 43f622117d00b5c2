"""The trainer makes glibc give freed tensor-sized blocks back to the OS (train/heap.py)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from agentfly_cli.train import heap

# Frees 252 MB of 4 MB blocks below a live one, after an 8 MB free raised glibc's dynamic mmap
# threshold: from the heap, that space stays in the process (the live top block pins it).
FRAGMENTED_HEAP = """
import ctypes, sys
from agentfly_cli.train.heap import return_freed_memory
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


def rss_after_frees(mode: str) -> int:
    out = subprocess.run(
        [sys.executable, "-c", FRAGMENTED_HEAP, mode], capture_output=True, text=True, check=True
    )
    return int(out.stdout.strip())


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt: Linux only")
def test_freed_blocks_go_back_to_the_os():
    default, fixed = rss_after_frees("default"), rss_after_frees("fixed")
    assert default - fixed > 200, (default, fixed)  # MB


def test_no_glibc_is_a_quiet_no(monkeypatch):
    monkeypatch.setattr(heap.ctypes.util, "find_library", lambda name: None)
    assert heap.return_freed_memory() is False
