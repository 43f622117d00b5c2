"""The training loop: tasks -> rollouts -> rewards -> advantages -> minibatch epochs ->
weight sync -> metrics -> checkpoint, once per step.

The rollout engine and the trainer share one event loop. With the ``torch`` train backend and
the ``hf`` rollout backend on one device, both use the very same model object: syncing the
weights costs nothing (the backend only drops its stored KV). Other pairs push the weights
through ``Backend.update_weights``.
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agentfly_cli.algorithms import interfaces as alg
from agentfly_cli.chat.doctor import training_notes
from agentfly_cli.errors import UserError
from agentfly_cli.rollout.outcome import check_some_chain_ran
from agentfly_cli.settings.run import RunSettings
from agentfly_cli.telemetry.infra_watch import InfraFailureWatch
from agentfly_cli.telemetry.signal_watch import FlatRewardWatch
from agentfly_cli.telemetry.step_progress import StepProgress
from agentfly_cli.telemetry.sync_watch import SamplerDriftWatch
from agentfly_cli.train.checkpoint import CheckpointManager
from agentfly_cli.train.plan import RunPlan, plan_run
from agentfly_cli.train.run_checks import (
    check_agent,
    check_group_size,
    check_reward,
    check_world_size,
)
from agentfly_cli.train.steps.async_rollouts import skipped_groups_note
from agentfly_cli.train.steps.source import StepSource
from agentfly_cli.train.steps.step_io import StepResult, StepRollouts
from agentfly_cli.train.sync_check import SyncTripwire
from agentfly_cli.train.tasks.plan import TaskPlan
from agentfly_cli.train.tasks.run_tasks import RunTasks
from agentfly_cli.train.tensors.logprobs import auto_chunk_size, logprob_temperature, split_model
from agentfly_cli.train.tensors.step_batch import StepBatch
from agentfly_cli.train.update import PolicyUpdate
from agentfly_cli.train_backends import distributed
from agentfly_cli.train_backends.weight_sync import (
    SharedModel,
    build_rollout_backend,
    choose_weight_sync,
)
from agentfly_cli.trajectory import Trajectory

if TYPE_CHECKING:
    from agentfly_cli.rollout.engine_protocol import Engine


async def _call(fn, *args):
    """``fn(*args)`` in the event loop's own thread (``asyncio.to_thread``'s signature)."""
    return fn(*args)


@dataclass
class TrainResult:
    """What a finished run leaves behind."""

    run_dir: Path
    steps: int
    history: list[dict[str, float]] = field(default_factory=list)
    is_main: bool = True  # rank 0 (the one that reports)
    evals: list[dict[str, float]] = field(default_factory=list)  # {"updates", "eval/..."}


class Trainer:
    """Runs ``config.trainer.steps`` RL steps on ``config``'s recipe; see :meth:`fit`."""

    def __init__(
        self,
        config: RunSettings,
        *,
        run_dir: str | Path,
        resume: bool = False,
        console: bool | None = None,
        console_file: Any = None,
        host: Any = None,
        tools: list | None = None,
        reward: Any = None,
        plan: RunPlan | None = None,
        tasks: RunTasks | None = None,
    ) -> None:
        self.plan = plan or plan_run(config, run_dir)  # derived values; ``config`` stays as given
        self.config = self.plan.run_settings(config)  # the settings the run runs with
        self.run_tasks = tasks  # the run's data, read once (None: read in _setup)
        self.host = host  # where components are looked up; None: the installed plugins
        self.components = {"tools": tools, "reward": reward}  # objects instead of names
        self.settings = config.trainer
        self.algo = config.trainer.algorithm
        self.run_dir = Path(run_dir)
        self.resume = resume
        self.console = self.settings.telemetry.console if console is None else console
        self.console_file = console_file
        self.advantage_fn = alg.get_advantage_estimator(self.algo.advantage, host)
        self.policy_loss_fn = alg.get_policy_loss(self.algo.policy_loss, host)
        self.signal_watch = FlatRewardWatch(
            self.algo.advantage,
            self.run_dir,
            # a teacher's term trains on flat rewards too
            group_relative=self.advantage_fn.group_relative and not self.settings.distill.enabled,
        )
        self.infra_watch = InfraFailureWatch(self.algo.exclude_infra_failures)
        check = config.trainer.sync_check
        self.drift_watch = SamplerDriftWatch(check.drift_factor, check.drift_floor)
        self.progress = StepProgress()  # the phase of the running step, for the live display

    # ---- setup -------------------------------------------------------------------------------
    def _setup(self) -> None:
        from agentfly_cli.rollout.from_settings import assemble, resolve_run
        from agentfly_cli.rollout.tasks import RowRules
        from agentfly_cli.runtime.malloc import return_freed_memory
        from agentfly_cli.train_backends import build_train_backend

        return_freed_memory()

        settings = self.settings
        backend_settings = self.plan.backend_settings(settings.backend)
        self.share_prefix = settings.share_prefix

        check_group_size(self.advantage_fn, self.algo, self.config.rollout.n)
        check_reward(self.config, self.components["reward"])
        check_agent(self.config)

        if self.host is None:
            from agentfly_cli.plugin_host.plugins import get_plugin_host

            self.host = get_plugin_host()
        # an unknown train backend fails here, before anything loads
        self.host.components.train_backends.get(backend_settings.name)
        data = self.run_tasks = self.run_tasks or RunTasks.load(
            self.config.data, RowRules.of(self.config)
        )
        resolved = resolve_run(self.config, self.host, **data.as_given(), **self.components)
        self.model_path = resolved.model_path
        teacher = None  # on-policy distillation: its tokenizer is checked before weights load
        if settings.distill.enabled:
            from agentfly_cli.train.teacher import check_teacher

            loader = resolved.backend_config.tokenizer_loader
            spec, student = settings.distill.teacher, str(self.config.model)
            teacher = check_teacher(spec, resolved.chat.tokenizer, student, loader)
        self.train = build_train_backend(self.model_path, backend_settings, self.host)
        check_world_size(settings, self.train.world_size)
        # async with lookahead: rollouts go on while the update changes the weights, so the
        # rollout backend needs its own copy of them
        overlaps = settings.mode == "async" and settings.max_staleness > 0
        backend, shared = build_rollout_backend(
            resolved, self.train, backend_settings, overlapping=overlaps
        )
        self.rollout = assemble(resolved, backend)
        self.engine: Engine = self.rollout.engine
        self.sync = choose_weight_sync(self.train, backend, backend_settings, shared=shared)
        self.chunk = settings.logprob_chunk or auto_chunk_size(split_model(self.train.model)[1])
        # logprobs of the distribution the rollouts were sampled from (logits / T)
        self.temperature = logprob_temperature(self.config.rollout.temperature)
        if self.train.world_size > 1 and backend_settings.zero_stage == 3:
            # ZeRO-3 gathers weights in every module call: all ranks must make the same calls,
            # and a shared-prefix pass is one more body call than a plain one.
            self.share_prefix = False
        self.chat = self.engine.chat
        self.sync_check = SyncTripwire(
            settings.sync_check, self.train, backend, self.chat, shared=shared
        )
        self.tasks = TaskPlan(
            self.rollout.tasks, settings, self.config.data, data.rows, RowRules.of(self.config)
        )
        if self.train.is_main:
            self.tasks.write_held_out(self.run_dir)
            self.plan.write(self.run_dir)
        from agentfly_cli.train.teacher import frozen_models

        self.reference, self.teacher = frozen_models(
            alg.needs_reference(self.algo), self.model_path, teacher, self.train
        )
        self.update = PolicyUpdate(
            self.config,
            self.train,
            eot_token_id=self.chat.eot_token_ids[0],
            reference=self.reference,
            share_prefix=self.share_prefix,
            chunk=self.chunk,
            temperature=self.temperature,
            advantage_fn=self.advantage_fn,
            policy_loss_fn=self.policy_loss_fn,
            progress=self.progress,
            teacher=self.teacher,
        )
        self.checkpoints = CheckpointManager(self.run_dir, keep=settings.keep_checkpoints)
        self.start_step = 0
        self._resumed_pending: list[dict] = []  # async: a checkpoint's untrained groups
        if self.resume:
            self.start_step = self._restore()

    # ---- the loop ----------------------------------------------------------------------------
    def fit(self, stop_after: int | None = None) -> TrainResult:
        """Run the training steps; blocking. ``stop_after`` ends this process's share after
        that many steps, with a checkpoint (for time-sliced jobs): ``resume`` continues."""
        from agentfly_cli.runtime.shutdown import run_with_clean_shutdown

        return run_with_clean_shutdown(self.fit_async(stop_after))

    async def fit_async(self, stop_after: int | None = None) -> TrainResult:
        """Steps are numbered from 1: step N's rollouts, metrics and trajectories carry N, and
        so do the checkpoint and the held-out eval taken after it (0: the eval before step 1).
        """
        from agentfly_cli.telemetry.sinks import training_telemetry

        self._setup()
        settings = self.settings
        history: list[dict[str, float]] = []
        evals: list[dict[str, float]] = []
        main = self.train.is_main
        telemetry = (
            training_telemetry(
                self.config,
                self.run_dir,
                console=self.console,
                console_file=self.console_file,
                start_step=self.start_step,
                kl=self.reference is not None,
                step_progress=self.progress,
            )
            if main
            else contextlib.nullcontext()
        )
        done = self.start_step  # steps finished before this run (those of the checkpoint)
        self.step_source = None
        try:
            async with self.engine.backend, self.engine.envs:
                if self.start_step:  # resumed weights reach the rollout backend
                    await self._sync_weights(self.start_step)
                await self.sync_check.start()  # the benign gap, with the same weights
                with telemetry:
                    if main:
                        for note in [*self.tasks.notes, *training_notes(self.chat)]:
                            telemetry.warn(note)
                        if settings.mode == "sync" and self._resumed_pending:
                            telemetry.warn(skipped_groups_note(len(self._resumed_pending)))
                    end = settings.steps
                    if stop_after is not None:
                        end = min(end, done + stop_after)
                    if done == 0 and self.tasks.held_out.due(0):
                        evals.append(await self._evaluate(0, telemetry))
                    self.step_source = self._step_source()
                    try:
                        for step in range(done + 1, end + 1):
                            history.append(await self._run_step(step, end, telemetry, evals))
                    finally:
                        await self.step_source.close()
        finally:
            self.train.close()
        return TrainResult(self.run_dir, settings.steps, history, self.train.is_main, evals)

    def _step_source(self) -> StepSource:
        """Where the steps' rollouts come from: rolled out by each step (sync) or taken from a
        producer that rolled them out earlier (async); both train through :meth:`train_on`."""
        if self.settings.mode == "async":
            from agentfly_cli.train.steps.async_steps import AsyncSteps

            return AsyncSteps(self, self._resumed_pending)
        from agentfly_cli.train.steps.sync import SyncSteps

        return SyncSteps(self)

    async def _run_step(self, step: int, end: int, telemetry, evals: list) -> dict[str, float]:
        """One step, its logging, curriculum record, held-out eval and checkpoint; then the
        step source learns that the step is over (async: the producer's new version)."""
        main, settings = self.train.is_main, self.settings
        metrics = await self.step_source.step(step)
        if main:
            telemetry.log(step, metrics)
            self.signal_watch.check(metrics, telemetry.warn)
            self.infra_watch.check(step, metrics, telemetry.warn)
            self.drift_watch.check(step, metrics, telemetry.warn)
            for note in self.sync_check.take_notes():
                telemetry.warn(note)
        promoted = self.tasks.record(step, metrics)
        if promoted and main:
            telemetry.note(promoted)
        if self.tasks.held_out.due(step):
            evals.append(await self._evaluate(step, telemetry))
        if step == end or (settings.save_every and step % settings.save_every == 0):
            self._save(step)  # after the eval: a resumed run repeats neither
        self.step_source.stepped(step)
        return metrics

    async def _evaluate(self, steps_done: int, telemetry) -> dict[str, float]:
        """The held-out eval after ``steps_done`` steps; logged, and returned with "updates"."""
        metrics, trajectories = await self.tasks.held_out.run(
            steps_done, engine=self.engine, train=self.train, progress=self.progress
        )
        await self._release_rollout_memory()
        if self.settings.save_trajectories and trajectories:
            self._write_trajectories(f"eval-{steps_done:06d}", trajectories)
        what = f"held-out eval after {steps_done} steps" if steps_done else "held-out eval"
        check_some_chain_ran(trajectories, what, total=distributed.all_sum)
        if self.train.is_main:
            telemetry.log_eval(steps_done, metrics)
        return {"updates": float(steps_done), **metrics}

    async def train_on(self, rollouts: StepRollouts) -> StepResult:
        """Train on one step's rollouts, from either source of steps (:mod:`.steps`): write
        the trajectories, prepare the batch, run the optimizer steps, push the new weights and
        return the step's metrics (every rank's, combined)."""
        step, trajectories = rollouts.step, rollouts.trajectories
        metrics, timer = rollouts.metrics, rollouts.timer
        run = asyncio.to_thread if rollouts.update_in_thread else _call
        if self.settings.save_trajectories:
            self._write_trajectories(f"step-{step:06d}", trajectories)
        check_some_chain_ran(trajectories, f"training step {step}", total=distributed.all_sum)
        with timer.section("train"):
            await self._release_rollout_memory()
            batch = await run(self._prepare, trajectories, metrics)
            if batch is not None or distributed.active():
                metrics.update(await run(self._optimize, step, batch))
        with timer.section("sync"):
            metrics.update(await self._sync_weights(step))
        if rollouts.late_metrics is not None:
            metrics.update(rollouts.late_metrics())
        return StepResult(step, self._step_metrics(metrics, timer, trajectories), batch is not None)

    def _step_metrics(self, metrics: dict[str, float], timer, trajectories) -> dict[str, float]:
        from agentfly_cli.telemetry.metrics import gpu_memory_metrics, total_tokens

        metrics.update(timer.metrics(total_tokens(trajectories) * self.train.world_size))
        metrics.update(gpu_memory_metrics())  # CUDA runs: the step's peak allocated memory
        metrics.update(self.tasks.metrics())  # data/position (and curriculum/level)
        metrics.update(self.engine.envs.metrics())  # env pool gauges and counters
        return distributed.combine_metrics(metrics)

    async def _release_rollout_memory(self) -> None:
        """With one model for rollouts and training, the hf backend's stored KV (up to
        ``backend.prefix_cache_tokens``) goes before the update, which outdates it (it would
        sit beside the activations and optimizer state), and after a held-out eval, whose
        chains no training chain extends."""
        await self.sync.release_memory()

    @property
    def shared_model(self) -> bool:
        """Rollouts sample from the policy's own model object (no weights are copied)."""
        return isinstance(self.sync, SharedModel)

    def _write_trajectories(self, stem: str, trajectories: list[Trajectory]) -> None:
        from agentfly_cli.files.run_folders import step_trajectory_file
        from agentfly_cli.trajectory import write_trajectories

        train = self.train
        path = step_trajectory_file(self.run_dir, stem, train.rank, train.world_size)
        write_trajectories(path, trajectories)

    # ---- the update (agentfly_cli.train.update); hooks that tests override -----------------
    def _prepare(self, trajectories: list[Trajectory], metrics: dict[str, float]):
        """The step's trajectories as tensors, with old/reference logprobs and advantages."""
        return self.update.prepare(trajectories, metrics)

    def _optimize(self, step: int, batch: StepBatch | None) -> dict[str, float]:
        """The optimizer steps of ``step`` over ``batch``; their metrics."""
        return self.update.optimize(step, batch)

    # ---- sync and checkpoints -------------------------------------------------------------
    async def _sync_weights(self, version: int) -> dict[str, float]:
        """The weights after ``version`` updates reach the rollout backend (within
        ``trainer.timeouts.weight_sync_s``), and the tripwire checks them; the push's and the
        check's ``sync/*`` metrics."""
        await self.sync.publish(version, self.settings.timeouts.weight_sync_s)
        return {**self.sync.metrics(), **await self.sync_check.check(version)}

    def _save(self, step: int) -> None:
        # async: the groups started and not trained on, for a resumed run to roll out again
        async_state = self.step_source.checkpoint_state()
        extra = self.update.extra_state()  # a value head and its optimizer, where there is one
        self.checkpoints.save(
            step,
            backend=self.train,
            tokenizer=self.chat.tokenizer,
            data_position=self.tasks.position,
            extra={**extra, "task_stream": self.tasks.state_dict(), **async_state},
            only_model=self.settings.save_only_model,
        )

    def _restore(self) -> int:
        state = self.checkpoints.load_latest(self.train)
        if state is None:
            raise UserError(
                f"--resume: no checkpoint in {self.run_dir / 'checkpoints'}; "
                "start without --resume or pass the run folder of an earlier run"
            )
        extra = state.get("extra", {})
        self.tasks.load_state_dict(extra.get("task_stream"), state["data_position"])
        # async: the groups started and not trained on are rolled out again (with the resumed
        # weights); a sync run skips them, with a warning
        self._resumed_pending = list(extra.get("async_pending", []))
        self.update.load_extra_state(extra)
        return int(state["step"])
