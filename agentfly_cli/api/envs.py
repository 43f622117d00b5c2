"""Env pool servers (``agentfly env up / servers / down``): start, list and stop them.

Light to import: the pool server's modules load when a function below runs.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from agentfly_cli.plugin_host.lazy_exports import lazy_exports

if TYPE_CHECKING:
    from agentfly_cli.envs.state import ServerRecord
    from agentfly_cli.pool_server.control import ServerStartError
    from agentfly_cli.settings.envs import EnvPoolSettings

__all__ = [
    "ServerStartError",
    "check_can_serve",
    "check_provider",
    "check_server_name",
    "list_servers",
    "parse_options",
    "pool_config",
    "serve_pool",
    "server_names",
    "start_server",
    "stop_server",
]

# ServerStartError: the server process did not come up; its message holds the end of its log.
__getattr__ = lazy_exports(globals(), {"ServerStartError": "agentfly_cli.pool_server.control"})


def check_server_name(name: str) -> str:
    """``name`` when it is a plain server name (no path, no ``..``); a UserError otherwise."""
    from agentfly_cli.envs.state import check_server_name as check

    return check(name)


def check_provider(provider: str, flag: str = "--provider") -> None:
    """``provider`` is one that envs can live in (local, process, ray); a UserError if not."""
    from agentfly_cli.envs.providers import PROVIDERS
    from agentfly_cli.errors import UserError

    if provider not in PROVIDERS:
        raise UserError(f"{flag} {provider!r} is unknown; use one of: {', '.join(PROVIDERS)}")


def parse_options(items: list[str]) -> dict[str, Any]:
    """``KEY=VALUE`` items as a dict; values are parsed as JSON where they can be."""
    from agentfly_cli.pool_server.control import parse_options as parse

    return parse(items)


def pool_config(**values: Any) -> EnvPoolSettings:
    """A pool config (``EnvPoolSettings``) from ``values``; a bad one is a one-line UserError."""
    from agentfly_cli.pool_server.control import pool_config as config

    return config(**values)


def start_server(
    name: str,
    config: EnvPoolSettings,
    *,
    host: str | None = None,
    port: int = 0,
    wait: float = 120.0,
) -> ServerRecord:
    """Start a pool server for env ``name`` in the background; wait up to ``wait`` seconds for
    its warm envs. ``host``: listen on TCP (with a token), else a unix socket."""
    from agentfly_cli.pool_server.control import start_server as start

    return start(name, config, host=host, port=port, wait=wait)


def check_can_serve(name: str) -> None:
    """Env ``name`` is registered and no live server serves it yet (else a UserError)."""
    from agentfly_cli.plugin_host.plugins import get_plugin_host
    from agentfly_cli.pool_server.control import check_not_running

    get_plugin_host().components.envs.get(name)
    check_not_running(name)


def serve_pool(
    name: str, config: EnvPoolSettings, *, host: str | None = None, port: int = 0
) -> None:
    """Serve env ``name``'s pool in this process until SIGTERM, SIGINT or a shutdown request."""
    import asyncio

    from agentfly_cli.pool_server.server import run_server

    asyncio.run(run_server(name, config, host=host, port=port))


def list_servers() -> list[dict[str, Any]]:
    """Every recorded server with its live pool state (dead ones reported once, then
    forgotten)."""
    from agentfly_cli.pool_server.control import list_servers as servers

    return servers()


def server_names() -> list[str]:
    """The names of the recorded pool servers."""
    from agentfly_cli.envs.state import read_records

    return [record.name for record in read_records()]


def stop_server(name: str, timeout: float = 30.0) -> dict[str, Any]:
    """Stop server ``name``: its envs are closed, then it exits (SIGKILL after ``timeout``)."""
    from agentfly_cli.pool_server.control import stop_server as stop

    return stop(name, timeout)
