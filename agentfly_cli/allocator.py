"""Keep freed tensor memory in the process (glibc's malloc), so CPU forward passes stop faulting.

A transformers KV cache grows by ``torch.cat``: every decode step allocates the whole cache anew
and frees the old one. glibc serves each of those multi-megabyte blocks with a fresh ``mmap`` and
gives it back with ``munmap``, so every step pays a page fault per 4 KiB touched. On a 2-core
machine that kernel time was half of a SmolLM2 decode step (0.49 s against 0.25 s at batch 16,
700 tokens of context). Raising the mmap threshold to its maximum (32 MiB) and the trim threshold
to 2 GiB makes glibc reuse the freed blocks instead. ``AGENTFLY_MALLOC_TUNING=0`` turns it off.

The policy is the process's: in a training run it also holds during the update, in place of the
fixed thresholds of :mod:`agentfly_cli.train.heap` (which apply only with the tuning off). The
demo's first 3 steps (``agentfly train --set trainer.steps=3``, with its held-out evals): 2:17
min and 3.0 GiB peak RSS with the tuning, 3:26 min and 2.6 GiB without (2026-11-29).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
import sys

from agentfly_cli import settings

log = logging.getLogger(__name__)

M_TRIM_THRESHOLD = -1  # glibc's mallopt parameters (malloc.h)
M_MMAP_THRESHOLD = -3
MMAP_THRESHOLD_MAX = 32 * 1024 * 1024  # glibc refuses more on 64-bit (HEAP_MAX_SIZE / 2)
TRIM_THRESHOLD = 2**31 - 1  # mallopt takes an int

_applied: bool | None = None


def keep_freed_memory() -> bool:
    """Tune glibc's malloc once per process; True when the tuning is in effect.

    Does nothing (False) off Linux, on a libc other than glibc (musl has no ``mallopt``), or
    when ``AGENTFLY_MALLOC_TUNING`` is 0.
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
