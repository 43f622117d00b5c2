"""Env pools: the limits a pool runs under (:class:`PoolLimits`, declared once) and a run's
``envs.NAME`` section (:class:`EnvPoolSettings`: where the envs live, and any limit overridden).

A limit comes from, in order: the run's ``envs.NAME``, the env kind's spec (its ``pool_max``,
``warm_size``, ``start_timeout`` and ``idle_ttl``), then the default declared here.
"""

from __future__ import annotations

import typing
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, create_model

#: The limits an env kind's spec sets its own defaults for (``EnvSpec``).
SPEC_LIMITS = ("pool_max", "warm_size", "start_timeout", "idle_ttl")


class PoolLimits(BaseModel):
    """The limits one pool runs under: the spec's, overridden by the run's config."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    pool_max: int = Field(8, ge=1, description="most envs alive at once")
    warm_size: int = Field(0, ge=0, description="envs started before the run")
    start_timeout: float = Field(
        60.0, gt=0, allow_inf_nan=False, description="seconds to start one env"
    )
    idle_ttl: float | None = Field(
        600.0, gt=0, allow_inf_nan=False, description="close idle envs after (seconds)"
    )
    acquire_timeout: float = Field(
        120.0, gt=0, allow_inf_nan=False, description="most seconds to wait for an env"
    )
    reset_timeout: float = Field(
        60.0,
        gt=0,
        allow_inf_nan=False,
        description="seconds to reset an env (for a task or on return)",
    )
    health_timeout: float = Field(
        10.0, gt=0, allow_inf_nan=False, description="seconds for a returned env's health check"
    )
    close_timeout: float = Field(
        10.0, gt=0, allow_inf_nan=False, description="seconds to close an env; then it is killed"
    )
    lease_timeout: float | None = Field(
        None,
        gt=0,
        allow_inf_nan=False,
        description="most seconds one trajectory may hold an env; past it the env is taken "
        "back and replaced, and the holder's next call fails (default: no limit)",
    )

    @classmethod
    def from_spec(cls, spec: Any, **overrides: Any) -> PoolLimits:
        """The spec's limits (an :class:`~agentfly_cli.envs.base.EnvSpec`), then the given
        ``overrides`` that are not None."""
        values = {name: getattr(spec, name) for name in SPEC_LIMITS}
        given = {k: v for k, v in overrides.items() if v is not None}
        values.update(given)
        if "warm_size" not in given:  # a smaller cap than the spec's lowers its warm size too
            values["warm_size"] = min(values["warm_size"], values["pool_max"])
        if values["warm_size"] > values["pool_max"]:
            raise ValueError(
                f"env '{spec.name}': warm_size ({values['warm_size']}) exceeds pool_max "
                f"({values['pool_max']})"
            )
        return cls(**values)


class _EnvPlacement(BaseModel):
    """Where a run's envs of one name live (the limits are added from :class:`PoolLimits`)."""

    model_config = ConfigDict(extra="forbid")

    provider: Literal["local", "process", "ray"] = Field(
        "local", description="local: in this process; process: one child process each; ray: actors"
    )
    address: str | None = Field(
        None,
        description="use a pool server (agentfly env up) instead: its name, unix:///path or "
        "tcp://host:port",
    )
    token: str | None = Field(None, description="the server's token (tcp addresses only)")
    ray_address: str | None = Field(
        None, description="Ray cluster to join (provider: ray); default: a local instance"
    )
    options: dict[str, Any] = Field(
        default_factory=dict, description="keyword arguments of the env's factory"
    )

    def pool_limits(self, spec: Any) -> PoolLimits:
        """This section's limits (those set) over the spec's and the defaults."""
        return PoolLimits.from_spec(
            spec, **{name: getattr(self, name) for name in PoolLimits.model_fields}
        )


def _overridable(name: str) -> tuple[Any, Any]:
    """A :class:`PoolLimits` field as an optional override: same type and bounds, unset=None."""
    field = PoolLimits.model_fields[name]
    inner = [arg for arg in typing.get_args(field.annotation) if arg is not type(None)]
    base = inner[0] if inner else field.annotation
    description = field.description or ""
    if name in SPEC_LIMITS:
        description += "; unset: the env kind's"
    elif field.default is not None:
        description += f"; unset: {field.default:g}"
    typed = Annotated[(base, *field.metadata)] if field.metadata else base
    return typed | None, Field(None, description=description)


EnvPoolSettings = create_model(
    "EnvPoolSettings",
    __base__=_EnvPlacement,
    __doc__="How a run gets the envs of one name: where they live, and any pool limit "
    "overridden (an unset one comes from the env kind's spec, or the pool's default).",
    __module__=__name__,
    **{name: _overridable(name) for name in PoolLimits.model_fields},
)
