"""The ``python`` env's options (``envs.python.options``), checked before anything starts.

One pydantic model serves the factory and the run's up-front check (the env spec's
``validate_options``), so a bad value is a one-line error naming the field before any model
loads.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from agentfly_cli.errors import UserError

NUMBERS = (
    "cpu_seconds wall_seconds memory_mb max_processes max_output_chars disk_mb "
    "cpu_seconds_total cpus start_attempts"
).split()
MIN_MEMORY_MB = 32  # Debian's python3 and the REPL need about 24 MB of address space to start


class PythonEnvOptions(BaseModel):
    """Limits and choices of one ``python`` sandbox (see ``docs/python-sandbox.md``)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    cpu_seconds: float = Field(10.0, gt=0, allow_inf_nan=False, description="CPU time per cell")
    wall_seconds: float = Field(
        30.0, gt=0, allow_inf_nan=False, description="wall-clock time per cell"
    )
    memory_mb: int = Field(
        1024, ge=MIN_MEMORY_MB, description="memory of the sandbox (its processes and files)"
    )
    max_processes: int = Field(32, ge=1, description="processes and threads a sandbox may add")
    max_output_chars: int = Field(5000, ge=1, description="printed output kept per cell")
    disk_mb: int = Field(256, ge=1, description="room for files (/tmp and /dev/shm together)")
    cpu_seconds_total: float = Field(
        600.0, gt=0, allow_inf_nan=False, description="CPU budget of one interpreter process"
    )
    cpus: float = Field(
        1.0, gt=0, le=1024, allow_inf_nan=False, description="CPUs the sandbox may use at once"
    )
    sandbox: Literal["auto", "bwrap", "none"] = Field(
        "bwrap",
        description="bwrap: bubblewrap or an error (auto is the same); none: no sandbox, unsafe",
    )
    start_attempts: int = Field(
        3, ge=1, le=100, description="tries to start bubblewrap before the env fails to start"
    )
    python: str = Field("/usr/bin/python3", min_length=1, description="the interpreter")
    bwrap: str | None = Field(None, min_length=1, description="bubblewrap (default: on PATH)")

    @field_validator(*NUMBERS, mode="before")
    @classmethod
    def _not_a_bool(cls, value: Any) -> Any:
        if isinstance(value, bool):
            raise ValueError("must be a number, not true/false")
        return value

    @model_validator(mode="after")
    def _budget_above_a_cell(self) -> PythonEnvOptions:
        if self.cpu_seconds_total < self.cpu_seconds + 5:
            raise ValueError(
                f"cpu_seconds_total ({self.cpu_seconds_total:g}) must be at least cpu_seconds "
                f"+ 5 ({self.cpu_seconds + 5:g})"
            )
        return self


def parse_options(options: Mapping[str, Any]) -> PythonEnvOptions:
    """The options as a model; a bad one is a one-line :class:`UserError` naming the field."""
    try:
        return validate_options(options)
    except ValueError as exc:
        raise UserError(f"python env: {exc}") from None


def validate_options(options: Mapping[str, Any]) -> PythonEnvOptions:
    """The env spec's up-front check: the options, or a one-line ``ValueError``."""
    try:
        return PythonEnvOptions(**options)
    except ValidationError as exc:
        raise ValueError(describe(exc.errors(include_url=False)[0])) from None


def describe(error: Mapping[str, Any]) -> str:
    """One pydantic error as ``field: problem (got value)``, with the accepted names."""
    field = ".".join(str(part) for part in error.get("loc", ()))
    message = str(error.get("msg", "invalid")).removeprefix("Value error, ")
    if error.get("type") == "extra_forbidden":
        known = ", ".join(PythonEnvOptions.model_fields)
        return f"unknown option '{field}'; the python env takes: {known}"
    if not field:  # a check across fields
        return message
    return f"{field}: {message} (got {error.get('input')!r})"
