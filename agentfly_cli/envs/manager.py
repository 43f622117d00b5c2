"""The resource manager: the env pools of one run, one per env name, behind one lease call.

A trajectory leases one env per name it uses (two names give two envs, never a mix-up). The
manager builds each pool from the run's ``envs:`` settings: in this process, in child
processes, on Ray, or on a pool server started by ``agentfly env up``.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
from collections.abc import AsyncIterator, Mapping
from typing import Any

import pydantic

from agentfly_cli.envs.base import EnvSpec
from agentfly_cli.envs.pool import EnvPool
from agentfly_cli.envs.providers import EnvHandle, EnvProvider, make_provider
from agentfly_cli.errors import UserError
from agentfly_cli.settings.envs import EnvPoolSettings

POOL_METRICS = (
    "in_use",
    "idle",
    "waiting",
    "started",
    "failed",
    "restarts",
    "killed",
    "timeouts",
    "expired",
)


class ResourceManager:
    """Env pools by name. Use ``async with manager:`` (or :meth:`running`) around the rollouts."""

    def __init__(
        self,
        specs: Mapping[str, EnvSpec],
        configs: Mapping[str, EnvPoolSettings] | None = None,
    ) -> None:
        configs = dict(configs or {})
        self.specs = dict(specs)
        self.configs = {name: configs.get(name) or EnvPoolSettings() for name in self.specs}
        self._pools: dict[str, Any] = {}
        self._providers: dict[tuple[str, str | None], EnvProvider] = {}
        self._lock = asyncio.Lock()
        self._started = False
        for name, spec in self.specs.items():  # bad sizes and options: found up front
            try:
                self.configs[name].pool_limits(spec)
            except ValueError as exc:
                raise UserError(f"envs.{name}: {exc}; lower warm_size or raise pool_max") from None
            check_options(spec, self.configs[name].options)
            check_can_start_here(spec, self.configs[name])

    def pool_max(self, name: str) -> int | None:
        """The most envs of ``name`` this run may hold at once (its pool's cap); None for a
        pool server's envs, whose cap is the server's."""
        if self.configs[name].address:
            return None
        return self.configs[name].pool_limits(self.specs[name]).pool_max

    @property
    def started(self) -> bool:
        return self._started

    async def start(self) -> None:
        """Build every pool and start their warm envs, all in parallel."""
        async with self._lock:
            if self._started:
                return
            for name, spec in self.specs.items():
                self._pools[name] = self._make_pool(spec, self.configs[name])
            self._started = True
            results = await asyncio.gather(
                *(pool.start() for pool in self._pools.values()), return_exceptions=True
            )
        errors = [r for r in results if isinstance(r, BaseException)]
        if errors:
            await self.close()
            raise errors[0]

    async def close(self) -> None:
        """Close every pool (every env in it) and the providers."""
        pools, self._pools = list(self._pools.values()), {}
        await asyncio.gather(*(pool.close() for pool in pools), return_exceptions=True)
        providers, self._providers = list(self._providers.values()), {}
        await asyncio.gather(*(p.shutdown() for p in providers), return_exceptions=True)
        self._started = False

    async def __aenter__(self) -> ResourceManager:
        await self.start()
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await asyncio.shield(self.close())

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[ResourceManager]:
        """Started for the block, unless it already runs (then its owner closes it)."""
        if self._started or not self.specs:
            yield self
            return
        async with self:
            yield self

    @contextlib.asynccontextmanager
    async def lease(
        self, name: str, task: Mapping[str, Any] | None = None
    ) -> AsyncIterator[EnvHandle]:
        """An env of ``name`` for one trajectory, reset for ``task``."""
        if name not in self.specs:
            known = ", ".join(sorted(self.specs)) or "none"
            raise KeyError(f"no env named '{name}' in this run; envs: {known}")
        if not self._started:
            await self.start()
        async with self._pools[name].lease(task) as handle:
            yield handle

    def stats(self) -> dict[str, dict[str, Any]]:
        """Each pool's counters and gauges."""
        return {name: pool.stats().as_dict() for name, pool in self._pools.items()}

    def metrics(self) -> dict[str, float]:
        """Pool gauges and counters as flat telemetry keys: ``env/<name>/<metric>``."""
        flat: dict[str, float] = {}
        for name, stats in self.stats().items():
            for key in POOL_METRICS:
                if key in stats:
                    flat[f"env/{name}/{key}"] = float(stats[key])
        return flat

    def _make_pool(self, spec: EnvSpec, config: EnvPoolSettings) -> Any:
        if config.address:
            from agentfly_cli.envs.remote import RemotePool

            return RemotePool(spec.name, config)
        key = (config.provider, config.ray_address)
        provider = self._providers.get(key)
        if provider is None:
            settings = {"address": config.ray_address} if config.provider == "ray" else {}
            provider = self._providers[key] = make_provider(config.provider, **settings)
        return EnvPool(spec, provider, config.pool_limits(spec), config.options)


def check_options(spec: EnvSpec, options: Mapping[str, Any]) -> None:
    """``envs.<name>.options`` must fit the factory's keyword arguments."""
    if not options:
        return
    _check_values(spec, options)
    try:
        signature = inspect.signature(spec.factory)
    except (TypeError, ValueError):
        return  # a builtin or C factory: its own error will tell
    try:
        signature.bind(**options)
    except TypeError as exc:
        accepted = [
            p.name
            for p in signature.parameters.values()
            if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)
        ]
        raise UserError(
            f"envs.{spec.name}.options: {exc}; env '{spec.name}' takes: "
            f"{', '.join(accepted) or 'no options'}"
        ) from None


def check_can_start_here(spec: EnvSpec, config: EnvPoolSettings) -> None:
    """The spec's ``preflight`` for envs that start on this machine (not a pool server's, not
    Ray's): a run without what they need stops before it loads a model."""
    if spec.preflight is None or config.address or config.provider == "ray":
        return
    try:
        spec.preflight(dict(config.options))
    except UserError as exc:
        raise UserError(f"env '{spec.name}' cannot start: {exc}") from None


def _check_values(spec: EnvSpec, options: Mapping[str, Any]) -> None:
    """The spec's own check of its option values (``EnvSpec.validate_options``), if it has one."""
    if spec.validate_options is None:
        return
    try:
        spec.validate_options(dict(options))
    except pydantic.ValidationError as exc:
        error = exc.errors()[0]
        where = ".".join(str(part) for part in error["loc"])
        problem = f"{where}: {error['msg']} (got {error.get('input')!r})" if where else error["msg"]
        raise UserError(f"envs.{spec.name}.options: {problem}") from None
    except (ValueError, TypeError) as exc:
        raise UserError(f"envs.{spec.name}.options: {exc}") from None
