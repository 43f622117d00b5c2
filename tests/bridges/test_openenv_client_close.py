"""The OpenEnv WebSocket client reads a full server's last word: openenv-core sends its
CAPACITY_REACHED error and closes at once, so the client's send can find the socket closed
before that reply is read (seen once under load in the suite)."""

from __future__ import annotations

import asyncio
import json

import pytest

websockets = pytest.importorskip("websockets")

from bridges_builtin.openenv_client import OpenEnvError, WsSession  # noqa: E402


def test_a_reply_sent_before_the_close_is_still_the_error_shown():
    async def full_server(ws):  # as openenv-core's /ws does when it is at its max sessions
        error = {"message": "at capacity (1/1)", "code": "CAPACITY_REACHED"}
        await ws.send(json.dumps({"type": "error", "data": error}))
        await ws.close()

    async def play() -> str:
        async with websockets.serve(full_server, "127.0.0.1", 0) as server:
            port = server.sockets[0].getsockname()[1]
            client = WsSession(f"http://127.0.0.1:{port}", timeout=2.0)
            client._socket = await websockets.connect(f"ws://127.0.0.1:{port}/ws")
            await asyncio.sleep(0.3)  # the server has sent its error and closed
            with pytest.raises(OpenEnvError) as raised:
                await client.reset({})
            assert client._socket is None  # closed on our side too
            return str(raised.value)

    message = asyncio.run(play())
    assert "said CAPACITY_REACHED: at capacity (1/1)" in message
