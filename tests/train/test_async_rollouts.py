"""The async producer's bookkeeping with a fake rollout: the start gate, staleness dropping,
plan order, pending groups, errors and timeouts (no model; milliseconds)."""

from __future__ import annotations

import asyncio
import time

import pytest

from agentfly_cli.train.steps.async_rollouts import RolloutProducer, RolloutWaitTimeout
from agentfly_cli.trajectory import Trajectory


def chain(position: int, sample: int, versions: list[int]) -> Trajectory:
    """A finished chain whose assistant turns were sampled by ``versions``."""
    trajectory = Trajectory(task_index=position, sample_index=sample, reward=1.0)
    trajectory.append("prompt", [1, 2], sampled=False)
    for version in versions:
        trajectory.append("assistant", [3], sampled=True, policy_version=version)
    return trajectory


class FakeRollout:
    """Rolls a batch out at the producer's current version; ``delay(position)`` seconds a
    group; records each batch's start version."""

    def __init__(self, n: int = 2, delay=lambda position: 0.0) -> None:
        self.n, self.delay = n, delay
        self.producer: RolloutProducer | None = None
        self.started: list[tuple[int, list[int], int]] = []  # (batch, positions, version)

    async def __call__(self, batch, picked, on_finish):
        version = self.producer.version
        self.started.append((batch, [p for p, _ in picked], version))

        async def group(position):
            await asyncio.sleep(self.delay(position))
            out = [chain(position, s, [version]) for s in range(self.n)]
            for trajectory in out:
                on_finish(trajectory)
            return out

        results = await asyncio.gather(*(group(p) for p, _ in picked))
        return [t for r in results for t in r]


def tasks(per_batch: int):
    position = 0

    def take():
        nonlocal position
        picked = [(position + i, {"q": position + i}) for i in range(per_batch)]
        position += per_batch
        return picked

    return take


def producer_for(rollout: FakeRollout, *, k: int, per_step: int = 2, **options) -> RolloutProducer:
    producer = RolloutProducer(
        rollout, tasks(per_step), tasks_per_step=per_step, n=rollout.n, max_staleness=k, **options
    )
    rollout.producer = producer
    return producer


async def train_steps(producer: RolloutProducer, steps: int, per_step: int = 2, train_s=0.01):
    """The trainer's side: take, 'train', publish the next version; the taken batches."""
    producer.start()
    taken = []
    try:
        for step in range(1, steps + 1):
            taken.append(await producer.take(per_step))
            await asyncio.sleep(train_s)
            producer.set_version(step)
    finally:
        await producer.close()
    return taken


def test_staleness_zero_is_the_sync_loop():
    rollout = FakeRollout()
    taken = asyncio.run(train_steps(producer_for(rollout, k=0), steps=3))
    # batch s starts only on the weights of step s - 1, and step s trains on batch s
    assert [(b, v) for b, _, v in rollout.started[:3]] == [(1, 0), (2, 1), (3, 2)]
    assert [[g.position for g in t.groups] for t in taken] == [[0, 1], [2, 3], [4, 5]]
    assert all(t.staleness == [0, 0] and t.dropped == 0 for t in taken)


def test_one_step_of_staleness_rolls_the_next_batch_out_during_the_update():
    rollout = FakeRollout()
    taken = asyncio.run(train_steps(producer_for(rollout, k=1), steps=3, train_s=0.05))
    # batch 2 starts on version 0, while step 1 trains; never two versions ahead
    assert [(b, v) for b, _, v in rollout.started[:3]] == [(1, 0), (2, 0), (3, 1)]
    assert [t.staleness for t in taken] == [[0, 0], [1, 1], [1, 1]]
    metrics = taken[1].metrics()
    assert metrics["async/staleness_mean"] == 1.0 and metrics["async/staleness_1"] == 1.0


def test_a_group_older_than_the_bound_is_dropped_counted_and_replaced():
    # task 1 takes 0.5 s: with k=1 and 0.2 s updates it finishes two updates later, too old
    rollout = FakeRollout(delay=lambda position: 0.5 if position == 1 else 0.0)
    producer = producer_for(rollout, k=1)
    taken = asyncio.run(train_steps(producer, steps=5, train_s=0.2))
    trained = [g.position for t in taken for g in t.groups]
    assert 1 not in trained
    assert sum(t.dropped for t in taken) == producer.dropped == 1
    assert all(len(t.groups) == 2 for t in taken)  # each step still got its groups
    assert all(max(t.staleness) <= 1 for t in taken)
    # kept groups are in plan order within a step
    for t in taken:
        assert [g.order for g in t.groups] == sorted(g.order for g in t.groups)


def test_pending_lists_the_untrained_groups_and_requeue_rolls_them_out_first():
    async def scenario():
        rollout = FakeRollout()
        producer = producer_for(rollout, k=1)
        producer.start()
        await producer.take(2)  # step 1; batch 2 is now started on version 0
        await asyncio.sleep(0.02)
        pending = producer.pending()
        await producer.close()

        again = FakeRollout()
        resumed = producer_for(again, k=1, version=1, kept=2)
        resumed.requeue(pending)
        resumed.start()
        first = await resumed.take(2)
        await resumed.close()
        return pending, first, again

    pending, first, again = asyncio.run(scenario())
    assert [row["position"] for row in pending] == [2, 3]
    assert pending[0]["task"] == {"q": 2}
    assert again.started[0][1] == [2, 3]  # the pending groups roll out before new tasks
    assert [g.position for g in first.groups] == [2, 3]


async def first_take(run_batch, wait_timeout_s: float):
    """Start a producer over ``run_batch`` and take one step's groups; closed either way."""
    producer = RolloutProducer(
        run_batch, tasks(2), tasks_per_step=2, n=2, max_staleness=1, wait_timeout_s=wait_timeout_s
    )
    producer.start()
    try:
        return await producer.take(2)
    finally:
        await producer.close()


def test_a_failed_batch_ends_the_trainers_wait_with_its_error():
    async def failing(batch, picked, on_finish):
        raise RuntimeError("the env server died")

    with pytest.raises(RuntimeError, match="the env server died"):
        asyncio.run(first_take(failing, wait_timeout_s=5))


def test_a_rollout_that_never_finishes_is_a_timeout_naming_what_hung():
    async def hanging(batch, picked, on_finish):
        await asyncio.sleep(3600)

    with pytest.raises(RolloutWaitTimeout, match="no task group finished within 0.2 s") as info:
        asyncio.run(first_take(hanging, wait_timeout_s=0.2))
    assert "rollout_wait_s" in str(info.value) and "\n" not in str(info.value)


def test_groups_that_are_always_too_old_end_in_a_timeout_not_an_endless_replacement():
    """A backend whose stamps never follow the weight pushes makes every group stale: the
    producer drops and replaces them without end, so the wait is bounded by the time since
    the last kept group, not since the last finished one."""

    async def stuck_on_version_0(batch, picked, on_finish):
        await asyncio.sleep(0.01)
        out = [chain(position, s, [0]) for position, _ in picked for s in range(2)]
        for trajectory in out:
            on_finish(trajectory)
        return out

    async def scenario():
        producer = RolloutProducer(
            stuck_on_version_0, tasks(2), tasks_per_step=2, n=2, max_staleness=1,
            wait_timeout_s=0.5,
        )  # fmt: skip
        producer.start()
        try:
            await producer.take(2)  # step 1: version 0 is fresh
            producer.set_version(2)  # two updates later, every new group is too old
            return await asyncio.wait_for(producer.take(2), 30)
        finally:
            await producer.close()

    started = time.perf_counter()
    with pytest.raises(RolloutWaitTimeout, match="within trainer.max_staleness") as info:
        asyncio.run(scenario())
    assert time.perf_counter() - started < 10
    message = str(info.value)
    assert "dropped" in message and "max_staleness" in message and "\n" not in message


def test_running_out_of_tasks_is_a_clear_error_not_a_hang():
    def two_tasks_then_none():
        calls = iter([[(0, {"q": 0}), (1, {"q": 1})]])
        return lambda: next(calls, [])

    async def scenario():
        rollout = FakeRollout()
        producer = RolloutProducer(
            rollout, two_tasks_then_none(), tasks_per_step=2, n=2, max_staleness=0,
            wait_timeout_s=5,
        )  # fmt: skip
        rollout.producer = producer
        producer.start()
        try:
            await producer.take(2)
            producer.set_version(1)
            await producer.take(2)
        finally:
            await producer.close()

    with pytest.raises(Exception, match="ran out of training tasks"):
        asyncio.run(scenario())


def test_agent_episodes_count_once_and_a_group_short_of_chains_still_arrives():
    """An agent episode gives several segments (numbered in meta) and counts as one chain; an
    episode that gave no trajectory leaves its group short, delivered when the batch ends."""

    async def run_batch(batch, picked, on_finish):
        out = []
        for position, _ in picked:
            samples = range(2) if position % 2 == 0 else range(1)  # odd tasks: one episode lost
            for sample in samples:
                for segment in range(3):
                    trajectory = chain(position, sample, [0])
                    trajectory.meta.update(segment=segment, segments=3)
                    out.append(trajectory)
                    on_finish(trajectory)
                    await asyncio.sleep(0.02)  # segments may arrive apart
        return out

    async def one_step():
        producer = RolloutProducer(
            run_batch, tasks(2), tasks_per_step=2, n=2, max_staleness=0, wait_timeout_s=5
        )
        producer.start()
        try:
            taken = await producer.take(2)
            return taken, {g.position: len(g.trajectories) for g in taken.groups}
        finally:
            await producer.close()

    taken, sizes = asyncio.run(one_step())  # sizes as the trainer got them
    assert sizes == {0: 6, 1: 3}  # 2 episodes x 3 segments; 1 episode x 3 segments
    [even] = [g for g in taken.groups if g.position == 0]
    assert [(t.sample_index, t.meta["segment"]) for t in even.trajectories] == [
        (s, k) for s in range(2) for k in range(3)
    ]
