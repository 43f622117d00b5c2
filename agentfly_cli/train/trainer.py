"""The training loop: tasks -> rollouts -> rewards -> advantages -> minibatch epochs ->
weight sync -> metrics -> checkpoint, once per step.

The rollout engine and the trainer share one event loop. With the ``torch`` train backend and
the ``hf`` rollout backend on one device, both use the very same model object: syncing the
weights costs nothing (the backend only drops its stored KV). Other pairs push the weights
through ``Backend.update_weights``.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from agentfly_cli.config import RunConfig
from agentfly_cli.errors import UserError
from agentfly_cli.rollout.outcome import check_some_chain_ran
from agentfly_cli.rollout.trajectory import Trajectory
from agentfly_cli.train import algorithms as alg
from agentfly_cli.train import distributed
from agentfly_cli.train.batch import (
    MicroBatch,
    TrainRow,
    plan_micro_batches,
    scatter_rows,
    token_matrix,
    trained_mask,
)
from agentfly_cli.train.checkpoint import CheckpointManager
from agentfly_cli.train.data import TaskStream
from agentfly_cli.train.logprobs import (
    AUTO_CHUNK_LOGITS,
    SequenceBatch,
    logprob_temperature,
    sequence_logprobs,
)

log = logging.getLogger(__name__)

EVAL_TASKS_FILE = "eval_tasks.jsonl"
#: Advantage estimators that compare the chains of a task: equal rewards give no signal.
GROUP_RELATIVE = ("grpo", "rloo", "reinforce_pp_baseline")
#: Steps in a row without a group that has reward spread before the trainer warns.
FLAT_STEPS_WARNING = 3


@dataclass
class StepBatch:
    """One step's trajectories as training tensors."""

    rows: list[TrainRow]
    mask: torch.Tensor  # [B, L] trained tokens
    rewards: torch.Tensor  # [B]
    sampler_logprobs: torch.Tensor  # [B, L] (0 where the backend gave none)
    has_sampler_logprobs: bool
    old_logprobs: torch.Tensor | None = None
    ref_logprobs: torch.Tensor | None = None
    old_values: torch.Tensor | None = None
    advantages: torch.Tensor | None = None
    returns: torch.Tensor | None = None


@dataclass
class TrainResult:
    """What a finished run leaves behind."""

    run_dir: Path
    steps: int
    history: list[dict[str, float]] = field(default_factory=list)
    is_main: bool = True  # rank 0 (the one that reports)
    evals: list[dict[str, float]] = field(default_factory=list)  # {"updates", "eval/..."}


class ValueHead(torch.nn.Module):
    """A scalar value per position on top of the policy's last hidden state (PPO/GAE)."""

    def __init__(self, hidden_size: int) -> None:
        super().__init__()
        self.proj = torch.nn.Linear(hidden_size, 1)
        torch.nn.init.zeros_(self.proj.weight)
        torch.nn.init.zeros_(self.proj.bias)

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.proj(hidden.float()).squeeze(-1)


class _Tally:
    """Weighted means of per-micro-batch metrics; losses summed per optimizer step."""

    def __init__(self) -> None:
        self.sums: dict[str, float] = {}
        self.weights: dict[str, float] = {}

    def add(self, name: str, value: float, weight: float = 1) -> None:
        self.sums[name] = self.sums.get(name, 0.0) + float(value) * weight
        self.weights[name] = self.weights.get(name, 0.0) + weight

    def means(self, *, per_step: tuple[str, ...], steps: int) -> dict[str, float]:
        out = {name: total / max(self.weights[name], 1e-12) for name, total in self.sums.items()}
        for name in per_step:  # micro-batch losses add up to the step's loss
            if name in self.sums:
                out[name] = self.sums[name] / max(steps, 1)
        return out


class Trainer:
    """Runs ``config.trainer.steps`` RL steps on ``config``'s recipe; see :meth:`fit`."""

    def __init__(
        self,
        config: RunConfig,
        *,
        run_dir: str | Path,
        resume: bool = False,
        console: bool | None = None,
        console_file: Any = None,
    ) -> None:
        self.config = config
        self.settings = config.trainer
        self.algo = config.trainer.algorithm
        self.run_dir = Path(run_dir)
        self.resume = resume
        self.console = self.settings.telemetry.console if console is None else console
        self.console_file = console_file
        self.advantage_fn = alg.get_advantage_estimator(self.algo.advantage)
        self.policy_loss_fn = alg.get_policy_loss(self.algo.policy_loss)
        self._warned_sync = False
        self._flat_steps = 0  # steps in a row where no group had reward spread
        self._warned_flat = False

    # ---- setup -------------------------------------------------------------------------------
    def _setup(self) -> None:
        from agentfly_cli.rollout.runner import build_rollout
        from agentfly_cli.train.backends import build_train_backend

        settings = self.settings
        backend_settings = settings.backend
        if backend_settings.total_steps is None:
            per_step = settings.epochs * settings.mini_batches
            backend_settings = backend_settings.model_copy(
                update={"total_steps": settings.steps * per_step}
            )
        if backend_settings.gradient_checkpointing and settings.share_prefix:
            log.info("gradient checkpointing: the shared-prefix pass is turned off")
        self.share_prefix = settings.share_prefix and not backend_settings.gradient_checkpointing

        self._check_group_size()
        if not self.config.reward:
            raise UserError(
                "training needs a reward: set `reward:` in the recipe or pass --reward "
                "(e.g. exact_match); see `agentfly rewards list`"
            )

        def rollout_backend(backend_config, chat):
            """Build the policy first; the hf backend may then share its model object."""
            self.model_path = backend_config.model
            self.train = build_train_backend(self.model_path, backend_settings)
            self._check_world_size()
            self.shared_model = self._can_share(backend_config)
            if self.shared_model:
                from agentfly_cli.rollout.backends.hf import HFBackend

                return HFBackend(backend_config, chat.tokenizer, model=self.train.unwrapped())
            ref = self._host_backend(backend_config.name)
            return ref.factory(backend_config, chat)

        self.rollout = build_rollout(self.config, backend_factory=rollout_backend)
        self.engine = self.rollout.engine
        if not self.shared_model and not self._takes_weights(self.engine.backend):
            raise UserError(
                f"the {self.engine.backend.name} rollout backend cannot take new weights, so "
                "rollouts would never follow the trained policy; train with backend hf or vllm"
            )
        vocab = self.train.unwrapped().config.vocab_size
        self.chunk = settings.logprob_chunk or max(16, AUTO_CHUNK_LOGITS // vocab)
        # logprobs of the distribution the rollouts were sampled from (logits / T)
        self.temperature = logprob_temperature(self.config.rollout.temperature)
        if self.train.world_size > 1 and backend_settings.zero_stage == 3:
            # ZeRO-3 gathers weights in every module call: all ranks must make the same calls,
            # and a shared-prefix pass is one more body call than a plain one.
            self.share_prefix = False
        self._pushes_adapters = (
            backend_settings.lora is not None and backend_settings.sync == "adapter"
        )
        if self._pushes_adapters and not self._takes_adapters(self.engine.backend):
            raise UserError(
                f"trainer.backend.sync: adapter needs a rollout backend that takes LoRA adapters "
                f"(hf); the {self.engine.backend.name} backend does not: use sync: merge"
            )
        self.chat = self.engine.chat
        from agentfly_cli.train.evaluation import split_tasks

        self.eval_split = split_tasks(
            self.rollout.tasks, settings.eval, data_path=self.config.data.path, seed=settings.seed
        )
        self.stream = TaskStream(
            self.eval_split.train, seed=settings.seed, shuffle=settings.shuffle
        )
        if self.eval_split.eval and self.train.is_main:
            self._write_eval_tasks()
        self.reference = self._load_reference() if alg.needs_reference(self.algo) else None
        self.value_head = None
        self.value_optimizer = None
        if self.algo.advantage == "gae":
            hidden = self.train.unwrapped().config.hidden_size
            self.value_head = ValueHead(hidden).to(self.train.device)
            self.value_optimizer = torch.optim.AdamW(
                self.value_head.parameters(), lr=backend_settings.lr * 10
            )
        self.checkpoints = CheckpointManager(self.run_dir, keep=settings.keep_checkpoints)
        self.start_step = 0
        if self.resume:
            self.start_step = self._restore()

    @staticmethod
    def _takes_adapters(backend) -> bool:
        from agentfly_cli.rollout.backends.base import Backend

        return type(backend).update_adapter is not Backend.update_adapter

    @staticmethod
    def _takes_weights(backend) -> bool:
        from agentfly_cli.rollout.backends.base import Backend

        return type(backend).update_weights is not Backend.update_weights

    def _check_group_size(self) -> None:
        """Group-relative estimators compare the chains of a task: one chain learns nothing."""
        n = self.config.rollout.n
        if self.algo.advantage in GROUP_RELATIVE and n < 2:
            raise UserError(
                f"trainer.algorithm.advantage {self.algo.advantage} compares the chains of a "
                f"task, but rollout.n is {n}; set rollout.n to 2 or more (e.g. 8)"
            )

    def _check_world_size(self) -> None:
        world = self.train.world_size
        if self.settings.tasks_per_step % world:
            raise UserError(
                f"trainer.tasks_per_step ({self.settings.tasks_per_step}) must split evenly "
                f"over the {world} ranks; make it a multiple of {world}"
            )

    def _host_backend(self, name: str):
        from agentfly_cli.plugins import get_plugin_host

        return get_plugin_host().components.backends.get(name)

    def _can_share(self, backend_config) -> bool:
        """One model for rollouts and training: torch backend, hf rollouts, full weights."""
        train = self.settings.backend
        return (
            backend_config.name == "hf"
            and train.name == "torch"
            and train.lora is None
            and backend_config.device in ("auto", str(self.train.device))
            and backend_config.dtype in ("auto", train.dtype)
        )

    def _load_reference(self):
        from agentfly_cli.train.backends.base import load_hf_model

        dtype = next(self.train.unwrapped().parameters()).dtype
        reference = load_hf_model(self.model_path, dtype)
        return reference.to(self.train.device).eval().requires_grad_(False)

    # ---- the loop ----------------------------------------------------------------------------
    def fit(self, stop_after: int | None = None) -> TrainResult:
        """Run the training steps; blocking. ``stop_after`` ends this process's share after
        that many steps, with a checkpoint (for time-sliced jobs): ``resume`` continues."""
        from agentfly_cli.shutdown import run_with_clean_shutdown

        return run_with_clean_shutdown(self.fit_async(stop_after))

    async def fit_async(self, stop_after: int | None = None) -> TrainResult:
        from agentfly_cli.train.telemetry import Telemetry

        self._setup()
        settings = self.settings
        telemetry_settings = settings.telemetry
        history: list[dict[str, float]] = []
        evals: list[dict[str, float]] = []
        main = self.train.is_main
        telemetry = (
            Telemetry(
                self.run_dir,
                total_steps=settings.steps,
                sinks=tuple(telemetry_settings.sinks),
                console=self.console,
                wandb_project=telemetry_settings.wandb_project,
                wandb_mode=telemetry_settings.wandb_mode,
                config=self.config.model_dump(mode="json"),
                start_step=self.start_step,
                console_file=self.console_file,
            )
            if main
            else contextlib.nullcontext()
        )
        step = self.start_step
        try:
            async with self.engine.backend, self.engine.envs:
                if self.start_step:
                    await self._sync_weights()  # resumed weights reach the rollout backend
                with telemetry:
                    if main:
                        for note in self.eval_split.notes:
                            telemetry.warn(note)
                    end = settings.steps
                    if stop_after is not None:
                        end = min(end, self.start_step + stop_after)
                    for step in range(self.start_step, end):
                        if self._eval_due(step):
                            evals.append(await self._evaluate(step, telemetry))
                        metrics = await self._step(step)
                        history.append(metrics)
                        if main:
                            telemetry.log(step, metrics)
                            self._watch_signal(metrics, telemetry)
                        last = step == end - 1
                        due = settings.save_every and (step + 1) % settings.save_every == 0
                        if last or due:
                            self._save(step + 1)
                    if end == settings.steps and self._eval_due(end):
                        evals.append(await self._evaluate(end, telemetry))
        finally:
            self.train.close()
        return TrainResult(self.run_dir, settings.steps, history, self.train.is_main, evals)

    def _watch_signal(self, metrics: dict[str, float], telemetry) -> None:
        """Warn once when group-relative advantages have been zero for several steps."""
        if self.algo.advantage not in GROUP_RELATIVE or self._warned_flat:
            return
        if metrics.get("reward/groups_with_spread") != 0.0:
            self._flat_steps = 0
            return
        self._flat_steps += 1
        if self._flat_steps < FLAT_STEPS_WARNING:
            return
        low, high = metrics.get("reward/min"), metrics.get("reward/max")
        same = f" (every chain got {low:g})" if low is not None and low == high else ""
        telemetry.warn(
            f"{self._flat_steps} steps in a row gave all chains of each task the same "
            f"reward{same}, so {self.algo.advantage} advantages are zero and the model learns "
            "nothing; the tasks may be too hard or too easy for this model. Look at the "
            f"trajectories (agentfly view {self.run_dir}/trajectories/...), train on easier "
            "tasks (--where), raise rollout.n, or warm-start the model on solved chains "
            "(agentfly sft)"
        )
        self._warned_flat = True

    def _write_eval_tasks(self) -> None:
        """``RUN_DIR/eval_tasks.jsonl``: the held-out rows, for ``agentfly eval --data``."""
        self.run_dir.mkdir(parents=True, exist_ok=True)
        lines = (json.dumps(row, ensure_ascii=False, default=str) for row in self.eval_split.eval)
        (self.run_dir / EVAL_TASKS_FILE).write_text("".join(line + "\n" for line in lines))

    def _eval_due(self, updates: int) -> bool:
        """Held-out eval before the first step, every ``eval.every`` steps, and at the end."""
        every = self.settings.eval.every
        return bool(every) and (updates % every == 0 or updates == self.settings.steps)

    async def _evaluate(self, updates: int, telemetry) -> dict[str, float]:
        """Roll out the eval tasks with the current policy; log and return ``eval/*``."""
        import time

        from agentfly_cli.train.evaluation import eval_metrics, task_results

        settings = self.settings.eval
        tasks = self.eval_split.eval
        share = -(-len(tasks) // self.train.world_size)
        start = self.train.rank * share
        mine = tasks[start : start + share]
        started = time.perf_counter()
        self.train.model.eval()
        trajectories = (
            await self.engine.run(mine, batch_id=f"eval{updates}", task_offset=start, n=settings.n)
            if mine
            else []
        )
        results = distributed.gather_lists(task_results(trajectories, settings.threshold))
        metrics = eval_metrics(results, time.perf_counter() - started)
        if self.settings.save_trajectories and trajectories:
            self._write_trajectories(f"eval-{updates:06d}", trajectories)
        if self.train.is_main:
            telemetry.log_eval(updates, metrics)
        return {"updates": float(updates), **metrics}

    async def _step(self, step: int) -> dict[str, float]:
        from agentfly_cli.train.metrics import StepTimer, rollout_metrics, total_tokens

        timer = StepTimer()
        picked = self.stream.take(self.settings.tasks_per_step)
        share = len(picked) // self.train.world_size
        mine = picked[self.train.rank * share : (self.train.rank + 1) * share]
        with timer.section("rollout"):
            trajectories = await self._rollout(step, mine)  # this rank's contiguous share
        metrics = rollout_metrics(trajectories)
        if self.settings.save_trajectories:
            self._write_trajectories(f"step-{step:06d}", trajectories)
        check_some_chain_ran(trajectories, f"training step {step}", total=distributed.all_sum)
        with timer.section("train"):
            batch = self._prepare(trajectories, metrics)
            if batch is not None or distributed.active():
                metrics.update(self._optimize(step, batch))
        with timer.section("sync"):
            await self._sync_weights()
        metrics.update(timer.metrics(total_tokens(trajectories) * self.train.world_size))
        metrics["data/position"] = float(self.stream.position)
        metrics.update(self.engine.envs.metrics())  # env pool gauges and counters
        return distributed.combine_metrics(metrics)

    async def _rollout(self, step: int, picked) -> list[Trajectory]:
        tasks = [task for _, task in picked]
        self.train.model.eval()
        offset = picked[0][0] if picked else 0
        return await self.engine.run(tasks, batch_id=f"s{step}", task_offset=offset)

    def _write_trajectories(self, stem: str, trajectories: list[Trajectory]) -> None:
        from agentfly_cli.rollout.trajectory import write_trajectories

        folder = self.run_dir / "trajectories"
        folder.mkdir(parents=True, exist_ok=True)
        name = (
            f"{stem}.jsonl" if self.train.world_size == 1 else f"{stem}-rank{self.train.rank}.jsonl"
        )
        write_trajectories(folder / name, trajectories)

    # ---- from trajectories to tensors -----------------------------------------------------
    def _prepare(self, trajectories: list[Trajectory], metrics: dict[str, float]):
        usable = []
        for t in trajectories:
            if not t.token_exact or sum(t.loss_mask) == 0:
                continue
            if t.reward is None:
                raise UserError(
                    "trajectories have no reward: set `reward:` in the recipe (e.g. exact_match)"
                )
            usable.append(t)
        metrics["train/dropped_unusable"] = float(len(trajectories) - len(usable))
        if self.algo.dynamic_sampling and usable:
            rewards = [t.reward for t in usable]
            keep = alg.zero_variance_groups(rewards, [t.group_id for t in usable])
            metrics["train/dropped_zero_variance"] = float(len(usable) - sum(keep))
            usable = [t for t, k in zip(usable, keep, strict=True) if k]
        metrics["train/trajectories"] = float(len(usable))
        if not usable:
            if distributed.active():
                self._reference_pass(None)  # the other ranks' passes need this one's
            return None
        rows = [TrainRow(t.ids, t.loss_mask, t.group_id) for t in usable]
        sampler = [[lp for lp, m in zip(t.logprobs, t.loss_mask, strict=True) if m] for t in usable]
        has_sampler = all(lp is not None for row in sampler for lp in row)
        sampler = [[0.0 if lp is None else lp for lp in row] for row in sampler]
        mask = trained_mask(rows)
        batch = StepBatch(
            rows,
            mask,
            torch.tensor([float(t.reward) for t in usable]),
            token_matrix(rows, sampler),
            has_sampler,
        )
        self._reference_pass(batch)
        self._advantages(batch)
        return batch

    def _needs_old_pass(self) -> bool:
        settings, algo = self.settings, self.algo
        return (
            settings.epochs * settings.mini_batches > 1
            or algo.advantage == "gae"
            or (algo.kl_coef > 0 and algo.kl_in_reward)
        )

    def _plans(self, batch: StepBatch | None, indices) -> list[MicroBatch | None]:
        """Micro-batches of ``indices``; with several ranks, padded with None (an idle pass)
        up to the largest count of any rank, since ZeRO passes are collective."""
        indices = list(indices)
        plans: list[MicroBatch | None] = []
        if batch is not None and indices:
            planned = plan_micro_batches(
                batch.rows,
                indices,
                max_tokens=self.settings.micro_batch_tokens,
                share_prefix=self.share_prefix,
            )
            plans = [p.to(self.train.device) for p in planned]
        return plans + [None] * (distributed.agree_max(len(plans)) - len(plans))

    def _policy_logprobs(self, batch: SequenceBatch, **options: Any):
        """:func:`sequence_logprobs` of the policy; with several ranks, every rank makes the
        same number of output-head calls (ZeRO-3 gathers weights in each)."""
        chunks = None
        if distributed.active():
            trained = int(batch.target_mask.sum().item())
            chunks = distributed.agree_max(max(1, math.ceil(trained / self.chunk)))
        return sequence_logprobs(
            self.train.model,
            batch,
            chunk_size=self.chunk,
            num_chunks=chunks,
            temperature=self.temperature,
            **options,
        )

    def _idle_pass(self, *, backward: bool) -> None:
        """A zero-weight pass over one token: keeps this rank in step with busier ranks."""
        token = torch.tensor([[self.chat.eot_token_ids[0]]], device=self.train.device)
        one = SequenceBatch.unshared(token, torch.ones_like(token), token, token > -1)
        stats = self._policy_logprobs(one, return_hidden=self.value_head is not None)
        if backward:
            loss = stats.logprobs.sum() * 0.0
            if self.value_head is not None:
                loss = loss + self.value_head(stats.hidden).sum() * 0.0
            self.train.backward(loss)

    @torch.no_grad()
    def _reference_pass(self, batch: StepBatch | None) -> None:
        """Old-policy logprobs and values, and reference logprobs, where the algorithm needs
        them, in no-grad forward passes over the whole batch."""
        need_old = self._needs_old_pass()
        if not need_old and self.reference is None:
            return
        self.train.model.eval()
        plans = self._plans(batch, range(len(batch.rows)) if batch is not None else [])
        if batch is None:
            for _ in plans:
                if need_old:
                    self._idle_pass(backward=False)
            return
        width = batch.mask.shape[1]
        old = torch.zeros_like(batch.mask)
        ref = torch.zeros_like(batch.mask)
        values = torch.zeros_like(batch.mask)
        for plan in plans:
            if plan is None:
                if need_old:
                    self._idle_pass(backward=False)
                continue
            sub = [batch.rows[i] for i in plan.rows]
            index = torch.tensor(plan.rows)
            if need_old:
                stats = self._policy_logprobs(plan.batch, return_hidden=self.value_head is not None)
                old[index] = scatter_rows(stats.logprobs.cpu(), sub, width)
                if self.value_head is not None:
                    v = self.value_head(stats.hidden).cpu()
                    values[index] = scatter_rows(v, sub, width)
            if self.reference is not None:
                stats = sequence_logprobs(
                    self.reference, plan.batch, chunk_size=self.chunk, temperature=self.temperature
                )
                ref[index] = scatter_rows(stats.logprobs.cpu(), sub, width)
        if need_old:
            batch.old_logprobs = old
        if self.value_head is not None:
            batch.old_values = values
        if self.reference is not None:
            batch.ref_logprobs = ref

    def _advantages(self, batch: StepBatch) -> None:
        token_rewards = None
        if self.reference is not None and self.algo.kl_in_reward:
            from agentfly_cli.train import losses

            token_rewards = losses.kl_token_rewards(
                batch.old_logprobs, batch.ref_logprobs, batch.mask, self.algo
            )
        data = alg.AdvantageInput(
            rewards=batch.rewards,
            mask=batch.mask,
            group_ids=[r.group for r in batch.rows],
            values=batch.old_values,
            token_rewards=token_rewards,
        )
        out = self.advantage_fn(data, self.algo)
        batch.advantages = out.advantages * batch.mask
        batch.returns = out.returns

    # ---- the update --------------------------------------------------------------------------
    def _optimize(self, step: int, batch: StepBatch | None) -> dict[str, float]:
        """Epochs x mini-batches of optimizer steps over the batch (None: this rank has no
        rows this step and only keeps in step with the others)."""
        settings = self.settings
        rng = random.Random(f"{settings.seed}:minibatch:{step}")
        tally = _Tally()
        self.train.model.train()
        rows = len(batch.rows) if batch is not None else 0
        optimizer_steps = 0
        for _ in range(settings.epochs):
            order = list(range(rows))
            if settings.epochs * settings.mini_batches > 1:
                rng.shuffle(order)
            size = max(1, math.ceil(rows / settings.mini_batches))
            for part in range(settings.mini_batches):
                indices = order[part * size : (part + 1) * size]
                plans = self._plans(batch, indices)
                if not plans:
                    continue  # every rank agrees: nothing left for this mini-batch
                # Normalisers over the whole mini-batch, every rank's part of it: each rank's
                # loss is scaled by the world size since DeepSpeed averages the gradients.
                local_tokens = int(batch.mask[indices].sum().item()) if indices else 0
                num_tokens = distributed.all_sum(local_tokens)
                num_seqs = distributed.all_sum(len(indices))
                for plan in plans:
                    if plan is None:
                        self._idle_pass(backward=True)
                        continue
                    padded = plan.batch.num_tokens
                    real = plan.batch.num_real_tokens
                    tally.add("train/padding_fraction", 1 - real / padded, padded)
                    loss = self._micro_loss(batch, plan, num_tokens, num_seqs, tally)
                    self.train.backward(loss * self.train.world_size)
                grad_norm = self.train.step()
                tally.add("grad_norm", grad_norm)
                if self.value_optimizer is not None:
                    self._value_step(grad_norm)
                optimizer_steps += 1
        out = tally.means(
            per_step=("loss/policy", "loss/total", "loss/value"), steps=optimizer_steps
        )
        out["lr"] = self.train.current_lr()
        out["train/optimizer_steps"] = float(optimizer_steps)
        if batch is not None:
            out["train/trained_tokens"] = float(batch.mask.sum().item())
        return out

    def _value_step(self, policy_grad_norm: float) -> None:
        """The value head's update, skipped with the policy's when gradients are not finite."""
        distributed.average_gradients(self.value_head.parameters())
        if math.isfinite(policy_grad_norm):
            max_norm = self.settings.backend.max_grad_norm
            if max_norm is not None:
                torch.nn.utils.clip_grad_norm_(self.value_head.parameters(), max_norm)
            self.value_optimizer.step()
        self.value_optimizer.zero_grad(set_to_none=True)

    def _micro_loss(
        self, batch: StepBatch, plan: MicroBatch, num_tokens: float, num_seqs: float, tally: _Tally
    ) -> torch.Tensor:
        """The loss of one micro-batch, normalised by its mini-batch's token and row counts so
        that the micro-batch losses sum to the mini-batch loss."""
        from agentfly_cli.train import losses

        algo = self.algo
        width = batch.mask.shape[1]
        index = torch.tensor(plan.rows)
        sub = [batch.rows[i] for i in plan.rows]
        stats = self._policy_logprobs(
            plan.batch, entropy=True, return_hidden=self.value_head is not None
        )
        device = stats.logprobs.device

        def rows_of(matrix: torch.Tensor) -> torch.Tensor:
            return matrix[index].to(device)

        logprobs = scatter_rows(stats.logprobs, sub, width)
        mask = rows_of(batch.mask)
        n_tok = int(mask.sum().item())
        old = rows_of(batch.old_logprobs) if batch.old_logprobs is not None else logprobs.detach()
        per_token, loss_metrics = self.policy_loss_fn(
            logprobs, old, rows_of(batch.advantages), mask, algo
        )
        if algo.tis_cap is not None and batch.has_sampler_logprobs:
            weights = losses.tis_weights(old, rows_of(batch.sampler_logprobs), mask, algo.tis_cap)
            per_token = per_token * weights
            tally.add("tis/weight_mean", float((weights * mask).sum()) / max(n_tok, 1), n_tok)

        def aggregate(values: torch.Tensor) -> torch.Tensor:
            return losses.aggregate_loss(
                values,
                mask,
                algo.loss_agg,
                num_tokens=num_tokens,
                num_seqs=num_seqs,
                seq_len_constant=algo.seq_len_constant or self.config.rollout.max_total_tokens,
            )

        policy = aggregate(per_token)
        total = policy
        entropy = scatter_rows(stats.entropy, sub, width)
        tally.add("entropy", float((entropy.detach() * mask).sum()) / max(n_tok, 1), n_tok)
        if algo.entropy_coef > 0:
            total = total - algo.entropy_coef * aggregate(entropy)
        if batch.ref_logprobs is not None:
            kl = losses.kl_estimate(logprobs, rows_of(batch.ref_logprobs), algo.kl_kind)
            tally.add("kl", float((kl.detach() * mask).sum()) / max(n_tok, 1), n_tok)
            if not algo.kl_in_reward:
                total = total + algo.kl_coef * aggregate(kl)
        if self.value_head is not None:
            values = scatter_rows(self.value_head(stats.hidden), sub, width)
            value_loss = aggregate(
                losses.value_loss(
                    values,
                    rows_of(batch.old_values),
                    rows_of(batch.returns),
                    mask,
                    algo.value_clip,
                )
            )
            total = total + algo.value_coef * value_loss
            tally.add("loss/value", value_loss.item())
        tally.add("loss/policy", policy.item())
        tally.add("loss/total", total.item())
        for key, value in loss_metrics.items():
            tally.add(key, value, n_tok)
        return total

    # ---- sync and checkpoints -------------------------------------------------------------
    async def _sync_weights(self) -> None:
        backend = self.engine.backend
        if self.shared_model:
            # Same tensors: nothing to copy; the backend drops KV computed with old weights.
            await backend.update_weights({})
            return
        if self._pushes_adapters:
            peft_config = self.train.unwrapped().peft_config["default"]
            await backend.update_adapter(dict(self.train.sync_weights()), peft_config)
            return
        try:
            await backend.update_weights(self.train.sync_weights())
        except NotImplementedError:
            if not self._warned_sync:
                log.warning(
                    "the %s rollout backend does not take new weights; rollouts keep the "
                    "initial policy",
                    backend.name,
                )
                self._warned_sync = True

    def _save(self, step: int) -> None:
        extra = {}
        if self.value_head is not None:
            extra["value_head"] = self.value_head.state_dict()
            extra["value_optimizer"] = self.value_optimizer.state_dict()
        self.checkpoints.save(
            step,
            backend=self.train,
            tokenizer=self.chat.tokenizer,
            data_position=self.stream.position,
            extra=extra,
        )

    def _restore(self) -> int:
        state = self.checkpoints.load_latest(self.train)
        if state is None:
            raise UserError(
                f"--resume: no checkpoint in {self.run_dir / 'checkpoints'}; "
                "start without --resume or pass the run folder of an earlier run"
            )
        self.stream.position = int(state["data_position"])
        extra = state.get("extra", {})
        if self.value_head is not None and "value_head" in extra:
            self.value_head.load_state_dict(extra["value_head"])
            self.value_optimizer.load_state_dict(extra["value_optimizer"])
        return int(state["step"])
