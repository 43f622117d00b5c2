"""What a failed env start or reset means to the acquirer (agentfly_cli.envs.pool_errors)."""

from __future__ import annotations

import asyncio

import pytest

from agentfly_cli.envs.pool_errors import (
    EnvConfigError,
    EnvStartError,
    raise_as,
    reset_failure,
    start_failure,
)
from agentfly_cli.errors import UserError


def test_a_start_timeout_names_the_setting_to_raise():
    error = start_failure("chess", 2.5, TimeoutError())
    assert type(error) is EnvStartError
    assert str(error) == (
        "env 'chess' did not start within 2.5 s; raise envs.<name>.start_timeout or check the env"
    )


def test_a_configuration_problem_is_a_user_error_and_a_crash_is_not():
    config = start_failure("chess", 30, UserError("Stockfish not found"))
    assert isinstance(config, EnvConfigError) and isinstance(config, UserError)
    assert str(config) == "env 'chess' cannot start: Stockfish not found"
    crash = start_failure("chess", 30, OSError("broken pipe"))
    assert type(crash) is EnvStartError and not isinstance(crash, UserError)
    assert str(crash) == "env 'chess' failed to start: OSError: broken pipe"


def test_reset_failures():
    assert str(reset_failure("tw", 5, TimeoutError())) == "env 'tw' did not reset within 5 s"
    error = reset_failure("tw", 5, KeyError("game"))
    assert str(error) == "env 'tw' failed to reset for its task: KeyError: 'game'"


def test_a_cancellation_stays_itself():
    cancelled = asyncio.CancelledError()
    assert start_failure("x", 1, cancelled) is cancelled
    assert reset_failure("x", 1, cancelled) is cancelled
    with pytest.raises(asyncio.CancelledError) as raised:
        raise_as(cancelled, cancelled)
    assert raised.value is cancelled


def test_raise_as_chains_a_crash_and_drops_a_timeouts_traceback():
    crash = OSError("boom")
    with pytest.raises(EnvStartError) as raised:
        raise_as(start_failure("x", 1, crash), crash)
    assert raised.value.__cause__ is crash
    timeout = TimeoutError()
    with pytest.raises(EnvStartError) as raised:
        raise_as(start_failure("x", 1, timeout), timeout)
    assert raised.value.__cause__ is None and raised.value.__suppress_context__
