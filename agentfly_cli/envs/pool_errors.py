"""The env pool's errors (importable from ``agentfly_cli.envs.pool`` too)."""

from __future__ import annotations

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
