"""Settings read from ``AGENTFLY_*`` environment variables, validated when they are used.

A bad value is a :class:`UserError` naming the variable and what it accepts, never a crash at
import time.
"""

from __future__ import annotations

import math
import os

from agentfly_cli.errors import UserError

NO_LIMIT = ("none", "off", "inf")


def _positive_number(name: str, default: float | None, *, integer: bool = False):
    raw = os.environ.get(name)
    if raw is None or not raw.strip():
        return default
    text = raw.strip().lower()
    if text in NO_LIMIT and not integer:
        return None
    try:
        value = int(text) if integer else float(text)
    except ValueError:
        value = None
    if value is None or not math.isfinite(value) or value <= 0:
        kind = "a positive integer" if integer else "a positive number of seconds or 'none'"
        raise UserError(f"{name} must be {kind}, got {raw!r}")
    return value


def tool_timeout() -> float | None:
    """Default seconds per tool call (``AGENTFLY_TOOL_TIMEOUT``, default 30; 'none': no limit)."""
    return _positive_number("AGENTFLY_TOOL_TIMEOUT", 30.0)


def reward_timeout() -> float | None:
    """Default seconds per reward (``AGENTFLY_REWARD_TIMEOUT``, default 60; 'none': no limit)."""
    return _positive_number("AGENTFLY_REWARD_TIMEOUT", 60.0)


def max_observation_chars() -> int:
    """Default observation limit (``AGENTFLY_MAX_OBSERVATION_CHARS``, default 8192)."""
    return _positive_number("AGENTFLY_MAX_OBSERVATION_CHARS", 8192, integer=True)


def worker_threads() -> int:
    """Threads that run sync tools and rewards (``AGENTFLY_WORKER_THREADS``, default 64)."""
    return _positive_number("AGENTFLY_WORKER_THREADS", 64, integer=True)


def check_environment() -> None:
    """Validate every setting at once (the CLI does this at start-up)."""
    tool_timeout()
    reward_timeout()
    max_observation_chars()
    worker_threads()
