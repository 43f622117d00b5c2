"""Lease time limits: an env held past ``lease_timeout`` is taken back from its holder.

With a limit, the pool hands out a :class:`TimedLease` that wraps the provider's handle. When the
limit passes, the lease expires: a call in flight is interrupted, every later call raises
:class:`LeaseExpired`, and the pool kills the env and starts a replacement. Returning an expired
lease is a no-op. Without a limit, the pool hands out the provider's handle itself.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from agentfly_cli.envs.pool_errors import LeaseExpired
from agentfly_cli.envs.providers.base import EnvHandle, EnvProxy


class TimedLease(EnvHandle):
    """A leased env with a deadline; tools get :attr:`env`, which obeys the same deadline."""

    def __init__(self, inner: EnvHandle, expired_message: str) -> None:
        self.inner = inner
        self.info = inner.info
        self.env = GuardedEnv(self, inner.env)
        self.expired_message = expired_message
        self._expiry = asyncio.get_running_loop().create_future()
        self.timer: asyncio.TimerHandle | None = None

    @property
    def opening(self) -> Any:
        """What the env's ``reset(task)`` returned for this lease."""
        return self.inner.opening

    @property
    def expired(self) -> bool:
        return self._expiry.done()

    def expire(self) -> None:
        """End the lease now: interrupt a call in flight, refuse later ones."""
        if not self._expiry.done():
            self._expiry.set_result(None)

    def check(self) -> None:

        if self.expired:
            raise LeaseExpired(self.expired_message)

    async def _guarded(self, call: Callable[[], Awaitable[Any]]) -> Any:
        self.check()
        running = asyncio.ensure_future(call())
        try:
            await asyncio.wait({running, self._expiry}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            if not running.done():  # the lease expired, or the holder was cancelled
                running.cancel()
                running.add_done_callback(_retrieve)
        if not running.done() or running.cancelled():
            self.check()
        return running.result()

    async def start(self) -> None:
        await self.inner.start()

    async def reset(self, task: Mapping[str, Any] | None = None) -> Any:
        return await self._guarded(lambda: self.inner.reset(task))

    async def step(self, action: Any) -> Any:
        return await self._guarded(lambda: self.inner.step(action))

    async def healthy(self) -> bool:
        return bool(await self._guarded(self.inner.healthy))

    async def close(self) -> None:
        await self.inner.close()

    async def kill(self) -> None:
        await self.inner.kill()


class GuardedEnv(EnvProxy):
    """What tools receive under a lease limit: ``reset``/``step``/``healthy`` through the lease.

    Other attributes of an in-process env are passed through while the lease holds.
    """

    def __init__(self, lease: TimedLease, env: Any) -> None:
        super().__init__(lease)
        self._lease = lease
        self._env = env

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") or name in ("_lease", "_env"):
            raise AttributeError(name)
        self._lease.check()
        return getattr(self._env, name)


class LeaseClock:
    """Puts a deadline on every lease of one pool (or none, when ``limit`` is None)."""

    def __init__(
        self, pool_name: str, limit: float | None, reclaim: Callable[[EnvHandle], None]
    ) -> None:
        self.pool_name = pool_name
        self.limit = limit
        self._reclaim = reclaim
        self._leases: set[TimedLease] = set()

    def grant(self, handle: EnvHandle) -> EnvHandle:
        """What the holder gets for ``handle``: the handle itself, or a lease that expires."""
        if self.limit is None:
            return handle
        lease = TimedLease(
            handle,
            f"the '{self.pool_name}' env lease expired: it was held over {self.limit:g} s "
            f"(envs.{self.pool_name}.lease_timeout); the env was taken back and replaced. "
            "Finish with an env sooner, or raise lease_timeout",
        )
        lease.timer = asyncio.get_running_loop().call_later(self.limit, self._expire, lease)
        self._leases.add(lease)
        return lease

    def take_back(self, handle: EnvHandle) -> tuple[EnvHandle, bool]:
        """The provider's handle behind what the holder returns, and whether it had expired."""
        if not isinstance(handle, TimedLease):
            return handle, False
        self._end(handle)
        return handle.inner, handle.expired

    def stop(self) -> None:
        """The pool closes: no lease expires any more (the pool closes their envs itself)."""
        for lease in list(self._leases):
            self._end(lease)

    def _expire(self, lease: TimedLease) -> None:
        self._leases.discard(lease)
        lease.expire()
        self._reclaim(lease.inner)

    def _end(self, lease: TimedLease) -> None:
        self._leases.discard(lease)
        if lease.timer is not None:
            lease.timer.cancel()


def _retrieve(task: asyncio.Future) -> None:
    """Read an interrupted call's outcome, so that asyncio does not log it as never retrieved."""
    if not task.cancelled():
        task.exception()
