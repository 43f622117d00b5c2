"""The steps of ``trainer.mode: async``: the trainer's side of :mod:`.async_rollouts`.

Each step takes the producer's finished task groups within the staleness bound and hands
them to ``Trainer.train_on``, which runs the update in a worker thread (the event loop goes on
driving rollouts, tools and envs meanwhile) and pushes the new weights with a deadline. The
rollout backend then has its own copy of the weights (``Trainer`` does not share the model
object when ``max_staleness`` > 0), since the update would change them under a running forward
pass.
"""

from __future__ import annotations

import asyncio
from typing import Any

from agentfly_cli.train.steps.async_rollouts import Picked, RolloutProducer
from agentfly_cli.trajectory import Trajectory


class AsyncSteps:
    """Starts the producer for ``trainer``; :meth:`step` runs one training step."""

    def __init__(self, trainer: Any, resumed_pending: list[dict[str, Any]]) -> None:
        self.trainer = trainer
        settings = trainer.settings
        self.producer = RolloutProducer(
            self._run_batch,
            trainer.tasks.take,
            tasks_per_step=settings.tasks_per_step,
            n=trainer.engine.settings.n + trainer.advantage_fn.needs_greedy,  # remax: + greedy
            max_staleness=settings.max_staleness,
            version=trainer.start_step,
            kept=trainer.start_step * settings.tasks_per_step,
            wait_timeout_s=settings.timeouts.rollout_wait_s,
        )
        # a resumed run rolls its checkpoint's untrained groups out again, first
        self.producer.requeue(resumed_pending)
        self.producer.start()
        trainer.progress.companions.append(self.producer.live_line)

    async def step(self, step: int) -> dict[str, float]:
        from agentfly_cli.telemetry.metrics import StepTimer, rollout_metrics
        from agentfly_cli.train.steps.step_io import StepRollouts

        trainer, producer = self.trainer, self.producer
        timer = StepTimer()
        count = trainer.settings.tasks_per_step
        progress = trainer.progress
        progress.begin("waiting for rollouts", step=step, total=count, unit="groups")
        try:
            with timer.section("rollout"):  # the trainer's wait for finished groups
                taken = await producer.take(count, on_keep=progress.advance)
        finally:
            trainer.progress.end()
        trajectories = taken.trajectories
        metrics = rollout_metrics(trajectories)
        metrics.update(taken.metrics())
        rollouts = StepRollouts(
            step,
            trajectories,
            metrics,
            timer,
            update_in_thread=True,  # the event loop goes on driving the producer's rollouts
            late_metrics=producer.metrics,
        )
        return (await trainer.train_on(rollouts)).metrics

    def stepped(self, step: int) -> None:
        """The producer learns the new version (after the step's eval: with max_staleness 0 no
        rollout runs beside it, as in the sync loop)."""
        self.producer.set_version(step)

    def checkpoint_state(self) -> dict[str, Any]:
        """The tasks of the groups started and not yet trained on (the task stream has moved
        past them): a resumed run rolls them out again, with the resumed weights."""
        return {"async_pending": self.producer.pending()}

    async def close(self) -> None:
        companions = self.trainer.progress.companions
        if self.producer.live_line in companions:
            companions.remove(self.producer.live_line)
        await self.producer.close()

    async def _run_batch(self, batch: int, picked: Picked, on_finish) -> list[Trajectory]:
        """One producer batch; its tasks' positions run in contiguous stretches (a resumed
        run's pending groups need not be contiguous)."""
        trainer = self.trainer
        engine = trainer.engine
        if trainer.shared_model:  # max_staleness 0: no update runs beside the rollouts
            trainer.train.model.eval()
        stretches: list[Picked] = []
        for position, row in picked:
            if stretches and stretches[-1][-1][0] == position - 1:
                stretches[-1].append((position, row))
            else:
                stretches.append([(position, row)])
        runs = [
            engine.run(
                [row for _, row in stretch],
                batch_id=f"s{batch}",
                task_offset=stretch[0][0],
                on_finish=on_finish,
                greedy=trainer.advantage_fn.needs_greedy,
            )
            for stretch in stretches
        ]
        results = await asyncio.gather(*runs)
        return [t for result in results for t in result]
