"""Asynchronous rollouts (``trainer.mode: async``): a producer keeps task groups rolling out
while the trainer trains on finished ones, under a staleness bound.

The producer plans batches of ``tasks_per_step`` tasks from the task plan, in order, and starts
one when the newest weights allow: a batch it would hand to step ``d`` (counting the groups
already kept and those still outstanding) starts once the rollout backend holds version
``d - 1 - max_staleness`` or newer (version: weight updates seen). With ``max_staleness: 0``
that is the sync loop: the next batch starts only after the weights of the last step arrive.

The trainer takes finished groups (all ``n`` chains of a task) in the order they finish, keeps a
group whose oldest sampled token is at most ``max_staleness`` versions old and drops (and
counts) an older one; the producer then plans more. A step's kept groups are ordered as they
were planned, so ``max_staleness: 0`` trains on exactly the sync loop's batch.

Every wait has a deadline (``trainer.timeouts.rollout_wait_s``); a failed rollout batch ends
the trainer's wait with that batch's error.
"""

from __future__ import annotations

import asyncio
import collections
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

from agentfly_cli.errors import UserError
from agentfly_cli.train.tasks.plan import Picked
from agentfly_cli.trajectory import Trajectory, episode_ends

#: (step, picked tasks, on_finish) -> every trajectory of the batch, ordered by task and sample
RunBatch = Callable[[int, Picked, Callable[[Trajectory], Any]], Awaitable[list[Trajectory]]]


def skipped_groups_note(count: int) -> str:
    """The warning of a sync run that resumes an async checkpoint with untrained groups."""
    return (
        f"the checkpoint holds {count} task groups an async run started and never trained "
        "on; this sync run skips them (resume with trainer.mode: async to roll them out)"
    )


class RolloutWaitTimeout(UserError):
    """No task group finished within ``trainer.timeouts.rollout_wait_s``."""


@dataclass
class TaskGroup:
    """The ``n`` chains of one task, finished."""

    order: int  # position in the producer's plan (batch-major, then task)
    position: int  # the task's position in the training tasks
    trajectories: list[Trajectory]

    @property
    def oldest_version(self) -> int | None:
        versions = [t.oldest_version for t in self.trajectories]
        known = [v for v in versions if v is not None]
        return min(known) if known else None


def chains_done(group: list[Trajectory]) -> int:
    """Finished chains among ``group``'s trajectories: each one, except that an agent episode
    (several segments, numbered in ``meta``) counts once, with its last segment."""
    return len(episode_ends(group))


@dataclass
class Taken:
    """What the trainer got for one step."""

    groups: list[TaskGroup]
    dropped: int  # groups older than the bound, thrown away while waiting
    staleness: list[int]  # of the kept groups (versions behind the trained weights)
    wait_s: float  # how long the trainer waited for them

    @property
    def trajectories(self) -> list[Trajectory]:
        return [t for g in self.groups for t in g.trajectories]

    def metrics(self) -> dict[str, float]:
        """``async/...``: staleness of the kept groups, dropped groups, the trainer's wait."""
        out = {"async/dropped_groups": float(self.dropped), "async/trainer_wait_s": self.wait_s}
        if self.staleness:
            out["async/staleness_mean"] = sum(self.staleness) / len(self.staleness)
            out["async/staleness_max"] = float(max(self.staleness))
            for value in sorted(set(self.staleness)):
                share = self.staleness.count(value) / len(self.staleness)
                out[f"async/staleness_{value}"] = share
        return out


class RolloutProducer:
    """Runs rollout batches ahead of the trainer; see the module docstring."""

    def __init__(
        self,
        run_batch: RunBatch,
        take_tasks: Callable[[], Picked],
        *,
        tasks_per_step: int,
        n: int,
        max_staleness: int,
        version: int = 0,
        kept: int = 0,
        wait_timeout_s: float | None = None,
    ) -> None:
        self._run_batch = run_batch
        self._take_tasks = take_tasks
        self.tasks_per_step = tasks_per_step
        self.n = n
        self.max_staleness = max_staleness
        self.version = version  # the rollout backend's weights
        self.kept = kept  # groups the trainer kept (those of earlier steps included)
        self.wait_timeout_s = wait_timeout_s
        self.batches = 0  # batches started
        self._planned = 0  # groups planned (their order numbers)
        self.outstanding = 0  # groups started and not yet taken by the trainer
        self.dropped = 0
        self._finished: collections.deque[TaskGroup] = collections.deque()
        self._changed = asyncio.Event()  # a group finished, the version moved or a batch failed
        self._error: BaseException | None = None
        self._tasks: set[asyncio.Task] = set()
        self._planner: asyncio.Task | None = None
        self._busy_since: float | None = None
        self._running_batches = 0
        self.busy_s = 0.0  # time with at least one batch rolling out
        self._pending: dict[int, dict[str, Any]] = {}  # order -> the task of a group not taken
        self._requeued: list[Picked] = []  # a checkpoint's pending groups, rolled out first

    # ---- the trainer's side -----------------------------------------------------------------
    def start(self) -> None:
        self._planner = asyncio.get_running_loop().create_task(
            self._plan(), name="agentfly-async-producer"
        )

    def set_version(self, version: int) -> None:
        """The rollout backend now holds ``version``: batches waiting for it may start."""
        self.version = version
        self._changed.set()

    async def take(self, count: int, on_keep: Callable[[], Any] | None = None) -> Taken:
        """``count`` finished groups within the staleness bound of the current version, in
        plan order; older ones are dropped on the way. ``on_keep`` is called per kept group."""
        started = progress = time.perf_counter()  # progress: the last group kept
        kept: list[TaskGroup] = []
        staleness: list[int] = []
        dropped = 0
        while len(kept) < count:
            if self._error is not None:
                raise self._error
            if not self._finished:
                await self._wait_for_change(count - len(kept), progress, dropped)
                continue
            group = self._finished.popleft()
            self.outstanding -= 1
            self._pending.pop(group.order, None)
            oldest = group.oldest_version
            behind = 0 if oldest is None else self.version - oldest
            if behind > self.max_staleness:
                dropped += 1
                self.dropped += 1
                self._changed.set()  # the plan is one group short: it may start more
                continue
            kept.append(group)
            staleness.append(behind)
            self.kept += 1
            progress = time.perf_counter()
            if on_keep is not None:
                on_keep()
        kept.sort(key=lambda g: g.order)
        return Taken(kept, dropped, staleness, time.perf_counter() - started)

    async def close(self) -> None:
        """Cancel the planner and every batch still rolling out, and wait for them."""
        tasks = [t for t in (self._planner, *self._tasks) if t is not None]
        for task in tasks:
            task.cancel()
        for task in tasks:
            try:
                await task
            except (asyncio.CancelledError, Exception):
                pass
        self._tasks.clear()

    def pending(self) -> list[dict[str, Any]]:
        """The tasks of the groups started and not yet taken (finished or still rolling out),
        in plan order: a checkpoint keeps them, and :meth:`requeue` rolls them out again."""
        return [self._pending[order] for order in sorted(self._pending)]

    def requeue(self, rows: list[Mapping[str, Any]]) -> None:
        """Roll these ``{"position", "task"}`` rows out first (a resumed run's pending groups),
        in batches of ``tasks_per_step``."""
        picked = [(int(row["position"]), row["task"]) for row in rows]
        size = self.tasks_per_step
        self._requeued.extend(picked[i : i + size] for i in range(0, len(picked), size))

    def live_line(self) -> str:
        """The producer's line of the live display, beside the trainer's phase."""
        finished = len(self._finished)
        return (
            f"producer: {self._running_batches} batches rolling out on weights "
            f"v{self.version} | {self.outstanding - finished} groups running, {finished} "
            f"finished | {self.dropped} dropped"
        )

    def metrics(self) -> dict[str, float]:
        """Producer gauges: outstanding groups, finished ones waiting, time so far with a
        batch rolling out."""
        busy = self.busy_s
        if self._busy_since is not None:
            busy += time.perf_counter() - self._busy_since
        return {
            "async/outstanding_groups": float(self.outstanding),
            "async/queued_groups": float(len(self._finished)),
            "async/producer_busy_s": busy,
        }

    # ---- the producer's side ----------------------------------------------------------------
    def _may_start(self) -> bool:
        """The next batch would go to step ``d``; it may start once version >= d - 1 - k."""
        destined = (self.kept + self.outstanding) // self.tasks_per_step + 1
        return self.version >= destined - 1 - self.max_staleness

    async def _plan(self) -> None:
        try:
            while True:
                while not self._may_start():
                    self._changed.clear()
                    await self._changed.wait()
                picked = self._requeued.pop(0) if self._requeued else self._take_tasks()
                if not picked:
                    return
                self.batches += 1
                batch = self.batches
                self.outstanding += len(picked)
                first_order, self._planned = self._planned, self._planned + len(picked)
                task = asyncio.get_running_loop().create_task(
                    self._roll_out(batch, first_order, picked), name=f"agentfly-async-batch-{batch}"
                )
                self._tasks.add(task)
                task.add_done_callback(self._tasks.discard)
                await asyncio.sleep(0)  # let the batch start before planning the next
        except asyncio.CancelledError:
            raise
        except BaseException as exc:  # the plan itself failed: the trainer must hear it
            self._fail(exc)
        finally:
            self._changed.set()  # a trainer waiting on an ended plan must look again

    async def _roll_out(self, batch: int, first_order: int, picked: Picked) -> None:
        position_of = {position: i for i, (position, _) in enumerate(picked)}
        for i, (position, row) in enumerate(picked):
            self._pending[first_order + i] = {"position": position, "task": dict(row)}
        chains: dict[int, list[Trajectory]] = collections.defaultdict(list)
        done: set[int] = set()

        def finish(position: int) -> None:
            group = chains[position]
            group.sort(key=lambda t: (t.sample_index, t.meta.get("segment", 0)))
            done.add(position)
            self._finished.append(TaskGroup(first_order + position_of[position], position, group))
            self._changed.set()

        def on_finish(trajectory: Trajectory) -> None:
            group = chains[trajectory.task_index]
            group.append(trajectory)
            if chains_done(group) == self.n:
                finish(trajectory.task_index)

        self._running(+1)
        try:
            await self._run_batch(batch, picked, on_finish)
            for position, _ in picked:  # an agent episode may give no trajectory at all
                if position not in done:
                    finish(position)
        except asyncio.CancelledError:
            raise
        except BaseException as exc:
            self._fail(exc)
        finally:
            self._running(-1)

    def _running(self, change: int) -> None:
        now = time.perf_counter()
        running = self._running_batches + change
        if running and self._busy_since is None:
            self._busy_since = now
        elif not running and self._busy_since is not None:
            self.busy_s += now - self._busy_since
            self._busy_since = None
        self._running_batches = running

    def _fail(self, exc: BaseException) -> None:
        if self._error is None:
            self._error = exc
        self._changed.set()

    async def _wait_for_change(self, missing: int, progress: float, dropped: int) -> None:
        """Wait for a finished group, the version or an error; past ``wait_timeout_s`` since
        ``progress`` (the last group kept, or the wait's start) a :class:`RolloutWaitTimeout`,
        even while groups keep finishing too old to keep (``dropped`` so far)."""
        self._changed.clear()
        if self._error is not None or self._finished:
            return
        if self._planner is not None and self._planner.done() and not self.outstanding:
            raise UserError(
                f"async training ran out of training tasks with {missing} groups still to "
                "train on this step; add tasks or lower trainer.steps"
            )
        left = None
        if self.wait_timeout_s is not None:
            left = max(0.0, self.wait_timeout_s - (time.perf_counter() - progress))
        try:
            await asyncio.wait_for(self._changed.wait(), left)
        except asyncio.TimeoutError:
            if dropped:
                raise RolloutWaitTimeout(
                    f"async training: no task group within trainer.max_staleness "
                    f"({self.max_staleness}) of weight version {self.version} finished within "
                    f"{self.wait_timeout_s:g} s (trainer.timeouts.rollout_wait_s); {dropped} "
                    "finished older and were dropped: the rollout backend's policy_version "
                    "does not follow the weight pushes, or groups take longer than the updates"
                ) from None
            raise RolloutWaitTimeout(
                f"async training: no task group finished within {self.wait_timeout_s:g} s "
                f"(trainer.timeouts.rollout_wait_s) with {self.outstanding} groups rolling out "
                f"at weight version {self.version}: the rollout backend, a tool or an env hung; "
                "check them (or raise the timeout)"
            ) from None
