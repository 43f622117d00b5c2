"""Seconds a caller gives (an acquire's wait): a finite number, zero or more, or None."""

from __future__ import annotations

import math
from typing import Any


def checked_seconds(value: Any, what: str = "timeout") -> float | None:
    """``value`` as seconds; ValueError for NaN, infinity, a negative or a non-number."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"'{what}' must be a number of seconds; got {value!r}")
    if not math.isfinite(value) or value < 0:
        raise ValueError(f"'{what}' must be a finite number of seconds, 0 or more; got {value!r}")
    return float(value)
