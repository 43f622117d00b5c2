"""Stopping the gateway a run serves from its own loop (``serving_in_loop``, what
``agentfly train --agent`` uses): a request still in flight at exit (an agent that outlived
its deadline, waiting on the backend) is dropped after the grace period; the exit neither
raises nor waits for the request's client to give up."""

from __future__ import annotations

import asyncio
import time

import httpx
from starlette.applications import Starlette
from starlette.responses import JSONResponse
from starlette.routing import Route

from agentfly_cli.serve import server


def app_with(never: asyncio.Event) -> Starlette:
    async def quick(request):
        return JSONResponse({"ok": True})

    async def stuck(request):
        await never.wait()  # a backend that does not answer
        return JSONResponse({"ok": False})

    return Starlette(routes=[Route("/quick", quick), Route("/stuck", stuck)])


def test_a_request_in_flight_at_exit_is_dropped_after_the_grace(monkeypatch):
    monkeypatch.setattr(server, "STOP_GRACE_S", 0.3)

    async def main():
        never = asyncio.Event()
        async with httpx.AsyncClient(timeout=8) as client:
            async with server.serving_in_loop(app_with(never)) as url:
                assert (await client.get(f"{url}/quick")).json() == {"ok": True}
                pending = asyncio.ensure_future(client.get(f"{url}/stuck"))
                await asyncio.sleep(0.2)  # the request is in the handler
                started = time.monotonic()
            took = time.monotonic() - started
            outcome = await asyncio.gather(pending, return_exceptions=True)
        return took, outcome[0]

    took, outcome = asyncio.run(main())
    assert took < 3.0  # two graces and the cancel, not until the client gives up (8 s)
    assert isinstance(outcome, httpx.HTTPError)  # it never got an answer


def test_a_quiet_server_stops_at_once():
    async def main():
        async with server.serving_in_loop(app_with(asyncio.Event())) as url:
            async with httpx.AsyncClient() as client:
                assert (await client.get(f"{url}/quick")).status_code == 200
            started = time.monotonic()
        return time.monotonic() - started

    assert asyncio.run(main()) < 1.0


def test_settling_the_heap_takes_the_loaded_objects_out_of_the_collectors_scans():
    import gc

    from agentfly_cli.api.serving import settle_heap

    kept = [[i] for i in range(10_000)]  # objects alive when serving starts
    try:
        frozen = settle_heap()
        assert frozen >= len(kept) and gc.get_freeze_count() == frozen
        assert all(gc.is_tracked(x) for x in kept[:10])  # still alive, only not scanned
    finally:
        gc.unfreeze()
    assert gc.get_freeze_count() == 0
