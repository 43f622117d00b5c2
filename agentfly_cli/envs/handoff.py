"""The waiting line of an env pool: FIFO waiters, handed an env or promised a slot.

When a pool is full, acquirers queue here. A returned env is handed straight to the first
waiter (it never passes through the idle list, so a later acquire cannot take it first), and a
freed slot is promised to the first waiter, who then starts an env in it. Until the waiter has
taken what it was given, the env counts as ``handed`` and the slot as ``granted``: both hold a
place under the pool's cap. A waiter that leaves (timeout, cancellation) just as something was
given to it passes it back, through the pool's ``on_unclaimed``, to the next in line.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
from collections.abc import Callable

from agentfly_cli.envs.providers.base import EnvHandle


class Handoff:
    """FIFO waiters of one pool, and what has been given to them but not yet taken."""

    def __init__(self, on_unclaimed: Callable[[EnvHandle | None], None]) -> None:
        self._waiters: collections.deque[asyncio.Future] = collections.deque()
        self.handed: set[EnvHandle] = set()  # given to a waiter that has not taken it yet
        self.granted = 0  # free slots promised to woken waiters, not yet starting their env
        self._on_unclaimed = on_unclaimed

    def __bool__(self) -> bool:
        """True while anyone is queued (a new acquirer must queue behind them)."""
        return bool(self._waiters)

    def held(self) -> int:
        """Places under the cap that handed envs and promised slots take."""
        return len(self.handed) + self.granted

    def waiting(self) -> int:
        return sum(1 for waiter in self._waiters if not waiter.done())

    async def wait(self, deadline: float) -> EnvHandle | None:
        """Queue until an env is handed over (returned) or a slot is promised (None).

        Raises ``TimeoutError`` at ``deadline`` (loop time), and whatever :meth:`fail_all` sets.
        A promised slot is the caller's: it calls :meth:`take_slot` as it starts its env.
        """
        waiter = asyncio.get_running_loop().create_future()
        self._waiters.append(waiter)
        received = False
        try:
            async with asyncio.timeout_at(deadline):
                handle = await waiter
            received = True
        finally:
            with contextlib.suppress(ValueError):
                self._waiters.remove(waiter)
            if not received and waiter.done() and not waiter.cancelled():
                if waiter.exception() is None:  # handed over just as we timed out or left
                    self._unclaimed(waiter.result())
        return handle

    def take(self, handle: EnvHandle) -> bool:
        """The waiter takes its handed env; False when the pool took it back (it closed)."""
        if handle not in self.handed:
            return False
        self.handed.discard(handle)
        return True

    def take_slot(self) -> None:
        """The waiter starts its env in the slot promised to it."""
        self.granted -= 1

    def offer(self, handle: EnvHandle | None) -> bool:
        """Give ``handle`` (or, for None, a free slot) to the first waiter; False: nobody waits."""
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                if handle is None:
                    self.granted += 1
                else:
                    self.handed.add(handle)
                waiter.set_result(handle)
                return True
        return False

    def fail_all(self, error: Callable[[], BaseException]) -> list[EnvHandle]:
        """Fail every waiter with a new ``error()``; return the envs handed over, not taken."""
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_exception(error())
        untaken, self.handed = list(self.handed), set()
        return untaken

    def _unclaimed(self, handle: EnvHandle | None) -> None:
        """What was given to a waiter that left goes back to the pool (and the next waiter)."""
        if handle is None:
            self.granted -= 1
        elif handle in self.handed:
            self.handed.discard(handle)
        else:
            return  # the pool closed and took it back already
        self._on_unclaimed(handle)
