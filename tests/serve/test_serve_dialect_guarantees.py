"""The gateway's guarantees on every route, each refusal in the route's own error shape.

Parametrised over chat completions (``/v1/chat/completions``), Responses (``/v1/responses``),
Anthropic Messages (``/v1/messages``) and, where it applies, ``/v1/messages/count_tokens``:
the API key (401), the body bound (413, declared or sent in chunks), the request bounds (stop
strings, max tokens), per-session isolation (a request to one session neither sees nor
changes another; an ended session is 409; an unknown one is 404 where only an engine opens
sessions; a bad session id is 400), and one bad request hurting no other (malformed, deeply
nested or too big requests on every route while each route's good requests are under way; a
huge request rendering off the event loop while the others are answered).
"""

from __future__ import annotations

import asyncio
import threading

import httpx
import pytest

from agentfly_cli.backends.base import Generation
from agentfly_cli.chat.parsers import get_parser
from agentfly_cli.chat.templates import ChatTemplate
from agentfly_cli.serve.app import build_app
from agentfly_cli.serve.auth import Access
from agentfly_cli.serve.gateway import Gateway
from agentfly_cli.serve.limits import ServeLimits
from agentfly_cli.serve.server import serving_in_thread
from tests.serve.test_serve_capture import Replies
from tests.serve.test_serve_limits import SlowToRender

KEY = "k-" + "guard" * 5
USER = [{"role": "user", "content": "hi"}]
ROUTES = {
    "chat": ("/v1/chat/completions", {"model": "m", "messages": USER}),
    "responses": ("/v1/responses", {"model": "m", "input": "hi"}),
    "messages": ("/v1/messages", {"model": "m", "max_tokens": 16, "messages": USER}),
    "count_tokens": ("/v1/messages/count_tokens", {"model": "m", "messages": USER}),
}
SAMPLING = ("chat", "responses", "messages")  # the routes that sample and record
ANTHROPIC = ("messages", "count_tokens")


@pytest.fixture(scope="module")
def tiny_chat(tiny_model):
    return ChatTemplate.load(str(tiny_model))


class Always(Replies):
    """Answers every request with ``text`` (its own words, where a request asks for them:
    the last ``say:WORD`` in the prompt); keeps the prompts it was sent."""

    def __init__(self, chat, text="ok"):
        super().__init__(chat, [])
        self.text = text

    async def generate(self, prompt_ids, params, context=None):
        self.prompts.append(list(prompt_ids))
        said = self.chat.decode(list(prompt_ids[-30:])).rsplit("say:", 1)
        text = said[1].split()[0].strip(".") if len(said) == 2 else self.text
        ids = self.chat.encode_response(text)
        await asyncio.sleep(0)
        return Generation(ids, [-0.5] * len(ids), "stop")


def served(chat, backend=None, access=None, **options):
    backend = backend or Always(chat)
    gateway = Gateway(backend, chat, get_parser("hermes"), "tiny", **options)
    return backend, gateway, serving_in_thread(build_app(gateway, access=access))


def post(url, route, body=None, session="e", timeout=30, **options):
    path, default = ROUTES[route]
    prefix = "" if session is None else f"/s/{session}"
    return httpx.post(f"{url}{prefix}{path}", json=default if body is None else body,
                      timeout=timeout, **options)  # fmt: skip


def refusal(route, reply) -> tuple[int, str, str, str | None]:
    """A refusal checked to be in the route's own shape: (status, type, message, param)."""
    body = reply.json()
    if route in ANTHROPIC:
        assert body["type"] == "error" and set(body) == {"type", "error"}, body
        assert set(body["error"]) == {"type", "message"}, body
        return reply.status_code, body["error"]["type"], body["error"]["message"], None
    assert set(body) == {"error"} and set(body["error"]) == {"message", "type", "param", "code"}
    error = body["error"]
    assert error["type"] == ("invalid_request_error" if reply.status_code < 500 else
                             "server_error"), body  # fmt: skip
    return reply.status_code, error["type"], error["message"], error["param"]


def text_of(route, reply) -> str:
    """What a reply said, read in its route's own shape."""
    body = reply.json()
    if route == "chat":
        return body["choices"][0]["message"]["content"]
    if route == "responses":
        return "".join(p["text"] for i in body["output"] for p in i["content"])
    return "".join(block["text"] for block in body["content"])


def with_messages(route, messages):
    """The route's default body holding ``messages`` (user/assistant text turns)."""
    path, body = ROUTES[route]
    if route == "responses":
        return {**body, "input": messages}
    return {**body, "messages": messages}


# ---- the API key ------------------------------------------------------------------------------
@pytest.mark.parametrize("route", ROUTES)
def test_every_route_needs_the_api_key_refusing_in_its_own_shape(tiny_chat, route):
    backend, gateway, serving = served(tiny_chat, access=Access(api_key=KEY))
    with serving as url:
        for headers in ({}, {"Authorization": "Bearer nope"}, {"x-api-key": "nope"},
                        {"Authorization": f"Basic {KEY}"}):  # fmt: skip
            status, kind, message, _ = refusal(route, post(url, route, headers=headers))
            assert status == 401 and "needs an API key" in message, headers
            assert kind == ("authentication_error" if route in ANTHROPIC else
                            "invalid_request_error")  # fmt: skip
        assert backend.prompts == [] and gateway.episodes == {}  # nothing sampled or opened
        for headers in ({"Authorization": f"Bearer {KEY}"}, {"x-api-key": KEY}):
            assert post(url, route, headers=headers).status_code == 200, headers


@pytest.mark.parametrize("route", SAMPLING)
def test_an_api_key_error_names_the_openai_code(tiny_chat, route):
    _, _, serving = served(tiny_chat, access=Access(api_key=KEY))
    with serving as url:
        body = post(url, route).json()
    if route == "messages":
        assert body["error"]["type"] == "authentication_error"
    else:
        assert body["error"]["code"] == "invalid_api_key"


# ---- the body bound ---------------------------------------------------------------------------
@pytest.mark.parametrize("route", ROUTES)
def test_a_body_over_the_bound_is_a_413_in_its_own_shape_declared_or_chunked(tiny_chat, route):
    backend, gateway, serving = served(tiny_chat, limits=ServeLimits(max_body_bytes=4096))
    big = with_messages(route, [{"role": "user", "content": "x" * 50_000}])
    raw = as_json(big)

    def chunked():  # no Content-Length: the server must count what it reads
        for i in range(0, len(raw), 1000):
            yield raw[i : i + 1000]

    path = ROUTES[route][0]
    with serving as url:
        for content in (raw, chunked()):
            reply = httpx.post(f"{url}/s/e{path}", content=content,
                               headers={"Content-Type": "application/json"})  # fmt: skip
            status, kind, message, _ = refusal(route, reply)
            assert status == 413 and "4096 bytes" in message and "--max-body-bytes" in message
            if route in ANTHROPIC:
                assert kind == "request_too_large"
        assert backend.prompts == [] and gateway.episodes == {}
        assert post(url, route).status_code == 200  # the next one is served


# ---- request bounds ---------------------------------------------------------------------------
STOPS = {"chat": "stop", "messages": "stop_sequences"}  # Responses takes no stop strings


@pytest.mark.parametrize("route", STOPS)
def test_too_many_or_too_long_stop_strings_are_refused_naming_the_field_sent(tiny_chat, route):
    limits = ServeLimits(max_stops=3, max_stop_chars=10)
    backend, gateway, serving = served(tiny_chat, limits=limits)
    field = STOPS[route]
    with serving as url:
        for stops in (["a", "b", "c", "d"], ["x" * 11]):
            reply = post(url, route, {**ROUTES[route][1], field: stops})
            status, _, message, param = refusal(route, reply)
            assert status == 400 and f"'{field}' takes at most 3 strings" in message, message
            assert param in (None, field)
        assert backend.prompts == [] and gateway.episodes == {}
        at_the_bound = post(url, route, {**ROUTES[route][1], field: ["a", "b", "x" * 10]})
        assert at_the_bound.status_code == 200


MAX_TOKENS = {"chat": "max_tokens", "responses": "max_output_tokens", "messages": "max_tokens"}


@pytest.mark.parametrize("route", MAX_TOKENS)
def test_max_tokens_must_be_a_positive_integer_named_as_the_route_names_it(tiny_chat, route):
    backend, gateway, serving = served(tiny_chat)
    field = MAX_TOKENS[route]
    with serving as url:
        for value in (0, -1, "16", True, 1.5, None if route == "messages" else [16]):
            reply = post(url, route, {**ROUTES[route][1], field: value})
            status, _, message, param = refusal(route, reply)
            assert status == 400 and field in message, (value, message)
            assert param in (None, field), param
            if route == "responses":
                assert "'max_tokens'" not in message  # the field the client sent
        assert backend.prompts == [] and gateway.episodes == {}
        assert post(url, route, {**ROUTES[route][1], field: 3}).status_code == 200


# ---- per-session isolation --------------------------------------------------------------------
@pytest.mark.parametrize("route", SAMPLING)
def test_a_request_to_one_session_neither_sees_nor_changes_another(tiny_chat, route):
    backend, gateway, serving = served(tiny_chat)
    with serving as url:
        first_a = post(url, route, with_messages(route, [
            {"role": "user", "content": "say:alpha"}]), session="a")  # fmt: skip
        post(url, route, with_messages(route, [{"role": "user", "content": "say:beta"}]),
             session="b")  # fmt: skip
        b_before = gateway.episodes["b"].segments[0].trajectory.ids[:]
        second = [{"role": "user", "content": "say:alpha"},
                  {"role": "assistant", "content": "alpha"},
                  {"role": "user", "content": "say:gamma"}]  # fmt: skip
        if route == "responses":  # by the stored response, as Codex does
            body = {**ROUTES[route][1], "input": "say:gamma",
                    "previous_response_id": first_a.json()["id"]}  # fmt: skip
            refused = post(url, route, body, session="b")  # a's response, asked for in b
            status, _, message, param = refusal(route, refused)
            assert status == 400 and param == "previous_response_id" and "no stored" in message
        else:
            body = with_messages(route, second)
        assert text_of(route, post(url, route, body, session="a")) == "gamma"
    [a_segment] = gateway.episodes["a"].segments
    [b_segment] = gateway.episodes["b"].segments
    assert b_segment.trajectory.ids == b_before and gateway.episodes["b"].requests == 1
    a_text = tiny_chat.decode(a_segment.trajectory.ids)
    assert "alpha" in a_text and "gamma" in a_text and "beta" not in a_text
    assert a_segment.trajectory.num_turns == 2
    a_segment.trajectory.check()
    assert backend.prompts[2][: len(backend.prompts[0])] == backend.prompts[0]  # a's own ids


@pytest.mark.parametrize("route", ROUTES)
def test_an_ended_session_is_a_409_on_every_route(tiny_chat, route):
    backend, gateway, serving = served(tiny_chat)
    with serving as url:
        assert post(url, "chat", session="done").status_code == 200
        assert httpx.post(f"{url}/sessions/done/end").status_code == 200
        status, _, message, _ = refusal(route, post(url, route, session="done"))
        assert status == 409 and "has ended" in message
    assert len(backend.prompts) == 1 and gateway.episodes == {}


@pytest.mark.parametrize("route", ROUTES)
def test_an_unknown_session_is_a_404_where_only_an_engine_opens_sessions(tiny_chat, route):
    backend, gateway, serving = served(tiny_chat, open_on_request=False)
    gateway.open_episode("known")
    with serving as url:
        for session in ("made-up", None):  # an invented session, and none at all
            status, kind, _, _ = refusal(route, post(url, route, session=session))
            assert status == 404, session
            if route in ANTHROPIC:
                assert kind == "not_found_error"
        assert backend.prompts == [] and list(gateway.episodes) == ["known"]
        assert post(url, route, session="known").status_code == 200


@pytest.mark.parametrize("route", ROUTES)
def test_a_session_id_outside_the_safe_characters_is_a_400_on_every_route(tiny_chat, route):
    backend, gateway, serving = served(tiny_chat)
    with serving as url:
        for raw in ("%FF", "a%20b", "x" * 129):
            status, _, message, param = refusal(route, post(url, route, session=raw))
            assert status == 400 and "session id" in message, raw
            assert param in (None, "session")
    assert backend.prompts == [] and gateway.episodes == {}


# ---- one bad request hurts no other -----------------------------------------------------------
IMAGE = {"type": "image"}


def as_json(body) -> bytes:
    return httpx.Request("POST", "http://x", json=body).content


class Held(Always):
    """Answers once ``release`` is set; ``waiting``: the requests held so far."""

    def __init__(self, chat):
        super().__init__(chat)
        self.release, self.waiting = threading.Event(), 0

    async def generate(self, prompt_ids, params, context=None):
        self.waiting += 1
        while not self.release.is_set():
            await asyncio.sleep(0.005)
        return await super().generate(prompt_ids, params, context)


def bad_requests(route):
    """Bodies (raw bytes) the route must refuse with a 4xx without hurting anyone else."""
    path, body = ROUTES[route]
    deep = b"[" * 100_000 + b"]" * 100_000
    field = "input" if route == "responses" else "messages"
    wrong = {"chat": {"messages": [{"content": "no role"}]},
             "responses": {"input": [{"type": "computer_call"}]},
             "messages": {"model": "m", "max_tokens": 4,
                          "messages": [{"role": "user", "content": [IMAGE]}]}}  # fmt: skip
    wrong["count_tokens"] = {k: v for k, v in wrong["messages"].items() if k != "max_tokens"}
    too_big = {**body, field: "x" * 70_000}
    return [b"{not json", b"[1, 2]", b'{"' + field.encode() + b'": ' + deep + b"}",
            as_json(wrong[route]), as_json(too_big)]  # fmt: skip


def test_bad_requests_on_every_route_while_each_routes_good_ones_are_under_way(tiny_chat):
    backend = Held(tiny_chat)
    _, gateway, serving = served(tiny_chat, backend, limits=ServeLimits(max_body_bytes=65_536))
    answers: dict[str, str] = {}
    with serving as url:

        def good(route):
            body = with_messages(route, [{"role": "user", "content": f"say:{route}"}])
            answers[route] = text_of(route, post(url, route, body, session=f"good-{route}"))

        workers = [threading.Thread(target=good, args=(route,)) for route in SAMPLING]
        for worker in workers:
            worker.start()
        for _ in range(2000):
            if backend.waiting == len(SAMPLING):
                break
            threading.Event().wait(0.005)
        assert backend.waiting == len(SAMPLING)  # all three are in the backend now
        for route in ROUTES:
            for raw in bad_requests(route):
                reply = httpx.post(
                    f"{url}/s/bad-{route}{ROUTES[route][0]}",
                    content=raw,
                    headers={"Content-Type": "application/json"},
                    timeout=30,
                )
                status, _, _, _ = refusal(route, reply)
                assert status in (400, 413), (route, raw[:40], reply.text[:200])
        backend.release.set()
        for worker in workers:
            worker.join(30)
    assert answers == {route: route for route in SAMPLING}
    assert sorted(gateway.episodes) == sorted(f"good-{route}" for route in SAMPLING)
    for episode in gateway.episodes.values():
        [segment] = episode.segments
        segment.trajectory.check()


@pytest.mark.parametrize("route", SAMPLING)
def test_a_huge_request_renders_off_the_event_loop_while_every_route_is_answered(tiny_chat, route):
    slow = SlowToRender(tiny_chat)
    gateway = Gateway(Always(tiny_chat), slow, get_parser("hermes"), "tiny")
    answered: dict = {}
    with serving_in_thread(build_app(gateway)) as url:

        def big():
            body = with_messages(route, [{"role": "user", "content": "BIG " * 250_000}])
            answered["big"] = post(url, route, body, session="big", timeout=60).status_code

        worker = threading.Thread(target=big)
        worker.start()
        try:
            assert slow.started.wait(30)  # the 1 MB request is rendering now
            for other in ROUTES:
                reply = post(url, other, session=f"small-{other}", timeout=10)
                answered[other] = reply.status_code
        finally:
            slow.release.set()
            worker.join(60)
    assert answered == {"big": 200, **{other: 200 for other in ROUTES}}


@pytest.mark.parametrize("route", ROUTES)
def test_a_client_leaving_mid_body_is_no_error_and_hurts_no_other(tiny_chat, route, caplog):
    import logging
    import socket
    import time

    backend, gateway, serving = served(tiny_chat)
    uvicorn_log = logging.getLogger("uvicorn")  # its own handler, not the root's
    with serving as url:
        uvicorn_log.addHandler(caplog.handler)  # once uvicorn has set its logging up
        try:
            host, port = url.removeprefix("http://").split(":")
            with socket.create_connection((host, int(port))) as sock:
                sock.sendall(
                    f"POST /s/gone{ROUTES[route][0]} HTTP/1.1\r\n"
                    f"Host: {host}:{port}\r\nContent-Type: application/json\r\n"
                    'Content-Length: 5000\r\n\r\n{"messages": [{"role": '.encode()
                )
                time.sleep(0.2)  # the server is reading the body now
            time.sleep(0.3)  # and has seen the client leave
            assert post(url, route, session="stays").status_code == 200
        finally:
            uvicorn_log.removeHandler(caplog.handler)
    errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert errors == [] and "gone" not in gateway.episodes
