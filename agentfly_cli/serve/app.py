"""The gateway's HTTP side: the OpenAI API on Starlette (served by uvicorn).

Routes, with and without a session prefix ``/s/{session}`` (give an agent the base URL
``http://HOST:PORT/s/EPISODE/v1`` and every request it makes is recorded in that episode):

- ``GET  /v1/models``
- ``POST /v1/chat/completions`` (``stream: true`` answers with server-sent events, the text as
  it is sampled)
- ``POST /v1/responses``: OpenAI's Responses API (:mod:`.dialects.responses`), converted to
  and from a chat completion; every dialect is served by the same handler
- ``POST /sessions/{session}/end`` with an optional ``{"reward": R}``: the episode's segments
  as trajectory JSON; the session is closed
- ``GET  /sessions``: the open sessions and their request and segment counts

Every route checks the :class:`~.auth.Access` policy first (API key, loopback Host, Origin).
"""

from __future__ import annotations

import json
import logging
import math
import time
from typing import Any

from agentfly_cli.backends.base import BackendUnavailableError
from agentfly_cli.chat.templates import ChatTemplateError
from agentfly_cli.serve.auth import Access, is_json, refusal
from agentfly_cli.serve.dialects.responses import ResponsesDialect
from agentfly_cli.serve.errors import error_body
from agentfly_cli.serve.gateway import Gateway, RequestError

log = logging.getLogger(__name__)


class BodyTooLarge(Exception):
    """A request body over the gateway's ``max_body_bytes``."""


async def read_body(request: Any, limit: int | None) -> bytes:
    """The request body, read in chunks; :class:`BodyTooLarge` as soon as it passes ``limit``
    (a ``Content-Length`` above it is refused before anything is read)."""
    declared = request.headers.get("content-length")
    if limit is not None and declared is not None and declared.isdigit() and int(declared) > limit:
        raise BodyTooLarge
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if limit is not None and size > limit:
            raise BodyTooLarge
        chunks.append(chunk)
    return b"".join(chunks)


def build_app(gateway: Gateway, on_episode: Any = None, access: Access | None = None) -> Any:
    """The Starlette app over ``gateway``; ``on_episode(episode)`` gets each ended episode
    (a session ended with ``/sessions/{id}/end`` or left idle, or a request made without a
    session). ``access``: who may call it (default: no key, loopback Host names only)."""
    try:
        from starlette.applications import Starlette
        from starlette.requests import Request
        from starlette.responses import JSONResponse, StreamingResponse
        from starlette.routing import Route
    except ImportError as exc:  # pragma: no cover - starlette comes with the serve extra
        raise RuntimeError(
            "agentfly serve needs starlette and uvicorn: pip install 'agentfly-cli[serve]'"
        ) from exc

    access = access or Access()
    limit = gateway.limits.max_body_bytes

    def error(message: str, status: int = 400, param: str | None = None,
              code: str | None = None, shape: Any = error_body) -> Any:  # fmt: skip
        """An error response, its body in ``shape`` (a dialect's ``error_body``)."""
        return JSONResponse(shape(status, message, param, code), status_code=status)

    def refused(request: Request, admin: bool = False, shape: Any = error_body) -> Any:
        why = refusal(access, request.headers, admin=admin)
        return None if why is None else error(why.message, why.status, code=why.code, shape=shape)

    async def json_body(request: Request, empty: Any = None, shape: Any = error_body) -> Any:
        """The body as JSON (``empty`` when there is none); an error response when bad."""
        try:
            raw = await read_body(request, limit)
        except BodyTooLarge:
            return error(f"the request body is over {limit} bytes (agentfly serve "
                         "--max-body-bytes)", 413, shape=shape)  # fmt: skip
        if not raw.strip() and empty is not None:
            return empty
        if not is_json(request.headers.get("content-type")):
            kind = request.headers.get("content-type") or "none"
            return error(f"the request body is not JSON (Content-Type: {kind}); send it "
                         "with Content-Type: application/json", shape=shape)  # fmt: skip
        try:
            return json.loads(raw)
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            return error(f"the request body is not JSON: {exc}", shape=shape)
        except RecursionError:
            return error("the request body is not JSON this gateway reads: nested too deeply",
                         shape=shape)  # fmt: skip

    async def models(request: Request) -> Any:
        if (no := refused(request)) is not None:
            return no
        created = int(time.time())
        model = {"id": gateway.model_name, "object": "model", "created": created,
                 "owned_by": "agentfly"}  # fmt: skip
        return JSONResponse({"object": "list", "data": [model]})

    async def answer(request: Request, dialect: Any = None) -> Any:
        """A chat completion, plain or streamed; with a ``dialect`` (:mod:`.dialects`), the
        request and its answer converted from and to that API, its errors in its shape."""
        shape = error_body if dialect is None else dialect.error_body
        if (no := refused(request, shape=shape)) is not None:
            return no
        body = await json_body(request, shape=shape)
        if isinstance(body, JSONResponse):
            return body
        session = request.path_params.get("session")
        try:
            chat = body if dialect is None else dialect.to_chat(session, body)
            if isinstance(chat, dict) and chat.get("stream"):
                events = gateway.stream(session, chat)
                if dialect is not None:
                    events = dialect.events(session, body, chat, events)
                first = await events.__anext__()  # planned: errors come before any event
                return StreamingResponse(_chain(first, events), media_type="text/event-stream")
            reply = await gateway.complete(session, chat)
            if dialect is not None:
                reply = dialect.from_chat(session, body, chat, reply)
        except RequestError as exc:
            return error(str(exc), exc.status, exc.param, exc.code, shape)
        except ChatTemplateError as exc:  # messages the model's template cannot render
            return error(str(exc), param="messages", shape=shape)
        except RecursionError:
            return error("the request is nested too deeply to read", param="messages", shape=shape)
        except BackendUnavailableError as exc:
            return error(f"the model backend is unavailable: {exc}", status=503, shape=shape)
        except Exception as exc:  # a bug: one JSON error for the client, the trace in the log
            log.exception("gateway: the request failed")
            return error(f"internal error ({type(exc).__name__}: {exc})", 500, shape=shape)
        return JSONResponse(reply)

    def served_as(dialect: Any) -> Any:
        async def handle(request: Request) -> Any:
            return await answer(request, dialect)

        return handle

    async def end(request: Request) -> Any:
        if (no := refused(request, admin=True)) is not None:
            return no
        session = request.path_params["session"]
        body = await json_body(request, empty={})
        if isinstance(body, JSONResponse):
            return body
        reward = body.get("reward") if isinstance(body, dict) else None
        if reward is not None and (
            not isinstance(reward, (int, float)) or isinstance(reward, bool)
            or not _finite(reward)
        ):  # fmt: skip
            return error("'reward' must be a finite number", param="reward")
        try:
            episode = gateway.close_episode(session, reward, checked=True)
        except RequestError as exc:
            return error(str(exc), status=exc.status, param=exc.param)
        if episode is None:
            return error(f"no open session {session!r}", status=404)
        return JSONResponse(
            {"session": session, "reward": episode.reward,
             "trajectories": [t.to_dict() for t in episode.trajectories()]}
        )  # fmt: skip

    async def sessions(request: Request) -> Any:
        if (no := refused(request, admin=True)) is not None:
            return no
        gateway.expire_idle()
        return JSONResponse(
            [{"session": e.id, "requests": e.requests, "segments": len(e.segments)}
             for e in list(gateway.episodes.values())]
        )  # fmt: skip

    if on_episode is not None:
        gateway.on_close = on_episode
    routes = [
        Route("/v1/models", models),
        Route("/s/{session}/v1/models", models),
        Route("/v1/chat/completions", answer, methods=["POST"]),
        Route("/s/{session}/v1/chat/completions", answer, methods=["POST"]),
        Route("/sessions", sessions),
        Route("/sessions/{session}/end", end, methods=["POST"]),
    ]
    for dialect in (ResponsesDialect(gateway),):  # each dialect: its path, with and without /s/
        for path in (dialect.path, "/s/{session}" + dialect.path):
            routes.append(Route(path, served_as(dialect), methods=["POST"]))
    return Starlette(routes=routes)


def _finite(number: float) -> bool:
    """A finite number that a float holds (an int such as 10**400 does not)."""
    try:
        return math.isfinite(number)
    except OverflowError:
        return False


async def _chain(first: str, rest: Any) -> Any:
    """``first``, then the events of ``rest`` (closed when the client leaves)."""
    try:
        yield first
        async for event in rest:
            yield event
    finally:
        await rest.aclose()
