"""The conversations behind stored Responses (``previous_response_id``), kept per session.

Each stored response keeps its conversation as chat messages (the request's, without its
``instructions``, then the reply), so a follow-up request that sends only its new items
continues it. A response is found only from the session that made it; each session keeps its
last ``per_session`` responses and the store its last ``sessions`` sessions (least recently
used dropped first), so memory stays bounded whatever the clients send; an ended session's
responses are dropped (swept at most once a second, as a new session stores its first).
"""

from __future__ import annotations

import collections
import time
from collections.abc import Container
from typing import Any

from agentfly_cli.serve.limits import LRU

PER_SESSION = 16  # stored responses kept per session
SESSIONS = 10_000  # sessions whose responses are kept
ANONYMOUS = ""  # the key of requests made without a session


class ResponseStore:
    """Stored responses' conversations, by session and response id."""

    def __init__(self, per_session: int = PER_SESSION, sessions: int = SESSIONS) -> None:
        if per_session < 1 or sessions < 1:
            raise ValueError("a response store keeps at least 1 session and 1 response each")
        self.per_session, self.sessions = per_session, sessions
        self._sessions: collections.OrderedDict[str, LRU] = collections.OrderedDict()
        self._swept = 0.0

    def put(
        self,
        session: str | None,
        response_id: str,
        messages: list[dict[str, Any]],
        open_sessions: Container[str] | None = None,
    ) -> None:
        """Keep ``messages`` (a shallow copy) as the conversation of ``response_id``;
        ``open_sessions``: the sessions still open (the others' responses are dropped)."""
        key = ANONYMOUS if session is None else session
        responses = self._sessions.get(key)
        if responses is None:
            if open_sessions is not None and time.monotonic() - self._swept >= 1.0:
                self._swept = time.monotonic()
                for ended in [k for k in self._sessions if k and k not in open_sessions]:
                    del self._sessions[ended]
            responses = self._sessions[key] = LRU(self.per_session)
            while len(self._sessions) > self.sessions:
                self._sessions.popitem(last=False)
        self._sessions.move_to_end(key)
        responses.put(response_id, list(messages))

    def get(self, session: str | None, response_id: str) -> list[dict[str, Any]] | None:
        """The conversation of ``response_id`` in ``session`` (a copy); None when unknown."""
        key = ANONYMOUS if session is None else session
        responses = self._sessions.get(key)
        if responses is None:
            return None
        self._sessions.move_to_end(key)
        found = responses.get(response_id)
        return None if found is None else list(found)

    def __len__(self) -> int:
        """How many sessions have stored responses."""
        return len(self._sessions)
