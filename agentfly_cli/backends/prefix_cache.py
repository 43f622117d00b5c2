"""A store of per-sequence KV caches, so that a chain's next turn prefills only its new tokens.

A multi-turn rollout asks for the same sequence again and again: turn k+1's prompt is turn k's
prompt, the ids sampled in turn k, and the observation's ids. Keeping the KV of each finished
request lets the next request that extends it skip the shared prefix. Entries hold their
tensors without padding, are evicted least recently used once the stored tokens pass a bound,
are consumed by the request that extends them (its own entry replaces them), and are dropped
whenever the weights change.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass
from typing import Any


@dataclass
class KVSnapshot:
    """The KV of one sequence: per layer ``(keys, values)`` shaped [1, heads, tokens, dim]."""

    tokens: tuple[int, ...]
    layers: list[tuple[Any, Any]]


class PrefixCache:
    """Finds the longest stored sequence that is a prefix of a prompt."""

    def __init__(self, max_tokens: int) -> None:
        self.max_tokens = max_tokens
        self._entries: OrderedDict[tuple[int, ...], KVSnapshot] = OrderedDict()
        self._stored = 0
        self.hits = 0
        self.hit_tokens = 0

    def __len__(self) -> int:
        return len(self._entries)

    @property
    def stored_tokens(self) -> int:
        return self._stored

    def put(self, snapshot: KVSnapshot) -> None:
        if self.max_tokens <= 0 or len(snapshot.tokens) > self.max_tokens:
            return
        old = self._entries.pop(snapshot.tokens, None)
        if old is not None:
            self._stored -= len(old.tokens)
        self._entries[snapshot.tokens] = snapshot
        self._stored += len(snapshot.tokens)
        while self._stored > self.max_tokens and self._entries:
            _, evicted = self._entries.popitem(last=False)
            self._stored -= len(evicted.tokens)

    def take(self, prompt: list[int]) -> KVSnapshot | None:
        """Remove and return the longest entry that is a proper prefix of ``prompt``."""
        best: tuple[int, ...] | None = None
        n = len(prompt)
        for tokens in self._entries:
            size = len(tokens)
            if size < n and (best is None or size > len(best)) and tuple(prompt[:size]) == tokens:
                best = tokens
        if best is None:
            return None
        snapshot = self._entries.pop(best)
        self._stored -= len(best)
        self.hits += 1
        self.hit_tokens += len(best)
        return snapshot

    def clear(self) -> None:
        self._entries.clear()
        self._stored = 0
