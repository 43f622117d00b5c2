"""Run a coroutine so that SIGTERM shuts it down like Ctrl-C: cleanly, envs closed.

``asyncio.run`` turns Ctrl-C into a cancellation of the main task, so ``async with`` blocks
(env pools, backends) close on the way out. SIGTERM (what ``kill``, schedulers and container
runtimes send) would end the process at once, leaving env processes and sandboxes behind;
here it cancels the main task the same way, and the process then exits with code 143.
"""

from __future__ import annotations

import asyncio
import signal
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


class Terminated(SystemExit):
    """Raised after a SIGTERM-triggered shutdown finished its cleanup."""

    def __init__(self) -> None:
        super().__init__(128 + signal.SIGTERM)


def run_with_clean_shutdown(main: Coroutine[Any, Any, T]) -> T:
    """``asyncio.run(main)``, with SIGTERM cancelling ``main`` instead of killing us."""
    if threading.current_thread() is not threading.main_thread():
        return asyncio.run(main)
    terminated = False

    async def guarded() -> T:
        nonlocal terminated
        task = asyncio.current_task()
        assert task is not None
        loop = asyncio.get_running_loop()

        def on_sigterm() -> None:
            nonlocal terminated
            terminated = True
            task.cancel()

        loop.add_signal_handler(signal.SIGTERM, on_sigterm)
        try:
            return await main
        finally:
            loop.remove_signal_handler(signal.SIGTERM)

    try:
        return asyncio.run(guarded())
    except asyncio.CancelledError:
        if terminated:
            raise Terminated() from None
        raise
