"""Give freed tensor memory back to the operating system (glibc only).

glibc's malloc serves a large block from ``mmap`` and unmaps it on ``free``, but after each such
free it raises its mmap threshold to that block's size (up to 32 MB), so that later blocks of that
size come from the heap, whose freed space it keeps. A training step frees and reallocates
activations, gradients and KV of every size, and the heap grows far above what is live: the
demo's first 3 steps peaked at 4.99 GiB of RSS, and at 3.81 GiB with the threshold fixed (same
rewards). A fixed threshold keeps every block of 128 KiB and more in its own mapping, returned
on free, as ``MALLOC_MMAP_THRESHOLD_=131072`` does.

Each thread also gets a heap of its own (an arena, up to 8 per core), and each keeps what it
freed: one arena for the process (``MALLOC_ARENA_MAX=1``) took the first 3 steps from 3.18 to
3.00 GiB, with the same step times. It applies to threads that start afterwards, so the CLI
sets it before torch starts its threads.

Small blocks (under the threshold) still come from the heap, and the free space between live ones
stays in the process until ``malloc_trim`` hands its whole pages back: a rollout and a backward
each left 0.15-0.2 GiB so. The update trims the heap before it starts and after every
micro-batch's backward (10-20 ms each, against seconds of backward): the demo's first 3 steps
peaked at 2.70 GiB instead of 2.77 (with :mod:`agentfly_cli.train.direct_grads`).

The fixed thresholds hold only with ``AGENTFLY_MALLOC_TUNING=0``. By default the hf and torch
backends raise them instead (:mod:`agentfly_cli.allocator`: freed KV blocks reused, 1.3-1.5x
faster steps on a CPU), since in a training process the rollout's decoding and the update share
one heap; that costs resident memory: the demo's first 3 steps peak at 3.0 GiB instead of 2.6
(bisected to the commit that added the tuning). One arena holds either way.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging

from agentfly_cli import settings

log = logging.getLogger(__name__)

#: mallopt parameters (glibc's malloc.h)
M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3
M_ARENA_MAX = -8
#: Blocks this large or larger get their own mapping, unmapped when freed.
MMAP_THRESHOLD = 128 * 1024


def _libc():
    name = ctypes.util.find_library("c")
    if not name:
        return None
    try:
        return ctypes.CDLL(name)
    except OSError:
        return None


def trim_heap() -> bool:
    """Give the heap's free pages back to the OS (``malloc_trim(0)``); False where it is not
    glibc."""
    global _trim
    if _trim is None:
        libc = _libc()
        _trim = getattr(libc, "malloc_trim", False) if libc is not None else False
        if _trim:
            _trim.argtypes = [ctypes.c_size_t]
    if not _trim:
        return False
    _trim(0)
    return True


_trim = None


def return_freed_memory() -> bool:
    """Use one arena for this process and, with the decode tuning off
    (``AGENTFLY_MALLOC_TUNING=0``), fix glibc's mmap and trim thresholds; False where it is not
    glibc or mallopt refused."""
    libc = _libc()
    mallopt = getattr(libc, "mallopt", None)
    if mallopt is None:
        return False  # musl, macOS: no mallopt
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    ok = mallopt(M_ARENA_MAX, 1) == 1
    if settings.malloc_tuning_enabled():
        return ok  # the backends set the thresholds for decoding (agentfly_cli/allocator.py)
    ok = mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD) == 1 and ok
    ok = mallopt(M_TRIM_THRESHOLD, MMAP_THRESHOLD) == 1 and ok
    log.debug("glibc malloc: fixed mmap threshold %s", "set" if ok else "refused")
    return ok
