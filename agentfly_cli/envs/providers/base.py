"""What a provider is: the place an env lives (this process, a child process, a Ray actor).

A provider turns an :class:`~agentfly_cli.envs.base.EnvSpec` into an :class:`EnvHandle`. The
pool only ever talks to handles: it starts, resets, checks, closes and, when all else fails,
kills them. Tools get ``handle.env``: the env object itself for the in-process provider, a
proxy with the same async methods for the others.
"""

from __future__ import annotations

import abc
from collections.abc import Mapping
from typing import Any

from agentfly_cli.envs.base import EnvSpec


class EnvHandle(abc.ABC):
    """One env as the pool sees it. Every method is async; ``kill`` must never raise."""

    #: what tools receive as their ``env`` argument
    env: Any
    #: where it lives, for ``agentfly env servers`` and errors (pid, node, actor id, ...)
    info: dict[str, Any]
    #: what the env's ``reset(task)`` returned for the current lease (None: nothing, or no task)
    opening: Any = None

    @abc.abstractmethod
    async def start(self) -> None: ...

    @abc.abstractmethod
    async def reset(self, task: Mapping[str, Any] | None = None) -> Any: ...

    @abc.abstractmethod
    async def step(self, action: Any) -> Any: ...

    @abc.abstractmethod
    async def healthy(self) -> bool: ...

    @abc.abstractmethod
    async def close(self) -> None:
        """Release the env gracefully (the pool bounds the time this may take)."""

    @abc.abstractmethod
    async def kill(self) -> None:
        """Free the env now, whatever state it is in (a hung step, a dead process)."""


class EnvProvider(abc.ABC):
    """Makes env handles of any spec. One provider instance serves every pool that uses it."""

    name: str = ""

    @abc.abstractmethod
    async def create(self, spec: EnvSpec, options: Mapping[str, Any]) -> EnvHandle:
        """A new, not yet started handle; ``options`` are keyword arguments of the factory."""

    async def shutdown(self) -> None:
        """Release what the provider itself holds (a Ray connection, ...); envs are closed first."""
        return None

    def describe(self) -> dict[str, Any]:
        """A JSON-able summary for ``agentfly env servers``."""
        return {"provider": self.name}


class EnvProxy:
    """What tools receive for an env in another process: ``reset``, ``step`` and ``healthy``.

    ``start`` and ``close`` do nothing: the pool owns the env's lifecycle.
    """

    def __init__(self, handle: EnvHandle) -> None:
        self._handle = handle

    async def start(self) -> None:
        return None

    async def reset(self, task: Mapping[str, Any] | None = None) -> Any:
        return await self._handle.reset(task)

    async def step(self, action: Any) -> Any:
        return await self._handle.step(action)

    async def healthy(self) -> bool:
        return await self._handle.healthy()

    async def close(self) -> None:
        return None

    def __repr__(self) -> str:
        return f"EnvProxy({self._handle.info})"
