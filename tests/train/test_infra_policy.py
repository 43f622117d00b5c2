"""The failure policy's settings: exclusion by episode, min_group_size, metrics by cause."""

from __future__ import annotations

from agentfly_cli.settings.algorithm import AlgorithmSettings
from agentfly_cli.train.tensors.infra_filter import without_infra_failures
from agentfly_cli.train.tensors.step_batch import split_greedy
from agentfly_cli.trajectory import Trajectory

BACKEND = "RuntimeError: backend died"


def chain(group: str, reward: float, error: str | None = None, episode=None, **meta):
    t = Trajectory(group_id=group, reward=reward, finish_reason="abort" if error else "answer")
    t.error = error
    t.append("assistant", [1, 2], sampled=True)
    if episode is not None:
        t.meta["episode"] = episode
    t.meta.update(meta)
    return t


def test_a_failed_segment_takes_its_whole_episode_and_episodes_count_once():
    ok = [chain("g", 1.0, episode="a"), chain("g", 1.0, episode="a")]
    failed = [chain("g", 0.0, episode="b"), chain("g", 0.0, BACKEND, episode="b")]
    other = chain("g", 0.0, episode="c")
    metrics: dict[str, float] = {}
    kept = without_infra_failures([*ok, *failed, other], AlgorithmSettings(), metrics)
    assert kept == [*ok, other]
    assert metrics["infra/failures/backend"] == 1.0  # one episode, not two segments
    assert metrics["infra/dropped_groups"] == 0.0
    # two segments of one episode are one chain: the group is left too small
    metrics = {}
    assert without_infra_failures([*ok, *failed], AlgorithmSettings(), metrics) == []
    assert metrics["infra/dropped_groups"] == 1.0


def test_only_groups_that_lost_chains_are_dropped_and_exclusion_can_be_off():
    lone = chain("solo", 1.0)  # a group of one (n: 1) that lost nothing stays
    pair = [chain("p", 1.0), chain("p", 0.0, "EnvStartError: no sandbox")]
    metrics: dict[str, float] = {}
    assert without_infra_failures([lone, *pair], AlgorithmSettings(), metrics) == [lone]
    assert metrics["infra/failures/env_start"] == 1.0 and metrics["infra/dropped_groups"] == 1.0
    off = AlgorithmSettings(exclude_infra_failures=False)
    metrics = {}
    assert without_infra_failures([lone, *pair], off, metrics) == [lone, *pair]
    assert metrics["infra/failures/env_start"] == 1.0 and metrics["infra/dropped_groups"] == 0.0


def test_a_greedy_chain_that_failed_gives_no_remax_baseline():
    greedy = chain("g", 0.0, BACKEND, greedy=True)
    sampled = chain("g", 1.0)
    assert split_greedy([sampled, greedy], exclude_infra=True) == ([sampled], {})
    assert split_greedy([sampled, greedy]) == ([sampled], {"g": 0.0})
