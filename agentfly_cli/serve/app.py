"""The gateway's HTTP side: the OpenAI API on Starlette (served by uvicorn).

Routes, with and without a session prefix ``/s/{session}`` (give an agent the base URL
``http://HOST:PORT/s/EPISODE/v1`` and every request it makes is recorded in that episode):

- ``GET  /v1/models``
- ``POST /v1/chat/completions`` (``stream: true`` answers with server-sent events, the text as
  it is sampled)
- the other dialects' routes (:mod:`.dialects`): ``POST /v1/messages`` (Anthropic Messages)
  and ``/v1/messages/count_tokens``, ``POST /v1/responses`` (OpenAI Responses), converted to
  chat completions and recorded alike
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
from agentfly_cli.serve.dialects import chat_events
from agentfly_cli.serve.dialects import messages as anthropic_messages
from agentfly_cli.serve.dialects import responses as openai_responses
from agentfly_cli.serve.gateway import Gateway, RequestError

DIALECTS = (anthropic_messages, openai_responses)  # each mounts its ROUTES (dialects/__init__.py)

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
        from starlette.requests import ClientDisconnect, Request
        from starlette.responses import JSONResponse, StreamingResponse
        from starlette.routing import Route
    except ImportError as exc:  # pragma: no cover - starlette comes with the serve extra
        raise RuntimeError(
            "agentfly serve needs starlette and uvicorn: pip install 'agentfly-cli[serve]'"
        ) from exc

    access = access or Access()
    limit = gateway.limits.max_body_bytes

    def error(message: str, status: int = 400, param: str | None = None,
              code: str | None = None, dialect: Any = None) -> Any:  # fmt: skip
        """An error response in OpenAI's shape, or in ``dialect``'s (its ``error_body``)."""
        if dialect is not None:
            body = dialect.error_body(status, message, param, code)
            return JSONResponse(body, status_code=status)
        kind = "invalid_request_error" if status < 500 else "server_error"
        body = {"error": {"message": message, "type": kind, "param": param, "code": code}}
        return JSONResponse(body, status_code=status)

    def refused(request: Request, admin: bool = False, dialect: Any = None) -> Any:
        why = refusal(access, request.headers, admin=admin)
        return None if why is None else error(why.message, why.status, code=why.code,
                                              dialect=dialect)  # fmt: skip

    async def json_body(request: Request, empty: Any = None, dialect: Any = None) -> Any:
        """The body as JSON (``empty`` when there is none); an error response when bad."""
        try:
            raw = await read_body(request, limit)
        except BodyTooLarge:
            return error(f"the request body is over {limit} bytes (agentfly serve "
                         "--max-body-bytes)", 413, dialect=dialect)  # fmt: skip
        except ClientDisconnect:  # gone before its body came: nobody reads the answer
            return error("the client disconnected before its request body came", 400,
                         dialect=dialect)  # fmt: skip
        if not raw.strip() and empty is not None:
            return empty
        if not is_json(request.headers.get("content-type")):
            kind = request.headers.get("content-type") or "none"
            return error(f"the request body is not JSON (Content-Type: {kind}); send it "
                         "with Content-Type: application/json", dialect=dialect)  # fmt: skip
        try:
            return json.loads(raw)
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            return error(f"the request body is not JSON: {exc}", dialect=dialect)
        except RecursionError:
            return error("the request body is not JSON this gateway reads: nested too deeply",
                         dialect=dialect)  # fmt: skip

    async def models(request: Request) -> Any:
        if (no := refused(request)) is not None:
            return no
        created = int(time.time())
        model = {"id": gateway.model_name, "object": "model", "created": created,
                 "owned_by": "agentfly"}  # fmt: skip
        return JSONResponse({"object": "list", "data": [model]})

    async def answer(request: Request, work: Any, dialect: Any = None) -> Any:
        """A completion route: the access checks, the JSON body, ``work(gateway, session,
        body)`` (a reply sent as JSON, or events streamed), its errors in the dialect's shape."""
        if (no := refused(request, dialect=dialect)) is not None:
            return no
        body = await json_body(request, dialect=dialect)
        if isinstance(body, JSONResponse):
            return body
        session = request.path_params.get("session")
        try:
            reply = await work(gateway, session, body)  # a stream: planned, errors come first
        except RequestError as exc:
            return error(str(exc), exc.status, exc.param, exc.code, dialect)
        except ChatTemplateError as exc:  # messages the model's template cannot render
            return error(str(exc), param="messages", dialect=dialect)
        except RecursionError:
            return error("the request is nested too deeply to read", param="messages",
                         dialect=dialect)  # fmt: skip
        except BackendUnavailableError as exc:
            return error(f"the model backend is unavailable: {exc}", 503, dialect=dialect)
        except Exception as exc:  # a bug: one JSON error for the client, the trace in the log
            log.exception("gateway: the request failed")
            return error(f"internal error ({type(exc).__name__}: {exc})", 500, dialect=dialect)
        if isinstance(reply, dict):
            return JSONResponse(reply)
        return StreamingResponse(reply, media_type="text/event-stream")

    def endpoint(work: Any, dialect: Any = None) -> Any:
        async def route(request: Request) -> Any:
            return await answer(request, work, dialect)

        return route

    completions = endpoint(_chat_completion)

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
        Route("/v1/chat/completions", completions, methods=["POST"]),
        Route("/s/{session}/v1/chat/completions", completions, methods=["POST"]),
        Route("/sessions", sessions),
        Route("/sessions/{session}/end", end, methods=["POST"]),
    ]
    for dialect in DIALECTS:
        for path, work in dialect.ROUTES:
            route = endpoint(work, dialect)
            routes += [Route(path, route, methods=["POST"]),
                       Route(f"/s/{{session}}{path}", route, methods=["POST"])]  # fmt: skip
    return Starlette(routes=routes)


async def _chat_completion(gateway: Gateway, session: str | None, body: Any) -> Any:
    """``POST /v1/chat/completions``: the reply, or its events with ``stream: true``."""
    if isinstance(body, dict) and body.get("stream"):
        return await chat_events(gateway, session, body)
    return await gateway.complete(session, body)


def _finite(number: float) -> bool:
    """A finite number that a float holds (an int such as 10**400 does not)."""
    try:
        return math.isfinite(number)
    except OverflowError:
        return False
