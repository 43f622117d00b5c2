"""Who may talk to the gateway: API keys, loopback Host names, browser origins.

- With an API key, every route needs it: ``Authorization: Bearer KEY`` (what the ``openai``
  SDK sends) or ``x-api-key: KEY`` (the ``anthropic`` SDK), compared in constant time. An
  admin key, where set, is what the session routes (``/sessions``, ``/sessions/X/end``) need
  instead (the agent engine keeps one its agents never see).
- On a loopback bind, a ``Host`` header that is not a loopback name or address is refused
  (a DNS-rebinding page reaches 127.0.0.1 under its own name).
- A browser request from another origin (an ``Origin`` header that does not match the
  ``Host``) is refused; JSON bodies must come as JSON (``Content-Type: application/json``),
  so a text/plain "simple" cross-origin POST never reaches a route.
"""

from __future__ import annotations

import hmac
import ipaddress
import socket
from collections.abc import Mapping
from dataclasses import dataclass
from urllib.parse import urlsplit

LOOPBACK_NAMES = ("localhost", "localhost.localdomain", "ip6-localhost", "ip6-loopback")


@dataclass(frozen=True)
class Access:
    """The gateway's access policy."""

    api_key: str | None = None  # every route needs it
    admin_key: str | None = None  # the session routes need it (instead of api_key)
    loopback_only: bool = True  # refuse Host headers that are not loopback names


@dataclass(frozen=True)
class Refusal:
    """Why a request is refused: the HTTP status, the message and OpenAI's error code."""

    status: int
    message: str
    code: str | None = None


def check_key(key: str) -> str | None:
    """What is wrong with an API key as a user gave it (None: nothing)."""
    if not key:
        return "is empty"
    if not all(33 <= ord(c) <= 126 for c in key):
        return "must be printable ASCII without spaces (it travels in an HTTP header)"
    return None


def presented_key(headers: Mapping[str, str]) -> str | None:
    """The key a request carries: ``Authorization: Bearer KEY``, else ``x-api-key``."""
    authorization = headers.get("authorization") or ""
    scheme, _, value = authorization.strip().partition(" ")
    if scheme.lower() == "bearer" and value.strip():
        return value.strip()
    return headers.get("x-api-key") or None


def same_key(given: str | None, expected: str) -> bool:
    """``given`` is ``expected``, compared in constant time."""
    if given is None:
        return False
    return hmac.compare_digest(given.encode("utf-8", "replace"), expected.encode("utf-8"))


def refusal(access: Access, headers: Mapping[str, str], *, admin: bool = False) -> Refusal | None:
    """Why ``access`` refuses a request with these (lower-case) headers; None: allowed."""
    host = headers.get("host", "")
    if access.loopback_only and not loopback_host(host):
        return Refusal(
            403, f"Host {host!r} is not a loopback name; this gateway listens on loopback "
            "only (use http://127.0.0.1:PORT or http://localhost:PORT)", "host_not_allowed",
        )  # fmt: skip
    origin = headers.get("origin")
    if origin is not None and not same_origin(origin, host):
        return Refusal(403, f"cross-origin request from {origin!r} refused", "origin_not_allowed")
    expected = access.admin_key if admin and access.admin_key else access.api_key
    if expected is not None and not same_key(presented_key(headers), expected):
        what = "an admin key" if admin and access.admin_key else "an API key"
        return Refusal(
            401, f"this gateway needs {what}: send 'Authorization: Bearer KEY' or "
            "'x-api-key: KEY'", "invalid_api_key",
        )  # fmt: skip
    return None


def loopback_host(host: str) -> bool:
    """A ``Host`` header naming a loopback name or address (with or without a port)."""
    name = _host_name(host)
    if not name:
        return False
    if name in LOOPBACK_NAMES or name.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


def same_origin(origin: str, host: str) -> bool:
    """A browser's ``Origin`` that names this server's ``Host`` (``null`` never does)."""
    parts = urlsplit(origin.strip())
    if parts.scheme not in ("http", "https") or not parts.netloc:
        return False
    return parts.netloc.lower() == host.strip().lower()


def is_json(content_type: str | None) -> bool:
    """``application/json`` or a ``+json`` media type."""
    media = (content_type or "").split(";", 1)[0].strip().lower()
    return media == "application/json" or (media.startswith("application/") and
                                            media.endswith("+json"))  # fmt: skip


def loopback_bind(host: str) -> bool:
    """Whether listening on ``host`` reaches this machine only (every address it resolves to
    is a loopback one). ``0.0.0.0``, ``::`` and a public name are not."""
    name = host.strip().strip("[]").lower()
    if name in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        pass
    try:
        addresses = {info[4][0] for info in socket.getaddrinfo(name, None)}
    except OSError:
        return False
    return bool(addresses) and all(
        ipaddress.ip_address(a.split("%", 1)[0]).is_loopback for a in addresses
    )


def _host_name(host: str) -> str:
    host = host.strip().lower()
    if host.startswith("["):  # [::1]:8000
        end = host.find("]")
        return host[1:end] if end > 0 else ""
    if host.count(":") == 1:
        host = host.split(":", 1)[0]
    return host.rstrip(".")
