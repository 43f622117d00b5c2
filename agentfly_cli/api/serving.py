"""The gateway (``agentfly serve``): an OpenAI-compatible server that records each episode's
trajectories token-exactly. The model, the app and uvicorn load when a function below runs."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from agentfly_cli.serve.limits import ServeLimits

if TYPE_CHECKING:
    import socket

    from agentfly_cli.serve.gateway import Gateway
    from agentfly_cli.trajectory import TrajectoryWriter

__all__ = [
    "ServeLimits",
    "api_key_problem",
    "build_gateway",
    "gateway_app",
    "listening_socket",
    "loopback_bind",
    "serve_api_key",
    "settle_heap",
    "trajectory_writer",
    "uvicorn_server",
]


def build_gateway(
    model: str,
    *,
    backend: str = "hf",
    parser: str | None = None,
    template: str | None = None,
    max_tokens: int = 1024,
    limits: ServeLimits | None = None,
    before_load: Callable[[], None] | None = None,
) -> Gateway:
    """A gateway for ``model`` (a folder or an alias) on the rollout ``backend``; every
    argument is checked before the weights load, then ``before_load()`` runs."""
    from agentfly_cli.serve import build_gateway as build

    return build(
        model,
        backend=backend,
        parser=parser,
        template=template,
        max_tokens=max_tokens,
        limits=limits,
        before_load=before_load,
    )


def gateway_app(
    gateway: Gateway,
    on_episode: Callable[[Any], None] | None = None,
    *,
    api_key: str | None = None,
    loopback_only: bool = True,
) -> Any:
    """The ASGI app over ``gateway``: ``on_episode(episode)`` gets each ended episode; every
    request needs ``api_key`` (when set); ``loopback_only`` refuses non-loopback Host names."""
    from agentfly_cli.serve.app import build_app
    from agentfly_cli.serve.auth import Access

    return build_app(gateway, on_episode, Access(api_key=api_key, loopback_only=loopback_only))


def settle_heap() -> int:
    """Freeze the objects alive now out of the garbage collector's scans (call once the model
    is loaded); how many were frozen."""
    from agentfly_cli.serve.server import settle_heap as settle

    return settle()


def uvicorn_server(app: Any, host: str, port: int) -> Any:
    """A uvicorn server for ``app`` (quiet access log; errors still logged)."""
    from agentfly_cli.serve.server import uvicorn_server as server

    return server(app, host, port)


def listening_socket(host: str, port: int) -> socket.socket:
    """A socket bound to ``host:port`` (0: a free port) and listening; OSError when the
    address cannot be resolved or bound."""
    from agentfly_cli.serve.server import listening_socket as listen

    return listen(host, port)


def loopback_bind(host: str) -> bool:
    """Listening on ``host`` reaches this machine only (``0.0.0.0`` and public names do not)."""
    from agentfly_cli.serve.auth import loopback_bind as loopback

    return loopback(host)


def api_key_problem(key: str) -> str | None:
    """What is wrong with an API key as a user gave it (None: nothing)."""
    from agentfly_cli.serve.auth import check_key

    return check_key(key)


def serve_api_key() -> str | None:
    """The raw ``AGENTFLY_SERVE_API_KEY`` (None: unset)."""
    from agentfly_cli.settings.variables import serve_api_key as variable

    return variable()


def trajectory_writer(path: str | os.PathLike) -> TrajectoryWriter:
    """A writer that appends trajectories to the JSONL file ``path`` (kept as it is)."""
    from agentfly_cli.trajectory import TrajectoryWriter

    return TrajectoryWriter(path, append=True)
