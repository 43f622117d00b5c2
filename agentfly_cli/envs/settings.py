"""The ``envs:`` section of a run config: where each env lives and how its pool is sized."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from agentfly_cli.envs.base import EnvSpec
from agentfly_cli.envs.pool import PoolSettings


class EnvPoolConfig(BaseModel):
    """How a run gets the envs of one name. Unset limits come from the env's spec."""

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
    pool_max: int | None = Field(None, ge=1, description="most envs alive at once")
    warm_size: int | None = Field(None, ge=0, description="envs started before the run")
    start_timeout: float | None = Field(
        None, gt=0, allow_inf_nan=False, description="seconds to start one env"
    )
    idle_ttl: float | None = Field(
        None, gt=0, allow_inf_nan=False, description="close idle envs after (seconds)"
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
    options: dict[str, Any] = Field(
        default_factory=dict, description="keyword arguments of the env's factory"
    )

    def pool_settings(self, spec: EnvSpec) -> PoolSettings:
        return PoolSettings.from_spec(
            spec,
            pool_max=self.pool_max,
            warm_size=self.warm_size,
            start_timeout=self.start_timeout,
            idle_ttl=self.idle_ttl,
            acquire_timeout=self.acquire_timeout,
            reset_timeout=self.reset_timeout,
            health_timeout=self.health_timeout,
            close_timeout=self.close_timeout,
            lease_timeout=self.lease_timeout,
        )
