"""A warning when the sampler's drift from the trainer jumps (``sync/sampler_kl_mean``)."""

from __future__ import annotations

import statistics
from collections.abc import Callable, Mapping

METRIC = "sync/sampler_kl_mean"
#: steps of history the running median looks at, and how many it needs first
WINDOW, MIN_HISTORY = 20, 3


class SamplerDriftWatch:
    """Warns once per jump: when ``sync/sampler_kl_mean`` goes over ``factor`` times its
    running median and over ``floor``; it warns again only after a step back under both."""

    def __init__(self, factor: float, floor: float) -> None:
        self.factor, self.floor = factor, floor
        self.history: list[float] = []
        self.jumping = False

    def check(self, step: int, metrics: Mapping[str, float], warn: Callable[[str], None]) -> None:
        """Look at one step's metrics; call ``warn`` when the drift jumped."""
        value = metrics.get(METRIC)
        if value is None:
            return
        median = statistics.median(self.history) if len(self.history) >= MIN_HISTORY else None
        jumped = median is not None and value > self.floor and value > self.factor * median
        if jumped and not self.jumping:
            warn(
                f"step {step}: {METRIC} jumped to {value:.4g} ({value / max(median, 1e-12):.1f}x "
                f"its running median {median:.4g}): the rollout backend samples from a "
                "distribution further from the trainer's (a failed or partial weight push, a "
                "stale cache, a dtype change); sync/probe_gap_mean and the trajectories tell more"
            )
        self.jumping = jumped
        self.history = [*self.history, value][-WINDOW:]
