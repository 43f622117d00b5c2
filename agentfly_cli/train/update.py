"""The update phase of a training step: trajectories into tensors, old and reference
logprobs, advantages, then epochs x mini-batches of optimizer steps over micro-batches.

:class:`PolicyUpdate` holds what the update needs (the train backend, the reference model, a
value head for GAE) and reports its progress (micro-batches done of the total) to a
:class:`~agentfly_cli.telemetry.step_progress.StepProgress`.
"""

from __future__ import annotations

import math
import random
from typing import Any

import torch

from agentfly_cli.algorithms import interfaces as alg
from agentfly_cli.algorithms.value_head import Critic
from agentfly_cli.algorithms.zero_advantage import (
    rows_with_gradient,
    zero_advantage_rows_are_inert,
)
from agentfly_cli.runtime.malloc import trim_heap
from agentfly_cli.settings.run import RunSettings
from agentfly_cli.telemetry.step_progress import StepProgress
from agentfly_cli.train.tensors.batch import MicroBatch, plan_micro_batches, scatter_rows
from agentfly_cli.train.tensors.logprobs import SequenceBatch, sequence_logprobs
from agentfly_cli.train.tensors.step_batch import (
    StepBatch,
    greedy_baselines,
    split_greedy,
    trainable,
)
from agentfly_cli.train_backends import distributed
from agentfly_cli.trajectory import Trajectory


class Tally:
    """Weighted means of per-micro-batch metrics; losses summed per optimizer step."""

    def __init__(self) -> None:
        self.sums: dict[str, float] = {}
        self.weights: dict[str, float] = {}
        self.extremes: dict[str, float] = {}

    def add(self, name: str, value: float, weight: float = 1) -> None:
        self.sums[name] = self.sums.get(name, 0.0) + float(value) * weight
        self.weights[name] = self.weights.get(name, 0.0) + weight

    def extreme(self, name: str, value: float, *, high: bool) -> None:
        """Keep the largest (``high``) or smallest value of ``name`` over the step."""
        if name not in self.extremes:
            self.extremes[name] = float(value)
        else:
            pick = max if high else min
            self.extremes[name] = pick(self.extremes[name], float(value))

    def means(self, *, per_step: tuple[str, ...], steps: int) -> dict[str, float]:
        out = {name: total / max(self.weights[name], 1e-12) for name, total in self.sums.items()}
        out.update(self.extremes)
        for name in per_step:  # micro-batch losses add up to the step's loss
            if name in self.sums:
                out[name] = self.sums[name] / max(steps, 1)
        return out


def fill_advantages(
    batch: StepBatch, metrics: dict[str, float], advantage_fn: Any, algo: Any, reference: bool
) -> None:
    """``batch``'s advantages and returns by ``advantage_fn`` (with the KL per token in the
    rewards where ``algo`` puts it there and a ``reference`` model ran); its metrics."""
    token_rewards = None
    if reference and algo.kl_in_reward:
        from agentfly_cli.algorithms import losses

        token_rewards = losses.kl_token_rewards(
            batch.old_logprobs, batch.ref_logprobs, batch.mask, algo
        )
    data = alg.AdvantageInput(
        rewards=batch.rewards,
        mask=batch.mask,
        group_ids=[r.group for r in batch.rows],
        values=batch.old_values,
        token_rewards=token_rewards,
        turns=batch.turns,
        episodes=batch.episodes,
        baselines=batch.baselines,
    )
    out = advantage_fn(data, algo)
    batch.advantages = out.advantages * batch.mask
    batch.returns = out.returns
    metrics.update(out.metrics)


def add_distill_term(batch: StepBatch, metrics: dict[str, float], settings: Any) -> None:
    """On-policy distillation (``trainer.distill``): the teacher's per-token reverse KL to the
    student (its old-policy logprobs) into ``batch.advantages`` (algorithms/distill.py)."""
    from agentfly_cli.algorithms.distill import distill_advantages

    batch.advantages, found = distill_advantages(
        batch.advantages, batch.teacher_logprobs, batch.old_logprobs, batch.mask, settings
    )
    metrics.update(found)


def masks_importance_sampling(algo: Any) -> bool:
    """Masked importance sampling is on: tokens whose trainer / sampler probability ratio
    lies outside [1 / tis_cap, tis_cap] leave the loss."""
    return algo.tis_cap is not None and algo.tis_mode == "mask"


def reject_tokens(batch: StepBatch, algo: Any, metrics: dict[str, float]) -> None:
    """Masked importance sampling as verl's token-level rejection (``rollout_rs: token``,
    which replaces the response mask): the rejected tokens leave ``batch.loss_mask``, so
    they are out of the policy loss, its normalisers (the mean is over the accepted tokens)
    and the entropy, KL and value terms. The advantages were computed on every sampled
    token. ``tis/accepted_frac``: the share of trained tokens kept."""
    if not masks_importance_sampling(algo) or not batch.has_sampler_logprobs:
        return
    from agentfly_cli.algorithms import losses

    batch.loss_mask = losses.tis_mask(
        batch.old_logprobs, batch.sampler_logprobs, batch.mask, algo.tis_cap
    )
    trained = float(batch.mask.sum())
    metrics["tis/accepted_frac"] = float(batch.loss_mask.sum()) / max(trained, 1.0)


def truncated_importance_sampling(
    per_token: torch.Tensor,
    old: torch.Tensor,
    sampler: torch.Tensor,
    mask: torch.Tensor,
    sampled: torch.Tensor,
    algo: Any,
    tally: Tally,
) -> torch.Tensor:
    """The per-token loss weighted by the capped trainer / sampler ratios (``tis_mode:
    truncate``; ``mask``: as it is, the rejected tokens being off ``mask`` already), and the
    ratios' statistics (``tis/...``) in ``tally``."""
    from agentfly_cli.algorithms import losses

    n_sampled = int(sampled.sum().item())
    if algo.tis_mode == "mask":
        weights = mask  # the rejected tokens are already off the loss mask
    else:
        weights = losses.tis_weights(old, sampler, mask, algo.tis_cap)
        per_token = per_token * weights
    mean_weight = float((weights * sampled).sum()) / max(n_sampled, 1)
    tally.add("tis/weight_mean", mean_weight, n_sampled)
    for name, value in losses.importance_ratio_stats(old, sampler, sampled, algo.tis_cap).items():
        if name in ("ratio_max", "ratio_min"):
            tally.extreme(f"tis/{name}", value, high=name == "ratio_max")
        else:
            tally.add(f"tis/{name}", value, n_sampled)
    return per_token


class PolicyUpdate:
    """Old/reference logprobs, advantages and the optimizer steps of one training step."""

    def __init__(
        self,
        config: RunSettings,
        train: Any,
        *,
        eot_token_id: int,
        reference: Any,
        share_prefix: bool,
        chunk: int,
        temperature: float,
        advantage_fn: Any,
        policy_loss_fn: Any,
        progress: StepProgress | None = None,
        teacher: Any = None,
    ) -> None:
        self.config = config
        self.settings = config.trainer
        self.algo = config.trainer.algorithm
        self.train = train
        self.eot_token_id = eot_token_id
        self.reference = reference
        self.teacher = teacher  # on-policy distillation (trainer.distill)
        self.share_prefix = share_prefix
        self.chunk = chunk
        self.temperature = temperature
        self.progress = progress or StepProgress()
        self.advantage_fn = advantage_fn  # looked up once, by the trainer
        self.policy_loss_fn = policy_loss_fn
        self.critic = None  # GAE: a value head and its optimizer
        if self.advantage_fn.needs_values:
            hidden = train.unwrapped().config.hidden_size
            self.critic = Critic(hidden, train.device, lr=config.trainer.backend.lr * 10)
        self.skips_zero_advantage = zero_advantage_rows_are_inert(
            self.settings,
            has_reference=reference is not None,
            has_value_head=self.critic is not None,
        )

    def extra_state(self) -> dict[str, Any]:
        """What a checkpoint keeps of this update beside the policy: the critic's value head
        and optimizer (keys ``value_head`` and ``value_optimizer``), where there is one."""
        return {} if self.critic is None else self.critic.state_dict()

    def load_extra_state(self, extra: dict[str, Any]) -> None:
        """Restore what :meth:`extra_state` kept; without a value head in ``extra`` (or in
        this run) nothing changes."""
        if self.critic is not None and "value_head" in extra:
            self.critic.load_state_dict(extra)

    def prepare(self, trajectories: list[Trajectory], metrics: dict[str, float]):
        """The step's batch with its old/reference logprobs and advantages (None: nothing to
        train on; with several ranks, this rank still joins the others' passes)."""
        # remax's baseline chains
        trajectories, greedy = split_greedy(trajectories, self.algo.exclude_infra_failures)
        usable = trainable(trajectories, self.algo, metrics)
        if not usable:
            if distributed.active():
                self._reference_pass(None)  # the other ranks' passes need this one's
            return None
        batch = StepBatch.of(usable, self.algo)
        batch.baselines = greedy_baselines(batch, greedy)
        self._reference_pass(batch)
        fill_advantages(batch, metrics, self.advantage_fn, self.algo, self.reference is not None)
        if self.teacher is not None:
            add_distill_term(batch, metrics, self.settings.distill)
        reject_tokens(batch, self.algo, metrics)
        return batch

    def _needs_old_pass(self) -> bool:
        settings, algo = self.settings, self.algo
        return (
            settings.epochs * settings.mini_batches > 1
            or self.advantage_fn.needs_values
            or (algo.kl_coef > 0 and algo.kl_in_reward)
            # masked IS: the accepted tokens, and so the loss's normalisers, before any pass
            or masks_importance_sampling(algo)
            or self.teacher is not None  # the student's logprobs of the distillation term
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
            plain_grads=self.train.plain_grad_accumulation,
            **options,
        )

    def _idle_pass(self, *, backward: bool) -> None:
        """A zero-weight pass over one token: keeps this rank in step with busier ranks."""
        token = torch.tensor([[self.eot_token_id]], device=self.train.device)
        one = SequenceBatch.unshared(token, torch.ones_like(token), token, token > -1)
        stats = self._policy_logprobs(one, return_hidden=self.critic is not None)
        if backward:
            loss = stats.logprobs.sum() * 0.0
            if self.critic is not None:
                loss = loss + self.critic(stats.hidden).sum() * 0.0
            self.train.backward(loss)

    @torch.no_grad()
    def _reference_pass(self, batch: StepBatch | None) -> None:
        """Old-policy logprobs and values, and the frozen models' (reference, teacher)
        logprobs, where the algorithm needs them, in no-grad forward passes over the batch."""
        need_old = self._needs_old_pass()
        frozen = {"ref_logprobs": self.reference, "teacher_logprobs": self.teacher}
        frozen = {name: model for name, model in frozen.items() if model is not None}
        if not need_old and not frozen:
            return
        self.train.model.eval()
        plans = self._plans(batch, range(len(batch.rows)) if batch is not None else [])
        progress = self.progress
        progress.begin("logprobs", step=progress.step, total=len(plans), unit="micro-batches")
        if batch is None:
            for _ in plans:
                if need_old:
                    self._idle_pass(backward=False)
                progress.advance()
            progress.end()
            return
        width = batch.mask.shape[1]
        old = torch.zeros_like(batch.mask)
        scored = {name: torch.zeros_like(batch.mask) for name in frozen}
        values = torch.zeros_like(batch.mask)
        for plan in plans:
            if plan is None:
                if need_old:
                    self._idle_pass(backward=False)
                progress.advance()
                continue
            sub = [batch.rows[i] for i in plan.rows]
            index = torch.tensor(plan.rows)
            if need_old:
                stats = self._policy_logprobs(plan.batch, return_hidden=self.critic is not None)
                old[index] = scatter_rows(stats.logprobs.cpu(), sub, width)
                if self.critic is not None:
                    v = self.critic(stats.hidden).cpu()
                    values[index] = scatter_rows(v, sub, width)
            for name, model in frozen.items():  # the sampler's temperature, as the policy's
                stats = sequence_logprobs(
                    model, plan.batch, chunk_size=self.chunk, temperature=self.temperature
                )
                scored[name][index] = scatter_rows(stats.logprobs.cpu(), sub, width)
            progress.advance(tokens=plan.batch.num_real_tokens)
        progress.end()
        if need_old:
            batch.old_logprobs = old
        if self.critic is not None:
            batch.old_values = values
        for name, logprobs in scored.items():
            setattr(batch, name, logprobs)

    # ---- the update --------------------------------------------------------------------------
    def optimize(self, step: int, batch: StepBatch | None) -> dict[str, float]:
        """Epochs x mini-batches of optimizer steps over the batch (None: this rank has no
        rows this step and only keeps in step with the others)."""
        settings = self.settings
        rng = random.Random(f"{settings.seed}:minibatch:{step}")
        tally = Tally()
        self.train.model.train()
        rows = len(batch.rows) if batch is not None else 0
        carries = (
            [] if batch is None else rows_with_gradient(batch.advantages, self.skips_zero_advantage)
        )
        schedule = []  # (indices, micro-batch plans) of each optimizer step, planned first
        for _ in range(settings.epochs):
            order = list(range(rows))
            if settings.epochs * settings.mini_batches > 1:
                rng.shuffle(order)
            size = max(1, math.ceil(rows / settings.mini_batches))
            for part in range(settings.mini_batches):
                indices = order[part * size : (part + 1) * size]
                plans = self._plans(batch, [i for i in indices if carries[i]])
                if not plans and self.skips_zero_advantage and distributed.agree_max(len(indices)):
                    # every row skipped: the optimizer still steps on zero gradients, as it
                    # would have after passes over them (AdamW's momentum and decay)
                    plans = [None]
                if plans:  # else every rank agrees: nothing left for this mini-batch
                    schedule.append((indices, plans))
        progress = self.progress
        progress.begin(
            "train", step=step, total=sum(len(plans) for _, plans in schedule), unit="micro-batches"
        )
        optimizer_steps = 0
        trim_heap()  # what the rollout freed (train/heap.py)
        for indices, plans in schedule:
            # Normalisers over the whole mini-batch, every rank's part of it: each rank's
            # loss is scaled by the world size since DeepSpeed averages the gradients.
            local_tokens = int(batch.trained_mask[indices].sum().item()) if indices else 0
            num_tokens = distributed.all_sum(local_tokens)
            num_seqs = distributed.all_sum(len(indices))
            for plan in plans:
                if plan is None:
                    self._idle_pass(backward=True)
                    progress.advance()
                    continue
                padded = plan.batch.num_tokens
                real = plan.batch.num_real_tokens
                tally.add("train/padding_fraction", 1 - real / padded, padded)
                loss = self._micro_loss(batch, plan, num_tokens, num_seqs, tally)
                self.train.backward(loss * self.train.world_size)
                trim_heap()
                progress.advance(tokens=real)
            grad_norm = self.train.step()
            tally.add("grad_norm", grad_norm)
            if self.critic is not None:
                self.critic.step(grad_norm, settings.backend.max_grad_norm)
            optimizer_steps += 1
        progress.end()
        out = tally.means(
            per_step=("loss/policy", "loss/total", "loss/value"), steps=optimizer_steps
        )
        out["lr"] = self.train.current_lr()
        out["train/optimizer_steps"] = float(optimizer_steps)
        if batch is not None:
            out["train/trained_tokens"] = float(batch.mask.sum().item())
        if self.skips_zero_advantage:
            out["train/skipped_zero_advantage"] = float(carries.count(False))
        return out

    def _micro_loss(
        self, batch: StepBatch, plan: MicroBatch, num_tokens: float, num_seqs: float, tally: Tally
    ) -> torch.Tensor:
        """The loss of one micro-batch, normalised by its mini-batch's token and row counts so
        that the micro-batch losses sum to the mini-batch loss."""
        from agentfly_cli.algorithms import losses

        algo = self.algo
        width = batch.mask.shape[1]
        index = torch.tensor(plan.rows)
        sub = [batch.rows[i] for i in plan.rows]
        stats = self._policy_logprobs(
            plan.batch, entropy=True, return_hidden=self.critic is not None
        )
        device = stats.logprobs.device

        def rows_of(matrix: torch.Tensor) -> torch.Tensor:
            return matrix[index].to(device)

        logprobs = scatter_rows(stats.logprobs, sub, width)
        sampled = rows_of(batch.mask)
        mask = rows_of(batch.trained_mask)  # less the tokens masked IS rejected
        n_tok = int(mask.sum().item())
        old = rows_of(batch.old_logprobs) if batch.old_logprobs is not None else logprobs.detach()
        per_token, loss_metrics = self.policy_loss_fn(
            logprobs, old, rows_of(batch.advantages), mask, algo
        )
        if algo.tis_cap is not None and batch.has_sampler_logprobs:
            sampler = rows_of(batch.sampler_logprobs)
            per_token = truncated_importance_sampling(
                per_token, old, sampler, mask, sampled, algo, tally
            )
        if batch.has_sampler_logprobs:  # the sampler's drift from the trainer (k3)
            drift = losses.sampler_kl_stats(old, rows_of(batch.sampler_logprobs), sampled)
            if drift:
                tally.add("sync/sampler_kl_mean", drift["kl_mean"], int(sampled.sum().item()))
                tally.extreme("sync/sampler_kl_max", drift["kl_max"], high=True)

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
        if self.critic is not None:
            values = scatter_rows(self.critic(stats.hidden), sub, width)
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
