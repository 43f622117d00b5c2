"""The gateway's sessions: open ones (each an :class:`~.capture.Episode`), ended ones, and
their bounds (how many may be open, how long one may sit idle)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from agentfly_cli.serve.capture import Episode
from agentfly_cli.serve.errors import RequestError, SessionEnded, TooManySessions, UnknownSession
from agentfly_cli.serve.limits import SESSION_ID, ServeLimits


class Sessions:
    """Open and ended sessions; ``on_close(episode)`` gets each one that ends."""

    def __init__(
        self, limits: ServeLimits, *, open_on_request: bool = True, on_close: Callable = None
    ) -> None:
        self.limits = limits
        self.open_on_request = open_on_request
        self.on_close: Callable[[Episode], Any] | None = on_close
        self.episodes: dict[str, Episode] = {}
        self._closed: dict[str, str] = {}  # ended sessions -> why (ordered; the newest kept)
        self._swept = time.monotonic()

    def get(self, session: str) -> Episode:
        """The session's episode, opened on first use (where sessions open on request); an
        ended, unknown or badly named session is refused."""
        episode = self.episodes.get(session)
        if episode is None:
            self.check(session)
            episode = self.open(session)
        return episode

    def check(self, session: str | None) -> None:
        """Refuse what :meth:`get` refuses, without opening anything: a badly named session
        (400), an ended one (409), an unknown one where sessions do not open on request (404;
        so is ``None``, a request without a session, there)."""
        if session is None:
            if not self.open_on_request:
                raise UnknownSession("this gateway serves session URLs only (/s/ID/v1)")
            return
        if session in self.episodes:
            return
        check_session_id(session)
        self.expire_idle()
        if session in self._closed:
            raise SessionEnded(f"session {session!r} has ended{self._closed[session]}; "
                               "start a new one")  # fmt: skip
        if not self.open_on_request:
            raise UnknownSession(f"no open session {session!r}; use the base URL you "
                                 "were given")  # fmt: skip

    def open(
        self,
        session: str,
        *,
        task_index: int | None = None,
        task_id: str | None = None,
        greedy: bool = False,
    ) -> Episode:
        """Open ``session`` (refused beyond ``limits.max_sessions``), playing the task
        ``task_index`` (of id ``task_id``) when an engine gives one; ``greedy``: sampled at
        temperature 0."""
        check_session_id(session)
        bound = self.limits.max_sessions
        if bound is not None and len(self.episodes) >= bound:
            self.expire_idle(force=True)
            if len(self.episodes) >= bound:
                raise TooManySessions(
                    f"{len(self.episodes)} sessions are open, the most this gateway keeps "
                    "(agentfly serve --max-sessions); end some with /sessions/ID/end"
                )
        episode = Episode(
            session, group_id=session, task_index=task_index, task_id=task_id, greedy=greedy
        )
        self.episodes[session] = episode
        episode.last_used = time.monotonic()
        return episode

    def close(
        self, session: str, reward: float | None = None, *, checked: bool = False, why: str = ""
    ) -> Episode | None:
        """End a session: its episode (with ``reward`` set), no longer open; later requests to
        it are refused (an agent that outlived its episode). An unknown session is None and
        stays free to open. ``checked``: a badly named one is a RequestError."""
        if checked:
            check_session_id(session)
        episode = self.episodes.pop(session, None)
        if episode is None:
            return None
        self._closed[session] = why
        if len(self._closed) > self.limits.ended_kept:
            self._closed.pop(next(iter(self._closed)))
        if reward is not None:
            episode.reward = reward
        if self.on_close is not None:
            self.on_close(episode)
        return episode

    def expire_idle(self, *, force: bool = False) -> int:
        """End the sessions idle for ``limits.session_idle_s`` (none with a request under
        way); at most one sweep a second unless ``force``. How many ended."""
        idle = self.limits.session_idle_s
        now = time.monotonic()
        if idle is None or (not force and now - self._swept < 1.0):
            return 0
        self._swept = now
        stale = [e.id for e in list(self.episodes.values())
                 if not e.busy and now - e.last_used > idle]  # fmt: skip
        for session in stale:
            self.close(session, why=f" (idle for over {idle:g} s)")
        return len(stale)


def check_session_id(session: str) -> None:
    """A session id of ``[A-Za-z0-9._~-]{1,128}`` (what a URL carries unchanged)."""
    if not isinstance(session, str) or SESSION_ID.fullmatch(session) is None:
        shown = session if isinstance(session, str) and len(session) <= 40 else "this one"
        raise RequestError(f"session id {shown!r} is not 1-128 of A-Z a-z 0-9 . _ ~ -", "session")
