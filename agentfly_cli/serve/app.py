"""The gateway's HTTP side: the OpenAI API on Starlette (served by uvicorn).

Routes, with and without a session prefix ``/s/{session}`` (give an agent the base URL
``http://HOST:PORT/s/EPISODE/v1`` and every request it makes is recorded in that episode):

- ``GET  /v1/models``
- ``POST /v1/chat/completions`` (``stream: true`` answers with server-sent events, the text as
  it is sampled)
- ``POST /sessions/{session}/end`` with an optional ``{"reward": R}``: the episode's segments
  as trajectory JSON; the session is closed
- ``GET  /sessions``: the open sessions and their request and segment counts
"""

from __future__ import annotations

import json
import logging
import math
import time
from typing import Any

from agentfly_cli.chat.templates import ChatTemplateError
from agentfly_cli.rollout.backends.base import BackendUnavailableError
from agentfly_cli.serve.gateway import Gateway, RequestError

log = logging.getLogger(__name__)


def build_app(gateway: Gateway, on_episode: Any = None) -> Any:
    """The Starlette app over ``gateway``; ``on_episode(episode)`` gets each ended episode
    (a session ended with ``/sessions/{id}/end``, or a request made without a session)."""
    try:
        from starlette.applications import Starlette
        from starlette.requests import Request
        from starlette.responses import JSONResponse, StreamingResponse
        from starlette.routing import Route
    except ImportError as exc:  # pragma: no cover - starlette comes with the serve extra
        raise RuntimeError(
            "agentfly serve needs starlette and uvicorn: pip install 'agentfly-cli[serve]'"
        ) from exc

    def error(message: str, status: int = 400, param: str | None = None) -> Any:
        kind = "invalid_request_error" if status < 500 else "server_error"
        body = {"error": {"message": message, "type": kind, "param": param, "code": None}}
        return JSONResponse(body, status_code=status)

    async def models(request: Request) -> Any:
        created = int(time.time())
        model = {"id": gateway.model_name, "object": "model", "created": created,
                 "owned_by": "agentfly"}  # fmt: skip
        return JSONResponse({"object": "list", "data": [model]})

    async def completions(request: Request) -> Any:
        try:
            body = json.loads(await request.body())
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            return error(f"the request body is not JSON: {exc}")
        session = request.path_params.get("session")
        try:
            if isinstance(body, dict) and body.get("stream"):
                events = gateway.stream(session, body)  # checked: errors come before events
                return StreamingResponse(events, media_type="text/event-stream")
            reply = await gateway.complete(session, body)
        except RequestError as exc:
            return error(str(exc), status=exc.status, param=exc.param)
        except ChatTemplateError as exc:  # messages the model's template cannot render
            return error(str(exc), param="messages")
        except BackendUnavailableError as exc:
            return error(f"the model backend is unavailable: {exc}", status=503)
        except Exception as exc:  # a bug: one JSON error for the client, the trace in the log
            log.exception("gateway: the request failed")
            return error(f"internal error ({type(exc).__name__}: {exc})", status=500)
        return JSONResponse(reply)

    async def end(request: Request) -> Any:
        session = request.path_params["session"]
        raw = await request.body()
        try:
            body = json.loads(raw) if raw.strip() else {}
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            return error(f"the request body is not JSON: {exc}")
        reward = body.get("reward") if isinstance(body, dict) else None
        if reward is not None and (
            not isinstance(reward, (int, float)) or isinstance(reward, bool)
            or not math.isfinite(reward)
        ):  # fmt: skip
            return error("'reward' must be a finite number", param="reward")
        episode = gateway.close_episode(session, reward)
        if episode is None:
            return error(f"no open session {session!r}", status=404)
        return JSONResponse(
            {"session": session, "reward": episode.reward,
             "trajectories": [t.to_dict() for t in episode.trajectories()]}
        )  # fmt: skip

    async def sessions(request: Request) -> Any:
        return JSONResponse(
            [{"session": e.id, "requests": e.requests, "segments": len(e.segments)}
             for e in gateway.episodes.values()]
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
    return Starlette(routes=routes)
