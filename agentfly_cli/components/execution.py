"""Run user callables (tools, rewards) without blocking the event loop, under a timeout.

Async callables run on the loop. Sync callables run in a shared worker thread pool, so that a
slow or blocking tool never stalls the other rollouts. The pool is sized for I/O-bound tools
(``AGENTFLY_WORKER_THREADS``, default 64), not for the number of cores.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import inspect
import threading
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from agentfly_cli import settings

_pool: ThreadPoolExecutor | None = None
_pool_lock = threading.Lock()


def worker_pool() -> ThreadPoolExecutor:
    """The shared thread pool that runs sync tools and rewards."""
    global _pool
    if _pool is None:
        with _pool_lock:
            if _pool is None:
                _pool = ThreadPoolExecutor(
                    max_workers=settings.worker_threads(), thread_name_prefix="agentfly-worker"
                )
    return _pool


def is_async_callable(func: Callable[..., Any]) -> bool:
    """True for ``async def`` functions, bound methods and partials of them."""
    while isinstance(func, functools.partial):
        func = func.func
    return inspect.iscoroutinefunction(func) or inspect.iscoroutinefunction(
        getattr(func, "__call__", None)  # noqa: B004 - callable objects with async __call__
    )


_HAS_TIMEOUT_CM = hasattr(asyncio, "timeout")


async def call_with_timeout(
    func: Callable[..., Any],
    kwargs: Mapping[str, Any],
    timeout: float | None,
    *,
    is_async: bool | None = None,
) -> Any:
    """Call ``func(**kwargs)``; sync functions run in :func:`worker_pool`.

    Raises :class:`asyncio.TimeoutError` after ``timeout`` seconds (``None`` waits forever). A
    timed-out sync function cannot be interrupted; its thread finishes in the background and its
    result is dropped.
    """
    if is_async is None:
        is_async = is_async_callable(func)
    if is_async and timeout is not None and _HAS_TIMEOUT_CM:
        # asyncio.timeout (3.11+) runs the coroutine in this task: no extra task per call
        async with asyncio.timeout(timeout):
            result = await func(**kwargs)
            if inspect.isawaitable(result):
                result = await result
        return result
    loop = asyncio.get_running_loop()
    deadline = None if timeout is None else loop.time() + timeout
    if is_async:
        awaitable = func(**kwargs)
    else:
        context = contextvars.copy_context()
        call = functools.partial(context.run, func, **kwargs)
        awaitable = loop.run_in_executor(worker_pool(), call)
    result = await asyncio.wait_for(awaitable, timeout)
    if inspect.isawaitable(result):  # a sync wrapper that returned a coroutine
        remaining = None if deadline is None else max(0.0, deadline - loop.time())
        result = await asyncio.wait_for(result, remaining)
    return result
