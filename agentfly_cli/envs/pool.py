"""A pool of envs of one spec: capped, warmed ahead of time, health-checked, reaped, leak-free.

Every env the pool creates is in exactly one place at a time: starting, idle, handed to a
waiter, being reset for its task, in use, being returned (reset + health check), or closing. The
cap counts all of them (and the slots promised to woken waiters), so a pool never holds more than
``pool_max`` envs, even while a dead one is still being torn down; a warm replacement waits for
its slot. Waiters queue in FIFO order with a deadline; a released env is handed straight to the
first waiter, and a freed slot is promised to it, so a later acquire cannot take it first.

Cancellation is safe everywhere: an acquire cancelled while its env starts kills that env, a
lease left by an exception or a cancellation kills its env rather than reusing it, and a
release cancelled mid-reset closes the env. With ``lease_timeout``, a lease held longer expires
(see :mod:`agentfly_cli.envs.lease_limit`): its env is killed and replaced, and its holder gets
:class:`LeaseExpired` on its next call.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Mapping
from typing import Any

from agentfly_cli.envs.base import EnvSpec
from agentfly_cli.envs.handoff import Handoff
from agentfly_cli.envs.lease_limit import LeaseClock
from agentfly_cli.envs.pool_errors import (  # noqa: F401 (the pool's errors, importable from here)
    AcquireTimeout,
    EnvConfigError,
    EnvPoolError,
    EnvStartError,
    LeaseExpired,
    PoolClosed,
    raise_as,
    reset_failure,
    start_failure,
)
from agentfly_cli.envs.pool_stats import PoolStats
from agentfly_cli.envs.pool_warmth import WarmKeeper
from agentfly_cli.envs.providers.base import EnvHandle, EnvProvider
from agentfly_cli.envs.timeouts import checked_seconds
from agentfly_cli.runtime.deadlines import within
from agentfly_cli.settings.envs import PoolLimits

log = logging.getLogger(__name__)


class EnvPool:
    """Envs of one spec from one provider, leased to trajectories."""

    def __init__(
        self,
        spec: EnvSpec,
        provider: EnvProvider,
        settings: PoolLimits | None = None,
        options: Mapping[str, Any] | None = None,
    ) -> None:
        self.spec = spec
        self.provider = provider
        self.settings = settings or PoolLimits.from_spec(spec)
        self.options = dict(options or {})
        self._stats = PoolStats()
        self._idle: collections.deque[tuple[EnvHandle, float]] = collections.deque()
        self._preparing: set[EnvHandle] = set()  # being reset for the acquirer's task
        self._in_use: set[EnvHandle] = set()
        self._returning: set[EnvHandle] = set()
        self._starting = 0
        self._closing: set[asyncio.Task] = set()
        self._handoff = Handoff(self._unclaimed)  # acquirers waiting for room, FIFO
        self._warmth = WarmKeeper(self)
        self._closed = False
        self._leases = LeaseClock(spec.name, self.settings.lease_timeout, self._reclaim)

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def closed(self) -> bool:
        return self._closed

    # -- lifecycle -------------------------------------------------------------------------
    async def start(self) -> int:
        """Start ``warm_size`` envs in parallel and the idle reaper; return how many started.

        Raises :class:`EnvStartError` when envs were asked for and none started.
        """
        self._check_open()
        return await self._warmth.fill()

    async def close(self) -> None:
        """Close every env (idle, in use, starting in the background); wake waiters.

        Safe to call again, also after a cancelled call: it waits for what is still closing.
        """
        if not self._closed:
            self._closed = True
            self._leases.stop()
            # everything the pool holds is handed to a closing task before the first await, so
            # that a cancelled close leaves nothing behind
            self._warmth.stop()
            untaken = self._handoff.fail_all(self._closed_error)
            while self._idle:
                handle, _ = self._idle.popleft()
                self._destroy(handle)
            for handle in untaken:  # its waiter has not taken it: never acquired
                self._destroy(handle)
            for handle in list(self._in_use):
                self._in_use.discard(handle)
                self._stats.abandoned += 1
                self._destroy(handle)
        await asyncio.gather(*self._warmth.tasks, return_exceptions=True)
        # starting, preparing and returning envs are closed by their owners (within their
        # timeouts); promised slots are given up by their waiters as soon as these run
        while (
            self._closing
            or self._returning
            or self._preparing
            or self._starting
            or self._handoff.granted
        ):
            pending = list(self._closing)
            if pending:
                await asyncio.gather(*pending, return_exceptions=True)
            else:
                await asyncio.sleep(0.01)

    async def __aenter__(self) -> EnvPool:
        await self.start()
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()

    # -- leasing ---------------------------------------------------------------------------
    @contextlib.asynccontextmanager
    async def lease(
        self, task: Mapping[str, Any] | None = None, timeout: float | None = None
    ) -> AsyncIterator[EnvHandle]:
        """An env for one trajectory: reset for ``task``; returned on exit, killed on errors."""
        handle = await self.acquire(task, timeout)
        try:
            yield handle
        except BaseException:
            await self.release(handle, broken=True)
            raise
        await self.release(handle)

    async def acquire(
        self, task: Mapping[str, Any] | None = None, timeout: float | None = None
    ) -> EnvHandle:
        """Take an idle env or start one, waiting at most ``timeout`` seconds for room.

        ``task`` (when given) is passed to the env's ``reset``.
        """
        self._check_open()
        timeout = self.settings.acquire_timeout if timeout is None else checked_seconds(timeout)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        if not self._handoff and self._idle:
            handle, _ = self._idle.pop()
        elif not self._handoff and self._occupied() < self.settings.pool_max:
            handle = await self._start_one()
        else:
            handle = await self._wait(deadline, timeout)
            if handle is None:  # a freed slot was promised to us: start an env in it
                handle = await self._start_one(granted=True)
        handle.opening = None  # the previous lease's opening is not this one's
        if task is not None:
            await self._reset_for(handle, task)
        if self._closed:  # it closed while the env was reset
            self._destroy(handle)
            raise self._closed_error()
        self._in_use.add(handle)
        self._stats.acquired += 1
        return self._leases.grant(handle)

    async def release(self, handle: EnvHandle, *, broken: bool = False) -> None:
        """Return a leased env: reset and health-checked, it goes back; otherwise replaced.

        ``broken=True`` (its trajectory crashed or was cancelled) kills it at once. An expired
        lease was taken back already: returning it does nothing.
        """
        handle, expired = self._leases.take_back(handle)
        if expired:
            return
        if handle not in self._in_use:
            if self._closed:
                return  # the pool already closed it
            raise ValueError(f"this env was not leased from the '{self.name}' pool")
        self._in_use.discard(handle)
        if broken:
            self._stats.killed += 1
            self._destroy(handle)
            self._warmth.replenish()
            return
        self._returning.add(handle)
        healthy, cancelled = False, False
        try:
            await within(handle.reset(None), self.settings.reset_timeout)
            healthy = bool(await within(handle.healthy(), self.settings.health_timeout))
        except asyncio.CancelledError:
            cancelled = True
        except Exception as exc:  # a failing reset or health check means: replace it
            log.debug("env '%s' failed its release check: %r", self.name, exc)
        finally:
            self._returning.discard(handle)
        if healthy and not cancelled and not self._closed:
            self._stats.released += 1
            self._put_back(handle)
        else:
            if not cancelled:
                self._stats.restarts += 1
            else:
                self._stats.killed += 1
            self._destroy(handle)
            self._warmth.replenish()
        if cancelled:
            raise asyncio.CancelledError

    # -- observing -------------------------------------------------------------------------
    def stats(self) -> PoolStats:
        """A snapshot of the counters, with the gauges filled in."""
        snapshot = PoolStats(**self._stats.as_dict())
        snapshot.in_use = len(self._in_use)
        snapshot.idle = len(self._idle)
        snapshot.waiting = self._handoff.waiting()
        snapshot.starting = self._starting
        return snapshot

    def live(self) -> int:
        """Envs that exist now in any state (starting, idle, in use, returning, closing), and
        slots promised to woken waiters: what the cap counts."""
        return self._occupied()

    def closing(self) -> int:
        """Envs being closed now: they keep their slots until they are gone."""
        return len(self._closing)

    # -- internals -------------------------------------------------------------------------
    def _check_open(self) -> None:
        if self._closed:
            raise self._closed_error()

    def _closed_error(self) -> PoolClosed:
        return PoolClosed(f"the '{self.name}' env pool was shut down")

    def _occupied(self) -> int:
        return (
            self._starting
            + self._handoff.held()
            + len(self._idle)
            + len(self._preparing)
            + len(self._in_use)
            + len(self._returning)
            + len(self._closing)
        )

    async def _wait(self, deadline: float, timeout: float) -> EnvHandle | None:
        """Queue until an env is handed over (returned) or a slot is promised to us (None)."""
        try:
            handle = await self._handoff.wait(deadline)
        except TimeoutError:
            self._stats.timeouts += 1
            raise AcquireTimeout(
                f"no '{self.name}' env was free within {timeout:g} s: all {self.settings.pool_max} "
                "are in use; raise envs.<name>.pool_max or acquire_timeout, or lower "
                "rollout.concurrency"
            ) from None
        if handle is not None and not self._handoff.take(handle):
            raise self._closed_error()  # the pool closed and took it back
        return handle

    def _unclaimed(self, handle: EnvHandle | None) -> None:
        """A waiter left without taking the env (or slot, None) it was given: pass it on."""
        if handle is None:
            self._slot_freed()
        else:
            self._put_back(handle)

    def _slot_freed(self) -> None:
        """One env fewer: its slot goes to the first waiter, or to a warm replacement."""
        if self._closed:
            return
        if not self._handoff.offer(None):
            self._warmth.slot_freed()

    def _put_back(self, handle: EnvHandle) -> None:
        """A clean env: to the first waiter, or idle."""
        if self._closed:
            self._destroy(handle)
        elif not self._handoff.offer(handle):
            self._idle.append((handle, time.monotonic()))

    async def _start_one(self, *, granted: bool = False) -> EnvHandle:
        """Start an env in a free slot (``granted``: the slot promised to this waiter).

        The caller checks for room in the same step: nothing awaits before the slot is taken.
        """
        if granted:
            self._handoff.take_slot()
        self._check_open()
        self._starting += 1
        self._stats.created += 1
        handle: EnvHandle | None = None
        try:
            handle = await self.provider.create(self.spec, self.options)
            await asyncio.wait_for(handle.start(), self.settings.start_timeout)
        except BaseException as exc:
            self._starting -= 1
            self._stats.failed += 1
            if handle is None:
                self._stats.closed += 1  # nothing was made, nothing to close
                self._slot_freed()
            else:
                self._destroy(handle)
            raise_as(start_failure(self.name, self.settings.start_timeout, exc), exc)
        self._starting -= 1
        self._stats.started += 1
        if self._closed:
            self._destroy(handle)
            raise self._closed_error()
        return handle

    async def _reset_for(self, handle: EnvHandle, task: Mapping[str, Any]) -> None:
        self._preparing.add(handle)
        try:
            opening = await asyncio.wait_for(handle.reset(task), self.settings.reset_timeout)
        except BaseException as exc:
            self._preparing.discard(handle)
            self._stats.failed += 1
            self._destroy(handle)
            self._warmth.replenish()
            raise_as(reset_failure(self.name, self.settings.reset_timeout, exc), exc)
        self._preparing.discard(handle)
        handle.opening = opening  # what the env said at reset: an opening env's first words

    def _reclaim(self, handle: EnvHandle) -> None:
        """A lease ran past ``lease_timeout``: kill its env and start a replacement."""
        if handle in self._in_use:
            self._in_use.discard(handle)
            self._stats.expired += 1
            self._destroy(handle)
            self._warmth.replenish()

    def _destroy(self, handle: EnvHandle) -> None:
        """Close ``handle`` in the background (killed if closing fails or takes too long)."""
        task = asyncio.get_running_loop().create_task(self._close_handle(handle))
        self._closing.add(task)
        task.add_done_callback(self._closed_one)

    async def _close_handle(self, handle: EnvHandle) -> None:
        try:
            await asyncio.wait_for(handle.close(), self.settings.close_timeout)
        except BaseException as exc:  # including our own cancellation at loop shutdown
            log.debug("env '%s' did not close cleanly (%r); killing it", self.name, exc)
            await handle.kill()

    def _closed_one(self, task: asyncio.Task) -> None:
        self._closing.discard(task)
        self._stats.closed += 1
        self._slot_freed()

    def reap(self, ttl: float) -> int:
        """Close envs idle longer than ``ttl`` seconds, keeping ``warm_size`` alive."""
        return self._warmth.reap(ttl)
