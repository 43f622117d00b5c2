"""Running the gateway's app on uvicorn: in the foreground (``agentfly serve``) or in a
background thread (tests, ``agentfly train --agent``)."""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import AsyncIterator, Iterator
from typing import Any

KEEP_ALIVE_S = 75
"""seconds an idle keep-alive connection stays open: longer than clients keep theirs (httpx,
under the openai and anthropic SDKs, 5 s), so that a client never sends a request on a
connection the server is closing that moment (uvicorn's default, 5 s, equals httpx's: under
load a request was then lost now and then to a reset connection)"""


def uvicorn_server(app: Any, host: str, port: int) -> Any:
    """A uvicorn server for ``app`` (quiet access log; errors still logged)."""
    import uvicorn

    config = uvicorn.Config(app, host=host, port=port, log_level="warning", access_log=False,
                            lifespan="off", timeout_keep_alive=KEEP_ALIVE_S)  # fmt: skip
    return uvicorn.Server(config)


def settle_heap() -> int:
    """Move every object alive now (the loaded model, tokenizer and libraries: some 400k
    objects) out of the garbage collector's scans, so that a full collection while serving
    pauses the event loop for what serving allocates, not 200 ms; the objects frozen."""
    import gc

    gc.collect()
    gc.freeze()
    return gc.get_freeze_count()


def listening_socket(host: str, port: int) -> Any:
    """A socket bound to ``host:port`` (0: a free port) and listening, for uvicorn's
    ``serve(sockets=...)``; OSError when the address cannot be resolved or bound."""
    import socket

    family, kind, proto, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
    sock = socket.socket(family, kind, proto)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind(address)
    except OSError:
        sock.close()
        raise
    sock.listen(2048)
    sock.set_inheritable(True)
    return sock


@contextlib.contextmanager
def serving_in_thread(app: Any, host: str = "127.0.0.1", port: int = 0) -> Iterator[str]:
    """Serve ``app`` from a thread with its own event loop; yields ``http://host:port``
    (port 0: a free one) and stops the server on exit."""
    server = uvicorn_server(app, host, port)
    loop = asyncio.new_event_loop()
    failed: list[BaseException] = []

    def run() -> None:
        asyncio.set_event_loop(loop)
        try:
            loop.run_until_complete(server.serve())
        except BaseException as exc:  # reported to the caller below
            failed.append(exc)
        finally:
            loop.close()

    thread = threading.Thread(target=run, name="agentfly-gateway", daemon=True)
    thread.start()
    while not server.started and thread.is_alive():
        thread.join(0.01)
    if not server.started:
        raise RuntimeError(f"the gateway did not start on {host}:{port}: {failed or 'unknown'}")
    bound = server.servers[0].sockets[0].getsockname()[1]
    try:
        yield f"http://{host}:{bound}"
    finally:
        server.should_exit = True
        thread.join(30)


@contextlib.asynccontextmanager
async def serving_in_loop(app: Any, host: str = "127.0.0.1") -> AsyncIterator[str]:
    """Serve ``app`` on a free port from the running event loop (the loop that drives the
    backend); yields ``http://host:port``, and stops the server on exit."""
    sock = listening_socket(host, 0)
    server = uvicorn_server(app, host, 0)
    task = asyncio.get_running_loop().create_task(server.serve(sockets=[sock]))
    try:
        while not server.started:
            if task.done():
                task.result()  # its error
                raise RuntimeError("the gateway stopped before it started")
            await asyncio.sleep(0.005)
        yield f"http://{host}:{sock.getsockname()[1]}"
    finally:
        server.should_exit = True
        try:
            await stopped(server, task)
        finally:
            sock.close()


STOP_GRACE_S = 10.0  # for the requests in flight at exit to finish, before they are dropped


async def stopped(server: Any, task: asyncio.Task) -> None:
    """Wait for a server told to exit: ``STOP_GRACE_S`` for its requests in flight (an agent
    that outlived its deadline may leave one waiting on the backend), then uvicorn's forced
    exit (connections closed, their requests dropped), then the serving task is cancelled.
    The server's own error, if it failed, is raised."""
    done, _ = await asyncio.wait([task], timeout=STOP_GRACE_S)
    if not done:
        server.force_exit = True
        done, _ = await asyncio.wait([task], timeout=STOP_GRACE_S)
    if not done:
        task.cancel()
        await asyncio.wait([task])
        return
    if not task.cancelled():
        task.result()
