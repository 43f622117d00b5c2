"""The steps of ``trainer.mode: sync``: each step rolls out its own tasks with the current
weights, then trains on them (nothing runs beside the update)."""

from __future__ import annotations

from typing import Any

from agentfly_cli.trajectory import Trajectory


class SyncSteps:
    """Rolls out this rank's share of each step's tasks, then hands them to the trainer."""

    def __init__(self, trainer: Any) -> None:
        self.trainer = trainer

    async def step(self, step: int) -> dict[str, float]:
        from agentfly_cli.telemetry.metrics import StepTimer, rollout_metrics
        from agentfly_cli.train.steps.step_io import StepRollouts

        trainer = self.trainer
        timer = StepTimer()
        mine = trainer.tasks.take(trainer.train.rank, trainer.train.world_size)
        with timer.section("rollout"):
            trajectories = await self.rollout(step, mine)  # this rank's contiguous share
        rollouts = StepRollouts(step, trajectories, rollout_metrics(trajectories), timer)
        return (await trainer.train_on(rollouts)).metrics

    async def rollout(self, step: int, picked) -> list[Trajectory]:
        """The chains of ``picked`` (``(position, task)`` pairs), with the live progress."""
        trainer = self.trainer
        tasks = [task for _, task in picked]
        trainer.train.model.eval()
        offset = picked[0][0] if picked else 0
        engine, progress = trainer.engine, trainer.progress
        base = engine.sampled_tokens
        greedy = trainer.advantage_fn.needs_greedy  # remax: one greedy chain per task more
        progress.begin(
            "rollout",
            step=step,
            total=len(tasks) * (engine.settings.n + greedy),
            unit="chains",
            live_tokens=lambda: engine.sampled_tokens - base,
        )
        try:
            return await engine.run(
                tasks,
                batch_id=f"s{step}",
                task_offset=offset,
                on_finish=lambda _: progress.advance(),
                greedy=greedy,
            )
        finally:
            progress.end()

    def stepped(self, step: int) -> None:
        """Nothing waits on the version: the next step rolls out with the new weights."""

    def checkpoint_state(self) -> dict[str, Any]:
        """Nothing is in flight between steps."""
        return {}

    async def close(self) -> None:
        """Nothing runs in the background."""
