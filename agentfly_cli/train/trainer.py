"""The training loop: tasks -> rollouts -> rewards -> advantages -> minibatch epochs ->
weight sync -> metrics -> checkpoint, once per step.

The rollout engine and the trainer share one event loop. With the ``torch`` train backend and
the ``hf`` rollout backend on one device, both use the very same model object: syncing the
weights costs nothing (the backend only drops its stored KV). Other pairs push the weights
through ``Backend.update_weights``.
"""

from __future__ import annotations

import asyncio
import logging
import math
import random
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from agentfly_cli.config import RunConfig
from agentfly_cli.errors import UserError
from agentfly_cli.rollout.trajectory import Trajectory
from agentfly_cli.train import algorithms as alg
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
from agentfly_cli.train.logprobs import sequence_logprobs

log = logging.getLogger(__name__)


@dataclass
class StepBatch:
    """One step's trajectories as training tensors."""

    trajectories: list[Trajectory]
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


class ValueHead(torch.nn.Module):
    """A scalar value per position on top of the policy's last hidden state (PPO/GAE)."""

    def __init__(self, hidden_size: int) -> None:
        super().__init__()
        self.proj = torch.nn.Linear(hidden_size, 1)
        torch.nn.init.zeros_(self.proj.weight)
        torch.nn.init.zeros_(self.proj.bias)

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.proj(hidden.float()).squeeze(-1)


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

        holder: dict[str, Any] = {}

        def rollout_backend(backend_config, chat):
            model_path = backend_config.model
            holder["model_path"] = model_path
            self.train = build_train_backend(model_path, backend_settings)
            if self._can_share(backend_config):
                from agentfly_cli.rollout.backends.hf import HFBackend

                holder["shared"] = True
                return HFBackend(backend_config, chat.tokenizer, model=self.train.unwrapped())
            ref = self._host_backend(backend_config.name)
            return ref.factory(backend_config, chat)

        self.rollout = build_rollout(self.config, backend_factory=rollout_backend)
        self.shared_model = bool(holder.get("shared"))
        self.model_path = holder["model_path"]
        self.engine = self.rollout.engine
        self.chat = self.engine.chat
        self.stream = TaskStream(self.rollout.tasks, seed=settings.seed, shuffle=settings.shuffle)
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
        from transformers import AutoModelForCausalLM

        model = self.train.unwrapped()
        dtype = next(model.parameters()).dtype
        reference = AutoModelForCausalLM.from_pretrained(self.model_path, dtype=dtype)
        reference.to(self.train.device).eval().requires_grad_(False)
        return reference

    # ---- the loop ----------------------------------------------------------------------------
    def fit(self, stop_after: int | None = None) -> TrainResult:
        """Run the training steps; blocking. ``stop_after`` ends this process's share after
        that many steps, with a checkpoint (for time-sliced jobs): ``resume`` continues."""
        return asyncio.run(self.fit_async(stop_after))

    async def fit_async(self, stop_after: int | None = None) -> TrainResult:
        from agentfly_cli.train.telemetry import Telemetry

        self._setup()
        settings = self.settings
        telemetry_settings = settings.telemetry
        history: list[dict[str, float]] = []
        main = self.train.is_main
        sinks = tuple(telemetry_settings.sinks) if main else ()
        telemetry = Telemetry(
            self.run_dir,
            total_steps=settings.steps,
            sinks=sinks,
            console=self.console and main,
            wandb_project=telemetry_settings.wandb_project,
            wandb_mode=telemetry_settings.wandb_mode,
            config=self.config.model_dump(mode="json") if main else None,
            start_step=self.start_step,
            console_file=self.console_file,
        )
        step = self.start_step
        try:
            async with self.engine.backend:
                if self.start_step:
                    await self._sync_weights()  # resumed weights reach the rollout backend
                with telemetry:
                    end = settings.steps
                    if stop_after is not None:
                        end = min(end, self.start_step + stop_after)
                    for step in range(self.start_step, end):
                        metrics = await self._step(step)
                        history.append(metrics)
                        telemetry.log(step, metrics)
                        last = step == end - 1
                        due = settings.save_every and (step + 1) % settings.save_every == 0
                        if last or due:
                            self._save(step + 1)
        finally:
            self.train.close()
        return TrainResult(self.run_dir, settings.steps, history)

    async def _step(self, step: int) -> dict[str, float]:
        from agentfly_cli.train.metrics import rollout_metrics

        started = time.perf_counter()
        picked = self.stream.take(self.settings.tasks_per_step)
        trajectories = await self._rollout(step, picked)
        rollout_s = time.perf_counter() - started
        metrics = rollout_metrics(trajectories)

        train_started = time.perf_counter()
        batch = self._prepare(trajectories, metrics)
        if batch is not None:
            metrics.update(self._optimize(step, batch))
        train_s = time.perf_counter() - train_started

        sync_started = time.perf_counter()
        await self._sync_weights()
        sync_s = time.perf_counter() - sync_started
        step_s = time.perf_counter() - started
        tokens = sum(len(t.ids) for t in trajectories)
        metrics.update(
            {
                "time/rollout_s": rollout_s,
                "time/train_s": train_s,
                "time/sync_s": sync_s,
                "time/step_s": step_s,
                "throughput/tokens_per_s": tokens / step_s if step_s > 0 else 0.0,
                "data/position": float(self.stream.position),
            }
        )
        return metrics

    async def _rollout(self, step: int, picked) -> list[Trajectory]:
        tasks = [task for _, task in picked]
        self.train.model.eval()
        with torch.no_grad():
            trajectories = await self.engine.run(
                tasks, batch_id=f"s{step}", task_offset=picked[0][0] if picked else 0
            )
        return trajectories

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
            return None
        rows = [TrainRow(t.ids, t.loss_mask, t.group_id) for t in usable]
        sampler = [
            [lp for lp, m in zip(t.logprobs, t.loss_mask, strict=True) if m] for t in usable
        ]
        has_sampler = all(lp is not None for row in sampler for lp in row)
        sampler = [[0.0 if lp is None else lp for lp in row] for row in sampler]
        mask = trained_mask(rows)
        batch = StepBatch(
            usable,
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

    def _plans(self, batch: StepBatch, indices) -> list[MicroBatch]:
        plans = plan_micro_batches(
            batch.rows,
            list(indices),
            max_tokens=self.settings.micro_batch_tokens,
            share_prefix=self.share_prefix,
        )
        return [p.to(self.train.device) for p in plans]

    @torch.no_grad()
    def _reference_pass(self, batch: StepBatch) -> None:
        """Old-policy logprobs and values, and reference logprobs, where the algorithm needs
        them, in no-grad forward passes over the whole batch."""
        need_old = self._needs_old_pass()
        if not need_old and self.reference is None:
            return
        width = batch.mask.shape[1]
        old = torch.zeros_like(batch.mask)
        ref = torch.zeros_like(batch.mask)
        values = torch.zeros_like(batch.mask)
        self.train.model.eval()
        for plan in self._plans(batch, range(len(batch.rows))):
            sub = [batch.rows[i] for i in plan.rows]
            index = torch.tensor(plan.rows)
            if need_old:
                stats = sequence_logprobs(
                    self.train.model,
                    plan.batch,
                    chunk_size=self.settings.logprob_chunk,
                    return_hidden=self.value_head is not None,
                )
                old[index] = scatter_rows(stats.logprobs.cpu(), sub, width)
                if self.value_head is not None:
                    v = self.value_head(stats.hidden).cpu()
                    values[index] = scatter_rows(v, sub, width)
            if self.reference is not None:
                stats = sequence_logprobs(
                    self.reference, plan.batch, chunk_size=self.settings.logprob_chunk
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
            token_rewards = alg_kl_token_rewards(batch, self.algo)
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
    def _optimize(self, step: int, batch: StepBatch) -> dict[str, float]:
        from agentfly_cli.train import losses

        settings, algo = self.settings, self.algo
        seq_len_constant = algo.seq_len_constant or self.config.rollout.max_total_tokens
        rng = random.Random(f"{settings.seed}:minibatch:{step}")
        sums: dict[str, float] = {}
        counts: dict[str, int] = {}

        def add(name: str, value: float, weight: int = 1) -> None:
            sums[name] = sums.get(name, 0.0) + float(value) * weight
            counts[name] = counts.get(name, 0) + weight

        self.train.model.train()
        width = batch.mask.shape[1]
        optimizer_steps = 0
        for _ in range(settings.epochs):
            order = list(range(len(batch.rows)))
            if settings.epochs * settings.mini_batches > 1:
                rng.shuffle(order)
            size = math.ceil(len(order) / settings.mini_batches)
            for start in range(0, len(order), size):
                indices = order[start : start + size]
                if not indices:
                    continue
                num_tokens = int(batch.mask[indices].sum().item())
                for plan in self._plans(batch, indices):
                    index = torch.tensor(plan.rows)
                    sub = [batch.rows[i] for i in plan.rows]
                    stats = sequence_logprobs(
                        self.train.model,
                        plan.batch,
                        chunk_size=settings.logprob_chunk,
                        entropy=True,
                        return_hidden=self.value_head is not None,
                    )
                    device = stats.logprobs.device
                    logprobs = scatter_rows(stats.logprobs, sub, width)
                    mask = batch.mask[index].to(device)
                    if batch.old_logprobs is not None:
                        old = batch.old_logprobs[index].to(device)
                    else:
                        old = logprobs.detach()
                    advantages = batch.advantages[index].to(device)
                    per_token, loss_metrics = self.policy_loss_fn(
                        logprobs, old, advantages, mask, algo
                    )
                    if algo.tis_cap is not None and batch.has_sampler_logprobs:
                        weights = losses.tis_weights(
                            old, batch.sampler_logprobs[index].to(device), mask, algo.tis_cap
                        )
                        per_token = per_token * weights
                        add("tis/weight_mean", (weights * mask).sum() / mask.sum().clamp(min=1))
                    agg = dict(
                        num_tokens=num_tokens,
                        num_seqs=len(indices),
                        seq_len_constant=seq_len_constant,
                    )
                    policy = losses.aggregate_loss(per_token, mask, algo.loss_agg, **agg)
                    total = policy
                    entropy = scatter_rows(stats.entropy, sub, width)
                    n_tok = int(mask.sum().item())
                    add("entropy", (entropy.detach() * mask).sum() / max(n_tok, 1), n_tok)
                    if algo.entropy_coef > 0:
                        ent_loss = losses.aggregate_loss(entropy, mask, algo.loss_agg, **agg)
                        total = total - algo.entropy_coef * ent_loss
                    if batch.ref_logprobs is not None:
                        ref = batch.ref_logprobs[index].to(device)
                        kl = losses.kl_estimate(logprobs, ref, algo.kl_kind)
                        add("kl", (kl.detach() * mask).sum() / max(n_tok, 1), n_tok)
                        if not algo.kl_in_reward:
                            kl_loss = losses.aggregate_loss(kl, mask, algo.loss_agg, **agg)
                            total = total + algo.kl_coef * kl_loss
                    if self.value_head is not None:
                        values = scatter_rows(self.value_head(stats.hidden), sub, width)
                        v_loss = losses.value_loss(
                            values,
                            batch.old_values[index].to(device),
                            batch.returns[index].to(device),
                            mask,
                            algo.value_clip,
                        )
                        v_loss = losses.aggregate_loss(v_loss, mask, algo.loss_agg, **agg)
                        total = total + algo.value_coef * v_loss
                        add("loss/value", v_loss.item())
                    self.train.backward(total)
                    add("loss/policy", policy.item())
                    add("loss/total", total.item())
                    for key, value in loss_metrics.items():
                        add(key, value, n_tok)
                grad_norm = self.train.step()
                if self.value_optimizer is not None:
                    self.value_optimizer.step()
                    self.value_optimizer.zero_grad(set_to_none=True)
                optimizer_steps += 1
                add("grad_norm", grad_norm)
        out = {name: sums[name] / max(counts[name], 1) for name in sums}
        # losses are summed over micro-batches, averaged over optimizer steps
        for name in ("loss/policy", "loss/total", "loss/value"):
            if name in sums:
                out[name] = sums[name] / max(optimizer_steps, 1)
        out["lr"] = self.train.current_lr()
        out["train/optimizer_steps"] = float(optimizer_steps)
        out["train/trained_tokens"] = float(batch.mask.sum().item())
        out["advantage/mean"] = float(
            (batch.advantages * batch.mask).sum() / batch.mask.sum().clamp(min=1)
        )
        return out

    # ---- sync and checkpoints -------------------------------------------------------------
    async def _sync_weights(self) -> None:
        backend = self.engine.backend
        if self.shared_model:
            # Same tensors: nothing to copy; the backend drops KV computed with old weights.
            await backend.update_weights({})
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


def alg_kl_token_rewards(batch: StepBatch, config) -> torch.Tensor:
    """Per-token ``-kl_coef * k1(old, ref)`` for KL-in-reward."""
    from agentfly_cli.train import losses

    return losses.kl_token_rewards(batch.old_logprobs, batch.ref_logprobs, batch.mask, config)

