"""The errors a gateway request can end in, each with its HTTP status (OpenAI's format)."""

from __future__ import annotations


class RequestError(ValueError):
    """A request the API refuses (HTTP 400), with the parameter at fault."""

    status = 400

    def __init__(self, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.param = param


class SessionEnded(RequestError):
    """A request to a session that has ended (HTTP 409)."""

    status = 409


class UnknownSession(RequestError):
    """A session this gateway does not open on request (HTTP 404)."""

    status = 404


class TooManySessions(RequestError):
    """A new session while ``limits.max_sessions`` are open (HTTP 429)."""

    status = 429
