"""Delta weight sync: a full push sends only the tensors whose checksum changed since the last
push that went through (the first sends everything), and counts bytes, tensors and seconds.

The checksum of a tensor is its shape, dtype and the wrapping int32 sums of its raw bytes
(read as 32-bit words) over 64 contiguous chunks: one pass over memory on the tensor's own
device (about 10 GB/s on a 2-core CPU), and any change of one element changes its chunk's
sum. It is a checksum, not a cryptographic hash: two changes can cancel out only by design.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator
from typing import Any

CHUNKS = 64


def checksum(tensor: Any) -> tuple[tuple[int, ...], Any, Any]:
    """``(shape, dtype, chunk sums)`` of ``tensor``'s bytes; see the module docstring."""
    import torch

    data = tensor.detach()
    raw = data.contiguous().reshape(-1).view(torch.uint8)
    if raw.numel() % 4 == 0:
        words = raw.view(torch.int32)
    elif raw.numel() % 2 == 0:
        words = raw.view(torch.int16)
    else:
        words = raw
    chunks = CHUNKS if words.numel() >= CHUNKS else 1
    head = words.numel() - words.numel() % chunks
    sums = words[:head].reshape(chunks, -1).sum(1, dtype=torch.int32)
    tail = words[head:].sum(dtype=torch.int32).reshape(1)
    return tuple(data.shape), data.dtype, torch.cat([sums, tail])


def same_checksum(old: tuple | None, new: tuple) -> bool:
    """Whether two checksums match (None: never pushed)."""
    import torch

    return old is not None and old[:2] == new[:2] and torch.equal(old[2], new[2])


class PushMeter:
    """Filters one push's ``(name, tensor)`` pairs down to the changed ones (``delta``) and
    counts what went and what stayed. The checksums count as sent only once the push went
    through (:meth:`commit`); a push that failed leaves them as they were (:meth:`discard`)."""

    def __init__(self, delta: bool) -> None:
        self.delta = delta
        self.sent: dict[str, tuple] = {}
        self._pending: dict[str, tuple] = {}
        self._counts = dict.fromkeys(("bytes_pushed", "bytes_skipped", "tensors", "skipped"), 0)
        self.last: dict[str, float] = {}
        self.rate = 0.0  # bytes per second of the last push that moved any
        self._started = time.perf_counter()

    def filter(self, pairs: Iterable[tuple[str, Any]] | Any) -> Iterator[tuple[str, Any]]:
        """The pairs (or a state dict's items) to push, lazily: a tensor is read when its
        pair is asked for. Starts this push's count and clock."""
        self._pending = {}
        self._counts = dict.fromkeys(self._counts, 0)
        self._started = time.perf_counter()
        return self._changed(pairs.items() if hasattr(pairs, "items") else pairs)

    def _changed(self, pairs: Iterable[tuple[str, Any]]) -> Iterator[tuple[str, Any]]:
        for name, tensor in pairs:
            size = tensor.numel() * tensor.element_size()
            if self.delta:
                mark = checksum(tensor)
                self._pending[name] = mark
                if same_checksum(self.sent.get(name), mark):
                    self._counts["bytes_skipped"] += size
                    self._counts["skipped"] += 1
                    continue
            self._counts["bytes_pushed"] += size
            self._counts["tensors"] += 1
            yield name, tensor

    def commit(self) -> None:
        """The push went through: its checksums are what the backend holds; its metrics."""
        self.sent.update(self._pending)
        self._pending = {}
        seconds = time.perf_counter() - self._started
        counts = self._counts
        pushed = counts["bytes_pushed"]
        if pushed and seconds > 0:
            self.rate = pushed / seconds
        self.last = {
            "sync/bytes_pushed": float(pushed),
            "sync/bytes_skipped": float(counts["bytes_skipped"]),
            "sync/tensors_pushed": float(counts["tensors"]),
            "sync/tensors_skipped": float(counts["skipped"]),
            "sync/seconds": seconds,
            # what the skipped bytes would have cost at the bandwidth of this push (or of the
            # last one that moved any)
            "sync/seconds_saved_est": counts["bytes_skipped"] / self.rate if self.rate else 0.0,
        }

    def discard(self) -> None:
        """The push failed: the backend still holds what was last committed."""
        self._pending = {}
        self.last = {}
