"""``within``: ``asyncio.wait_for`` that never loses the caller's cancellation.

``asyncio.wait_for`` on Python 3.10 and 3.11 swallows a cancellation that arrives while the
awaited call is finishing (CPython gh-86296, fixed in 3.12 where ``wait_for`` is built on
``asyncio.timeout``): the caller was cancelled, yet it goes on to its next step. In the env pool
that meant a trajectory cancelled during an env's release reset went on to wait out the whole
health check (up to ``health_timeout``), and the env was counted as restarted instead of killed.

On 3.11 ``within`` notices the lost request (``Task.cancelling()`` grew) and raises
``CancelledError`` itself; otherwise it is ``wait_for``, with its timing unchanged (a call that
finished by the time the caller resumes keeps its result).
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Awaitable
from typing import TypeVar

T = TypeVar("T")

_WAIT_FOR_LOSES_CANCELS = sys.version_info[:2] == (3, 11)  # 3.10 has no Task.cancelling()


async def within(awaitable: Awaitable[T], seconds: float | None) -> T:
    """``await awaitable``; ``asyncio.TimeoutError`` after ``seconds`` (``None``: no deadline).

    On a timeout the awaitable is cancelled, as with ``asyncio.wait_for``. A cancellation of the
    caller always propagates, except on Python 3.10 (no ``Task.cancelling``: ``wait_for``'s race
    remains there).
    """
    task = asyncio.current_task() if _WAIT_FOR_LOSES_CANCELS else None
    requested = task.cancelling() if task is not None else 0
    result = await asyncio.wait_for(awaitable, seconds)
    if task is not None and task.cancelling() > requested:
        raise asyncio.CancelledError  # wait_for swallowed it
    return result
