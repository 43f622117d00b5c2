"""The gateway's API dialects besides OpenAI Chat Completions, each converted to and from it.

- :mod:`.messages`: Anthropic Messages (``POST /v1/messages``, ``/v1/messages/count_tokens``)
- :mod:`.responses`: OpenAI Responses (``POST /v1/responses``)

A dialect is one module of pure conversions around the chat-completions gateway, so every
request is recorded, bounded and checked exactly as a chat completion is:

- ``to_chat(body) -> dict``: the dialect's request as a chat-completions body (a
  :class:`~agentfly_cli.serve.errors.RequestError` naming the field when it is bad);
- ``from_chat(chat_response, request) -> dict``: a chat completion as the dialect's reply;
- a streaming adapter: the gateway's chat-completions events (``data: {...}`` strings) in,
  the dialect's server-sent events out;
- ``error_body(status, message, param, code) -> dict``: the dialect's error shape (``param``:
  the chat-completions field at fault, ``code``: the gateway's error code, such as
  ``context_length_exceeded``; either may be None);
- ``ROUTES``: ``(path, handler)`` pairs, ``handler(gateway, session, body)`` answering with a
  reply (a dict, sent as JSON) or an async iterator of events; the app mounts each path with
  and without ``/s/{session}`` behind the same access checks, body limit and error handling.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any


async def chat_events(gateway: Any, session: str | None, body: Any) -> AsyncIterator[str]:
    """``gateway.stream`` started: the request is checked and planned now (its errors raise
    here, before any event is sent), then its chat-completions events."""
    events = gateway.stream(session, body)
    first = await events.__anext__()
    return _chain(first, events)


async def _chain(first: str, rest: Any) -> AsyncIterator[str]:
    """``first``, then the events of ``rest`` (closed when the client leaves)."""
    try:
        yield first
        async for event in rest:
            yield event
    finally:
        await rest.aclose()
