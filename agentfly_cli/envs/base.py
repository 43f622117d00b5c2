"""The environment contract: an async :class:`Env` and the :class:`EnvSpec` that describes it.

A stateful tool declares ``@tool(env="NAME")`` and receives the trajectory's env of that spec as
its ``env`` argument. Pools (warm starts, caps, health checks, providers) build on this
contract; :func:`standalone_env` gives one env for a single call, as ``agentfly tools call``
does.
"""

from __future__ import annotations

import asyncio
import copy
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import asynccontextmanager
from typing import Any, Protocol, runtime_checkable

import pydantic

from agentfly_cli.settings.envs import PoolLimits


@runtime_checkable
class Env(Protocol):
    """An environment: started once, reset per task, stepped by tools, closed at the end."""

    async def start(self) -> None:
        """Acquire resources (processes, games, connections)."""

    async def reset(self, task: Mapping[str, Any] | None = None) -> Any:
        """Prepare for a new task (a dataset row); return an optional first observation."""

    async def step(self, action: Any) -> Any:
        """Apply one action and return its result."""

    async def close(self) -> None:
        """Release every resource. Must be safe to call twice."""

    async def healthy(self) -> bool:
        """False when the env must be replaced rather than reused."""


class BaseEnv:
    """Convenience base class: no-op lifecycle methods; override what your env needs."""

    async def start(self) -> None:
        return None

    async def reset(self, task: Mapping[str, Any] | None = None) -> Any:
        return None

    async def step(self, action: Any) -> Any:
        raise NotImplementedError(f"{type(self).__name__} does not take actions")

    async def close(self) -> None:
        return None

    async def healthy(self) -> bool:
        return True


def _pool_limit(name: str) -> Any:
    """A copy of :class:`PoolLimits`'s field ``name`` (its default, bounds and description)."""
    return copy.copy(PoolLimits.model_fields[name])


class EnvSpec(pydantic.BaseModel):
    """How to make an env and how to pool it."""

    model_config = pydantic.ConfigDict(frozen=True, extra="forbid", arbitrary_types_allowed=True)

    name: str = pydantic.Field(pattern=r"^[A-Za-z0-9_.\-]+$")
    factory: Callable[[], Any]
    description: str = ""
    # this kind's pool defaults, declared (bounds, default, meaning) once in PoolLimits
    pool_max: int = _pool_limit("pool_max")
    warm_size: int = _pool_limit("warm_size")
    start_timeout: float = _pool_limit("start_timeout")
    idle_ttl: float | None = _pool_limit("idle_ttl")
    resources: dict[str, float] = pydantic.Field(
        default_factory=dict, description="what one env needs, e.g. {'cpu': 1, 'memory_mb': 512}"
    )
    validate_options: Callable[[dict[str, Any]], Any] | None = pydantic.Field(
        None,
        description="checks envs.<name>.options before a run loads anything; raises ValueError "
        "(a pydantic ValidationError too) naming the bad option",
    )
    preflight: Callable[[dict[str, Any]], Any] | None = pydantic.Field(
        None,
        description="checks, before a run loads anything, that this machine can start the env "
        "with these options (e.g. a missing binary); only for envs that start here (not a pool "
        "server's or Ray's); raises UserError naming the fix",
    )

    @pydantic.model_validator(mode="after")
    def _warm_within_max(self) -> EnvSpec:
        if self.warm_size > self.pool_max:
            raise ValueError(f"warm_size ({self.warm_size}) exceeds pool_max ({self.pool_max})")
        return self

    def create(self, **options: Any) -> Env:
        """Make a new, not yet started env; ``options`` are keyword arguments of the factory."""
        env = self.factory(**options)
        if not isinstance(env, Env):
            raise TypeError(
                f"env '{self.name}': factory returned {type(env).__name__}, which lacks the Env "
                "methods start/reset/step/close/healthy"
            )
        return env


@asynccontextmanager
async def standalone_env(
    spec: EnvSpec, task: Mapping[str, Any] | None = None
) -> AsyncIterator[Env]:
    """One started and reset env, closed on exit even when cancelled."""
    env = spec.create()
    try:
        await asyncio.wait_for(env.start(), spec.start_timeout)
        await env.reset(task or {})
        yield env
    finally:
        await asyncio.shield(env.close())
