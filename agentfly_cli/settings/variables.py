"""Every ``AGENTFLY_*`` environment variable: declared here, read here, validated when used.

``VARIABLES`` is the table that docs/config.md is generated from (a test keeps the source, this
table and the page in step). A bad value is a :class:`UserError` naming the variable and what
it accepts, never a crash at import time.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from pathlib import Path

from agentfly_cli.errors import UserError

NO_LIMIT = ("none", "off", "inf")


@dataclass(frozen=True)
class Variable:
    """One environment variable: its default (as words) and what it does."""

    default: str
    description: str
    internal: bool = False  # set by agentfly itself, not by users


VARIABLES: dict[str, Variable] = {
    "AGENTFLY_CACHE": Variable(
        "~/.cache/agentfly", "where built models, unpacked games and pool-server state are kept"
    ),
    "AGENTFLY_STATE_DIR": Variable(
        "$AGENTFLY_CACHE/pools", "where pool servers (`agentfly env up`) record themselves"
    ),
    "AGENTFLY_DEBUG": Variable(
        "off", "1: show tracebacks of errors, and MCP servers' stderr (0, false, no: off)"
    ),
    "AGENTFLY_LOAD_PLUGINS": Variable(
        "all", "comma-separated distributions whose plugins load (the others are skipped)"
    ),
    "AGENTFLY_TOOL_TIMEOUT": Variable("30", "seconds per tool call ('none': no limit)"),
    "AGENTFLY_REWARD_TIMEOUT": Variable("60", "seconds per reward ('none': no limit)"),
    "AGENTFLY_MAX_OBSERVATION_CHARS": Variable(
        "8192", "characters of a tool's observation kept in the chat (the rest is cut)"
    ),
    "AGENTFLY_WORKER_THREADS": Variable("64", "threads that run sync tools and rewards"),
    "AGENTFLY_MALLOC_TUNING": Variable(
        "on",
        "glibc: keep freed tensor memory for reuse instead of returning it to the OS "
        "(0, false, no: off; about 2x faster CPU decoding, at a higher resident size: "
        "the demo's peak 3.5 GiB, 2.9 GiB off, 1.3x its time)",
    ),
    "AGENTFLY_SERVE_API_KEY": Variable(
        "none",
        "the API key `agentfly serve` requires on every route (as --api-key; needed to listen "
        "beyond loopback)",
    ),
    "AGENTFLY_VERIFIERS_VENV_DIR": Variable(
        "the current folder",
        "the folder holding the verifiers bridge's venvs (.venv-verifiers-0.3, -0.4; make "
        "install-verifiers)",
    ),
    "AGENTFLY_VERIFIERS_PATH": Variable(
        "none", "extra import folders (os.pathsep-separated) for verifiers environments"
    ),
    "AGENTFLY_SANDBOX": Variable(
        "-", "marks processes of the Python sandbox (set by agentfly, not by users)", internal=True
    ),
}


def _raw(name: str) -> str | None:
    assert name in VARIABLES, f"{name} is not declared in agentfly_cli/settings/variables.py"
    return os.environ.get(name)


def _positive_number(name: str, default: float | None, *, integer: bool = False):
    raw = _raw(name)
    if raw is None or not raw.strip():
        return default
    text = raw.strip().lower()
    if text in NO_LIMIT and not integer:
        return None
    try:
        value = int(text) if integer else float(text)
    except ValueError:
        value = None
    if value is None or not math.isfinite(value) or value <= 0:
        kind = "a positive integer" if integer else "a positive number of seconds or 'none'"
        raise UserError(f"{name} must be {kind}, got {raw!r}")
    return value


def tool_timeout() -> float | None:
    """Default seconds per tool call (``AGENTFLY_TOOL_TIMEOUT``, default 30; 'none': no limit)."""
    return _positive_number("AGENTFLY_TOOL_TIMEOUT", 30.0)


def reward_timeout() -> float | None:
    """Default seconds per reward (``AGENTFLY_REWARD_TIMEOUT``, default 60; 'none': no limit)."""
    return _positive_number("AGENTFLY_REWARD_TIMEOUT", 60.0)


def max_observation_chars() -> int:
    """Default observation limit (``AGENTFLY_MAX_OBSERVATION_CHARS``, default 8192)."""
    return _positive_number("AGENTFLY_MAX_OBSERVATION_CHARS", 8192, integer=True)


def worker_threads() -> int:
    """Threads that run sync tools and rewards (``AGENTFLY_WORKER_THREADS``, default 64)."""
    return _positive_number("AGENTFLY_WORKER_THREADS", 64, integer=True)


def verifiers_venv_dir() -> Path:
    """Where the verifiers venvs are (``AGENTFLY_VERIFIERS_VENV_DIR``, else the current folder)."""
    return Path(_raw("AGENTFLY_VERIFIERS_VENV_DIR") or Path.cwd())


def verifiers_path() -> str | None:
    """Extra import folders for verifiers environments (``AGENTFLY_VERIFIERS_PATH``)."""
    return _raw("AGENTFLY_VERIFIERS_PATH") or None


def cache_dir() -> Path:
    """The folder where agentfly keeps what it builds (``AGENTFLY_CACHE``)."""
    return Path(
        _raw("AGENTFLY_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "agentfly")
    )


def state_dir() -> Path:
    """The pool servers' state folder (``AGENTFLY_STATE_DIR``, else ``pools/`` in the cache)."""
    root = _raw("AGENTFLY_STATE_DIR")
    return Path(root) if root else cache_dir() / "pools"


def _switch(name: str, *, default: bool) -> bool:
    """An on/off variable: unset or empty gives ``default``; 0, false and no are off."""
    text = (_raw(name) or "").strip().lower()
    return default if not text else text not in ("0", "false", "no")


def debug_enabled() -> bool:
    """``AGENTFLY_DEBUG`` is set to something other than empty, 0, false or no."""
    return _switch("AGENTFLY_DEBUG", default=False)


def malloc_tuning_enabled() -> bool:
    """``AGENTFLY_MALLOC_TUNING`` is unset or something other than 0, false or no."""
    return _switch("AGENTFLY_MALLOC_TUNING", default=True)


def serve_api_key() -> str | None:
    """The raw ``AGENTFLY_SERVE_API_KEY`` (None: unset; checked by ``agentfly serve``)."""
    return _raw("AGENTFLY_SERVE_API_KEY")


def plugin_selection() -> str | None:
    """The raw ``AGENTFLY_LOAD_PLUGINS`` (None: load every plugin)."""
    return _raw("AGENTFLY_LOAD_PLUGINS")


def check_environment() -> None:
    """Validate every setting at once (the CLI does this at start-up)."""
    tool_timeout()
    reward_timeout()
    max_observation_chars()
    worker_threads()
