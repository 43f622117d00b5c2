"""The warm side of an :class:`~agentfly_cli.envs.pool.EnvPool`: ``warm_size`` envs kept alive.

The pool starts ``warm_size`` envs up front (:meth:`WarmKeeper.fill`), replaces envs it loses
(killed, failing their reset or health check, expired) in the background
(:meth:`WarmKeeper.replenish`), and closes envs idle longer than ``idle_ttl`` beyond the warm
ones (:meth:`WarmKeeper.reap`). A replacement never breaks the cap: when the pool is full it
waits for the next freed slot that no acquirer takes (:meth:`WarmKeeper.slot_freed`).
"""

from __future__ import annotations

import asyncio
import collections
import logging
import time
from typing import Protocol

from agentfly_cli.envs.pool_errors import EnvPoolError
from agentfly_cli.envs.pool_stats import PoolStats
from agentfly_cli.envs.providers.base import EnvHandle
from agentfly_cli.settings.envs import PoolLimits

log = logging.getLogger("agentfly_cli.envs.pool")


class WarmPool(Protocol):
    """What the keeper uses of its :class:`~agentfly_cli.envs.pool.EnvPool`."""

    settings: PoolLimits
    _idle: collections.deque[tuple[EnvHandle, float]]  # (env, idle since), oldest first
    _stats: PoolStats

    @property
    def name(self) -> str: ...

    @property
    def closed(self) -> bool: ...

    def live(self) -> int: ...

    def closing(self) -> int: ...

    async def _start_one(self) -> EnvHandle: ...

    def _put_back(self, handle: EnvHandle) -> None: ...

    def _destroy(self, handle: EnvHandle) -> None: ...


class WarmKeeper:
    """Keeps one pool's ``warm_size`` envs alive and reaps the idle ones beyond them."""

    def __init__(self, pool: WarmPool) -> None:
        self.pool = pool
        self.tasks: set[asyncio.Task] = set()  # replacements starting, and the reaper
        self._rewarm = False  # a replacement found the pool full: start it when room frees
        self._reaper: asyncio.Task | None = None

    async def fill(self) -> int:
        """Start the reaper and the missing warm envs in parallel; return how many started.

        Raises the first start error when envs were asked for and none started.
        """
        pool = self.pool
        ttl = pool.settings.idle_ttl
        if self._reaper is None and ttl is not None:
            self._reaper = asyncio.create_task(self._reap_forever(ttl), name=f"reap-{pool.name}")
            self.tasks.add(self._reaper)
        wanted = pool.settings.warm_size - pool.live()
        if wanted <= 0:
            return 0
        results = await asyncio.gather(
            *(self._start_warm() for _ in range(wanted)), return_exceptions=True
        )
        started = [r for r in results if r is not None and not isinstance(r, BaseException)]
        for handle in started:
            pool._put_back(handle)
        errors = [r for r in results if isinstance(r, BaseException)]
        if errors and not started:
            raise errors[0]
        if errors:
            log.warning(
                "env '%s': %d of %d warm envs failed: %s", pool.name, len(errors), wanted, errors[0]
            )
        return len(started)

    def stop(self) -> None:
        """Cancel the reaper and the replacements (the pool then awaits :attr:`tasks`)."""
        for task in list(self.tasks):
            task.cancel()

    def missing(self) -> int:
        """How many envs short of ``warm_size`` the pool is, not counting those closing."""
        pool = self.pool
        return pool.settings.warm_size - (pool.live() - pool.closing())

    def replenish(self) -> None:
        """Start envs in the background to keep ``warm_size`` of them alive."""
        if self.pool.closed:
            return
        for _ in range(max(0, self.missing())):
            task = asyncio.get_running_loop().create_task(self._warm_one())
            self.tasks.add(task)
            task.add_done_callback(self.tasks.discard)

    def slot_freed(self) -> None:
        """A slot no acquirer took: start the replacement that found the pool full, if any."""
        if self._rewarm:
            self._rewarm = False
            self.replenish()

    def reap(self, ttl: float) -> int:
        """Close envs idle longer than ``ttl`` seconds, keeping ``warm_size`` alive."""
        pool = self.pool
        now = time.monotonic()
        reaped = 0
        while pool._idle and pool.live() - pool.closing() > pool.settings.warm_size:
            handle, since = pool._idle[0]
            if now - since < ttl:
                break
            pool._idle.popleft()
            pool._stats.reaped += 1
            pool._destroy(handle)
            reaped += 1
        return reaped

    async def _start_warm(self) -> EnvHandle | None:
        """A warm env; None when acquires filled the pool before this task ran."""
        if self.pool.live() >= self.pool.settings.pool_max:
            return None
        return await self.pool._start_one()

    async def _warm_one(self) -> None:
        # checked when the task runs, in the step that takes the slot: others may have filled
        # the pool since it was made, and a dying env still holds its slot until it is closed
        pool = self.pool
        if pool.closed or self.missing() <= 0:
            return
        if pool.live() >= pool.settings.pool_max:
            self._rewarm = True  # the next freed slot that no waiter takes starts it
            return
        try:
            handle = await pool._start_one()
        except EnvPoolError as exc:
            if not pool.closed:
                log.warning("%s", exc)
            return
        pool._put_back(handle)

    async def _reap_forever(self, ttl: float) -> None:
        interval = min(max(ttl / 4, 0.05), 30.0)
        while True:
            await asyncio.sleep(interval)
            self.reap(ttl)
