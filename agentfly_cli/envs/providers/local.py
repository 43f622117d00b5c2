"""The in-process provider: the env is a plain object in this event loop."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from agentfly_cli.envs.base import Env, EnvSpec
from agentfly_cli.envs.providers.base import EnvHandle, EnvProvider


class LocalEnvHandle(EnvHandle):
    """An env of this process. Tools receive the env object itself."""

    def __init__(self, env: Env) -> None:
        self.env = env
        self.info = {"provider": "local"}
        self._closed = False

    async def start(self) -> None:
        await self.env.start()

    async def reset(self, task: Mapping[str, Any] | None = None) -> Any:
        return await self.env.reset(task)

    async def step(self, action: Any) -> Any:
        return await self.env.step(action)

    async def healthy(self) -> bool:
        return bool(await self.env.healthy())

    async def close(self) -> None:
        if not self._closed:
            self._closed = True
            await self.env.close()

    async def kill(self) -> None:
        """An in-process env cannot be killed harder than closed; errors are swallowed."""
        try:
            await self.close()
        except Exception:
            pass


class LocalProvider(EnvProvider):
    """Envs as objects in this process: the cheapest, with no isolation."""

    name = "local"

    async def create(self, spec: EnvSpec, options: Mapping[str, Any]) -> EnvHandle:
        return LocalEnvHandle(spec.create(**options))
