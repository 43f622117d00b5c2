"""The gateway's bounds: what one request, and all the open sessions together, may cost.

Each bound has a documented default (docs/serve.md) and an ``agentfly serve`` flag. ``None``
switches a bound off (the agent engine's gateway, whose sessions the engine itself opens and
ends, runs without the session bounds).
"""

from __future__ import annotations

import collections
import re
from dataclasses import dataclass
from typing import Any

SESSION_ID = re.compile(r"[A-Za-z0-9._~-]{1,128}")  # what a session id may be


@dataclass(frozen=True)
class ServeLimits:
    """Bounds on requests and sessions (``None``: no bound)."""

    max_body_bytes: int | None = 32 * 1024 * 1024
    """bytes of one request body (413 beyond)"""
    max_stops: int = 16
    """stop strings per request"""
    max_stop_chars: int = 512
    """characters of one stop string"""
    stop_cache_size: int = 256
    """stop lists whose token ids are kept (least recently used dropped)"""
    max_sessions: int | None = 10_000
    """sessions open at once (a new one beyond is refused, 429)"""
    session_idle_s: float | None = 3600.0
    """seconds after its last request that an idle session is ended (and recorded)"""
    ended_kept: int = 100_000
    """ended session ids remembered, so that a later request to one is refused (409); the
    oldest beyond are forgotten and could be opened (and recorded) again"""

    def __post_init__(self) -> None:
        for name in ("max_body_bytes", "max_sessions", "session_idle_s"):
            value = getattr(self, name)
            if value is not None and not value > 0:
                raise ValueError(f"{name} must be above 0 (or None: no bound), not {value}")
        for name in ("max_stops", "max_stop_chars", "stop_cache_size", "ended_kept"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1, not {getattr(self, name)}")


UNBOUNDED_SESSIONS = {"max_sessions": None, "session_idle_s": None}


class LRU:
    """A small least-recently-used mapping of at most ``size`` items."""

    def __init__(self, size: int) -> None:
        self.size = size
        self._items: collections.OrderedDict[Any, Any] = collections.OrderedDict()

    def get(self, key: Any) -> Any:
        value = self._items.get(key)
        if value is not None:
            self._items.move_to_end(key)
        return value

    def put(self, key: Any, value: Any) -> None:
        self._items[key] = value
        self._items.move_to_end(key)
        while len(self._items) > self.size:
            self._items.popitem(last=False)

    def __len__(self) -> int:
        return len(self._items)
