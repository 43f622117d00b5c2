"""The counters and gauges of one env pool."""

from __future__ import annotations

from dataclasses import asdict, dataclass


@dataclass
class PoolStats:
    """Counters and gauges of one pool. After :meth:`EnvPool.close`, ``created == closed``."""

    in_use: int = 0
    idle: int = 0
    waiting: int = 0
    starting: int = 0
    created: int = 0  # start attempts
    started: int = 0  # successful starts
    failed: int = 0  # failed starts (errors and start timeouts) and failed task resets
    closed: int = 0  # envs torn down, whatever the reason
    acquired: int = 0
    released: int = 0  # returned healthy and reused
    restarts: int = 0  # returned unhealthy (or failing their reset): closed and replaced
    killed: int = 0  # their trajectory was cancelled or crashed
    reaped: int = 0  # idle longer than idle_ttl
    abandoned: int = 0  # still in use when the pool closed
    timeouts: int = 0  # acquires that gave up waiting
    expired: int = 0  # held past lease_timeout: taken back, killed and replaced

    def as_dict(self) -> dict[str, int]:
        return asdict(self)
