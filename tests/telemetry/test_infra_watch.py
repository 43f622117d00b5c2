"""The warning for infrastructure failures: once, and once more when a step trained nothing."""

from __future__ import annotations

from agentfly_cli.telemetry.infra_watch import InfraFailureWatch


def test_warns_once_and_again_when_a_step_trains_nothing():
    warnings: list[str] = []
    watch = InfraFailureWatch(excluded=True)
    quiet = {"infra/failures/env_died": 0.0, "train/trajectories": 8.0}
    watch.check(1, quiet, warnings.append)
    assert warnings == []
    some = {"infra/failures/env_died": 2.0, "infra/failures/backend": 1.0, "train/trajectories": 5}
    watch.check(2, some, warnings.append)
    watch.check(3, some, warnings.append)
    assert len(warnings) == 1
    assert "step 2: 3 chain(s)" in warnings[0] and "backend: 1, env_died: 2" in warnings[0]
    assert "left out of their groups" in warnings[0]
    empty = {"infra/failures/reward_error": 4.0, "train/trajectories": 0.0}
    watch.check(4, empty, warnings.append)
    watch.check(5, empty, warnings.append)
    assert len(warnings) == 2 and "step 4: every chain was left out" in warnings[1]


def test_with_exclusion_off_it_says_they_trained():
    warnings: list[str] = []
    InfraFailureWatch(excluded=False).check(
        1, {"infra/failures/gateway": 1.0, "train/trajectories": 0.0}, warnings.append
    )
    assert len(warnings) == 1 and "exclude_infra_failures: false" in warnings[0]
