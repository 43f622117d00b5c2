"""The env pool's errors (importable from ``agentfly_cli.envs.pool`` too)."""

from __future__ import annotations

from typing import NoReturn

from agentfly_cli.errors import UserError


class EnvPoolError(RuntimeError):
    """Base class of the pool's errors."""


class AcquireTimeout(EnvPoolError, TimeoutError):
    """No env became free within the acquire timeout."""


class EnvStartError(EnvPoolError):
    """An env failed to start (or to reset for its task)."""


class EnvConfigError(EnvStartError, UserError):
    """An env cannot start because of its configuration (a missing binary, a bad option):
    retrying will not help, so a rollout stops at once with this one-line error (exit 2)."""


class PoolClosed(EnvPoolError):
    """The pool was shut down."""


class LeaseExpired(EnvPoolError):
    """The lease was held past the pool's ``lease_timeout``; its env was taken back."""


def start_failure(name: str, start_timeout: float, exc: BaseException) -> BaseException:
    """The error an acquirer gets for an env that failed to start with ``exc``: a timeout or a
    crash becomes :class:`EnvStartError`, a configuration problem :class:`EnvConfigError`;
    anything else (a cancellation) is ``exc`` itself."""
    if isinstance(exc, TimeoutError):
        return EnvStartError(
            f"env '{name}' did not start within {start_timeout:g} s; "
            "raise envs.<name>.start_timeout or check the env"
        )
    if isinstance(exc, UserError):
        return EnvConfigError(f"env '{name}' cannot start: {exc}")
    if isinstance(exc, Exception):
        return EnvStartError(f"env '{name}' failed to start: {type(exc).__name__}: {exc}")
    return exc


def reset_failure(name: str, reset_timeout: float, exc: BaseException) -> BaseException:
    """The error an acquirer gets for an env whose reset for its task failed with ``exc``."""
    if isinstance(exc, TimeoutError):
        return EnvStartError(f"env '{name}' did not reset within {reset_timeout:g} s")
    if isinstance(exc, Exception):
        return EnvStartError(
            f"env '{name}' failed to reset for its task: {type(exc).__name__}: {exc}"
        )
    return exc


def raise_as(error: BaseException, cause: BaseException) -> NoReturn:
    """Raise ``error`` in place of ``cause``: ``cause`` itself is re-raised as it is; a
    timeout's traceback is dropped (its message says all), other causes are chained."""
    if error is cause:
        raise cause
    raise error from (None if isinstance(cause, TimeoutError) else cause)
