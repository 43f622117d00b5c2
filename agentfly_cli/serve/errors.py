"""The errors a gateway request can end in, each with its HTTP status (OpenAI's format)."""

from __future__ import annotations


class RequestError(ValueError):
    """A request the API refuses (HTTP 400), with the parameter at fault."""

    status = 400
    code: str | None = None  # OpenAI's error code, where one fits

    def __init__(self, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.param = param


class ContextTooLong(RequestError):
    """A rendered prompt of ``tokens`` ids that leaves no room in the ``limit``-token context
    (HTTP 400, OpenAI's code ``context_length_exceeded``); a dialect may word it its way."""

    code = "context_length_exceeded"

    def __init__(self, tokens: int, limit: float, message: str | None = None) -> None:
        super().__init__(
            message or f"the conversation ({tokens} tokens) does not fit the context "
            f"({limit} tokens)", "messages",
        )  # fmt: skip
        self.tokens, self.limit = tokens, limit


class SessionEnded(RequestError):
    """A request to a session that has ended (HTTP 409)."""

    status = 409


class UnknownSession(RequestError):
    """A session this gateway does not open on request (HTTP 404)."""

    status = 404


class TooManySessions(RequestError):
    """A new session while ``limits.max_sessions`` are open (HTTP 429)."""

    status = 429


def error_body(
    status: int, message: str, param: str | None = None, code: str | None = None
) -> dict:
    """An error in OpenAI's format: ``invalid_request_error`` below 500, else ``server_error``."""
    kind = "invalid_request_error" if status < 500 else "server_error"
    return {"error": {"message": message, "type": kind, "param": param, "code": code}}
