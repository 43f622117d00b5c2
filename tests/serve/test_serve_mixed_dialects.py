"""Many concurrent sessions in all the gateway's dialects at once, through the real HTTP server.

Sessions go round-robin over chat completions, Responses (by ``previous_response_id`` and by
whole ``input``) and Anthropic Messages, each in its own shape (benchmarks/dialect_clients.py),
3 requests each: a tool call, its tool result, a user turn. The backend echoes the session's
last marker, so a reply or a recorded turn that lands in the wrong session shows. Asserted: no
request lost, none misattributed, every reply in its own dialect's shape, and every session
recorded as one token-exact segment holding only its own markers.
"""

from __future__ import annotations

import asyncio

import httpx
import pytest

from agentfly_cli.chat.parsers import get_parser
from agentfly_cli.chat.templates import ChatTemplate
from agentfly_cli.serve.app import build_app
from agentfly_cli.serve.gateway import Gateway
from agentfly_cli.serve.server import serving_in_thread
from benchmarks import dialect_clients as dc

TURNS = 3


@pytest.fixture(scope="module")
def tiny_chat(tiny_model):
    return ChatTemplate.load(str(tiny_model))


def run_mixed(chat, sessions: int) -> tuple[Gateway, list[str], list[list]]:
    """``sessions`` sessions at once, round-robin over the dialects' clients (one httpx
    client, a connection per session): the gateway, each session's dialect, what each said."""
    gateway = Gateway(dc.MarkerEcho(chat), chat, get_parser("hermes"), "tiny")
    plan = [dc.DIALECTS[i % len(dc.DIALECTS)] for i in range(sessions)]
    times: list[float] = []

    async def everyone(url):
        limits = httpx.Limits(max_connections=sessions, max_keepalive_connections=sessions)
        async with httpx.AsyncClient(limits=limits, timeout=120) as client:
            send = dc.http_sender(client, url)
            return await asyncio.gather(
                *(dc.converse(send, d, i, TURNS, times) for i, d in enumerate(plan))
            )

    with serving_in_thread(build_app(gateway)) as url:
        said = asyncio.run(everyone(url))
    return gateway, plan, said


def check_mixed(chat, gateway, plan, said) -> None:
    lost = [(i, t) for i, replies in enumerate(said) for t, r in enumerate(replies) if r is None]
    assert lost == []
    wrong = {i: plan[i] for i, replies in enumerate(said) if dc.misattributed(i, replies)}
    assert wrong == {}, "replies answering another session's turn"
    misshaped = {
        (plan[i], t) for i, rs in enumerate(said) for t, r in enumerate(rs) if not r.shaped
    }
    assert misshaped == set(), "replies not in their own dialect's shape"
    assert sorted(gateway.episodes) == sorted(f"s{i}" for i in range(len(plan)))
    recorded = {
        i: problem
        for i in range(len(plan))
        if (problem := dc.recorded_wrong(chat, gateway.episodes[f"s{i}"], i, TURNS)) is not None
    }
    assert recorded == {}, "sessions not recorded as one token-exact segment of their own"
    for dialect in dc.DIALECTS:  # every shape took part, with its tool call turn
        mine = [s for d, s in zip(plan, said, strict=True) if d == dialect]
        assert mine and all(s[0].calls and not s[1].calls for s in mine), dialect


def test_mixed_dialect_sessions_at_once_are_each_answered_and_recorded_as_their_own(tiny_chat):
    gateway, plan, said = run_mixed(tiny_chat, 200)
    check_mixed(tiny_chat, gateway, plan, said)


def test_the_marker_echo_would_show_a_reply_of_another_session(tiny_chat):
    """The checks above can fail: a reply of another session's turn is counted."""
    said = dc.Said("ack session-8 turn-1")
    assert dc.misattributed(7, [dc.Said("", [("c", "note", {"marker": "session-7 turn-0"})]),
                                said]) == 1  # fmt: skip
    assert dc.misattributed(8, [dc.Said("", [("c", "note", {"marker": "session-8 turn-0"})]),
                                said]) == 0  # fmt: skip


@pytest.mark.slow
def test_a_thousand_mixed_dialect_sessions_at_once(tiny_chat):
    gateway, plan, said = run_mixed(tiny_chat, 1000)
    check_mixed(tiny_chat, gateway, plan, said)


def test_the_server_keeps_idle_connections_longer_than_httpx_clients_do():
    """Else a client may send its request on a connection the server closes that moment
    (both at 5 s, a 1,000-session run lost a request to a reset now and then)."""
    from agentfly_cli.serve.server import uvicorn_server

    server = uvicorn_server(object(), "127.0.0.1", 0)
    assert server.config.timeout_keep_alive > 2 * httpx.Limits().keepalive_expiry
