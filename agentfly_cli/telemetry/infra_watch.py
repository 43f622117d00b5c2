"""A warning for steps whose chains failed for infrastructure reasons (the failure policy)."""

from __future__ import annotations

from collections.abc import Callable, Mapping

PREFIX = "infra/failures/"


class InfraFailureWatch:
    """Warns the first time a step counts infrastructure failures (``infra/failures/<cause>``),
    and again the first time they leave a step with nothing to train on."""

    def __init__(self, excluded: bool) -> None:
        self.excluded = excluded  # trainer.algorithm.exclude_infra_failures
        self.warned = False
        self.warned_empty = False

    def check(self, step: int, metrics: Mapping[str, float], warn: Callable[[str], None]) -> None:
        """Look at one step's metrics; call ``warn`` with what happened and what to do."""
        causes = {k[len(PREFIX) :]: int(v) for k, v in metrics.items() if k.startswith(PREFIX)}
        causes = {k: v for k, v in causes.items() if v}
        if not causes:
            return
        counts = ", ".join(f"{k}: {v}" for k, v in sorted(causes.items()))
        empty = self.excluded and metrics.get("train/trajectories") == 0.0
        if empty and not self.warned_empty:
            self.warned_empty = self.warned = True
            warn(
                f"step {step}: every chain was left out of training, {sum(causes.values())} "
                f"for infrastructure failures ({counts}); the step trained nothing. Look at "
                "the trajectories' error and reward_extras, and at the envs and the reward"
            )
        elif not self.warned:
            self.warned = True
            what = (
                "left out of their groups and the loss"
                if self.excluded
                else "trained on with the reward they got (exclude_infra_failures: false)"
            )
            warn(
                f"step {step}: {sum(causes.values())} chain(s) ended in infrastructure failures "
                f"({counts}), {what}; infra/failures/<cause> counts them every step"
            )
