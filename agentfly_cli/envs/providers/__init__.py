"""Where envs live: ``local`` (this process), ``process`` (a child process each), ``ray``."""

from __future__ import annotations

from typing import Any

from agentfly_cli.envs.providers.base import EnvHandle, EnvProvider, EnvProxy

PROVIDERS = ("local", "process", "ray")


def make_provider(name: str, **settings: Any) -> EnvProvider:
    """A provider by name; ``settings`` go to its constructor (e.g. ``address`` for ray)."""
    if name == "local":
        from agentfly_cli.envs.providers.local import LocalProvider

        return LocalProvider()
    if name == "process":
        from agentfly_cli.envs.providers.process import ProcessProvider

        return ProcessProvider()
    if name == "ray":
        from agentfly_cli.envs.providers.ray_provider import RayProvider

        return RayProvider(**settings)
    raise ValueError(f"unknown env provider '{name}'; use one of: {', '.join(PROVIDERS)}")


__all__ = ["PROVIDERS", "EnvHandle", "EnvProvider", "EnvProxy", "make_provider"]
