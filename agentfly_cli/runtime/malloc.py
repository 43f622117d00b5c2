"""glibc's malloc, tuned once per process for CPU tensors: the one module that calls ``mallopt``.

Two policies, one owner:

**Decoding (the default).** A transformers KV cache grows by ``torch.cat``: every decode step
allocates the whole cache anew and frees the old one. glibc serves each of those multi-megabyte
blocks with a fresh ``mmap`` and gives it back with ``munmap``, so every step pays a page fault
per 4 KiB touched. On a 2-core machine that kernel time was half of a SmolLM2 decode step (0.49 s
against 0.25 s at batch 16, 700 tokens of context). :func:`keep_freed_memory` raises the mmap
threshold to its maximum (32 MiB) and the trim threshold to 2 GiB, so that glibc reuses the freed
blocks instead. The hf and torch backends call it; in a training process it also holds during the
update, since the rollout's decoding and the update share one heap. The demo's first 3 steps
(``agentfly train --set trainer.steps=3``, with its held-out evals): 2:17 min and 3.0 GiB peak RSS
with the tuning, 3:26 min and 2.6 GiB without (2026-11-29).

**Returning memory (``AGENTFLY_MALLOC_TUNING=0``).** glibc serves a large block from ``mmap`` and
unmaps it on ``free``, but after each such free it raises its mmap threshold to that block's size
(up to 32 MB), so that later blocks of that size come from the heap, whose freed space it keeps. A
training step frees and reallocates activations, gradients and KV of every size, and the heap
grows far above what is live: the demo's first 3 steps peaked at 4.99 GiB of RSS, and at 3.81 GiB
with the threshold fixed (same rewards). With the tuning off, :func:`return_freed_memory` fixes
the threshold at 128 KiB, as ``MALLOC_MMAP_THRESHOLD_=131072`` does, so that every block that
large keeps its own mapping, returned on free.

Either way, each thread gets a heap of its own (an arena, up to 8 per core), and each keeps what it
freed: one arena for the process (``MALLOC_ARENA_MAX=1``) took the first 3 steps from 3.18 to
3.00 GiB, with the same step times. It applies to threads that start afterwards, so the CLI sets
it (:func:`return_freed_memory`) before torch starts its threads.

Small blocks (under the threshold) still come from the heap, and the free space between live ones
stays in the process until ``malloc_trim`` hands its whole pages back: a rollout and a backward
each left 0.15-0.2 GiB so. The update calls :func:`trim_heap` before it starts and after every
micro-batch's backward (10-20 ms each, against seconds of backward): the demo's first 3 steps
peaked at 2.70 GiB instead of 2.77 (with :mod:`agentfly_cli.train.tensors.direct_grads`).

Off Linux, or on a libc other than glibc (musl has no ``mallopt``), every function does nothing
and returns False.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
import sys

from agentfly_cli import settings

log = logging.getLogger(__name__)

#: mallopt parameters (glibc's malloc.h)
M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3
M_ARENA_MAX = -8
#: decoding: the largest mmap threshold glibc accepts on 64-bit (HEAP_MAX_SIZE / 2)
MMAP_THRESHOLD_MAX = 32 * 1024 * 1024
#: decoding: freed heap kept up to this much (mallopt takes an int)
TRIM_THRESHOLD = 2**31 - 1
#: returning memory: blocks this large or larger get their own mapping, unmapped when freed
MMAP_THRESHOLD = 128 * 1024

_applied: bool | None = None
_trim = None


def _libc():
    name = ctypes.util.find_library("c")
    if not name:
        return None
    try:
        return ctypes.CDLL(name)
    except OSError:
        return None


def keep_freed_memory() -> bool:
    """Tune glibc's malloc for decoding, once per process; True when the tuning is in effect.

    Does nothing (False) off Linux, on a libc other than glibc, or when
    ``AGENTFLY_MALLOC_TUNING`` is 0.
    """
    global _applied
    if _applied is not None:
        return _applied
    _applied = False
    if not sys.platform.startswith("linux") or not settings.malloc_tuning_enabled():
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    _applied = bool(mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD_MAX)) and bool(
        mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD)
    )
    log.debug("glibc malloc tuning %s", "applied" if _applied else "refused")
    return _applied


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
        return ok  # the backends set the thresholds for decoding (keep_freed_memory)
    ok = mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD) == 1 and ok
    ok = mallopt(M_TRIM_THRESHOLD, MMAP_THRESHOLD) == 1 and ok
    log.debug("glibc malloc: fixed mmap threshold %s", "set" if ok else "refused")
    return ok


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
