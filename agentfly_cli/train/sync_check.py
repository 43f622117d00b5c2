"""The weight-sync tripwire: the rollout backend and the trainer score one fixed probe (short
conversations rendered with the chat template) once before training, which measures their
benign gap (dtype, kernels), and again after each push; a gap over the limit stops the run
with one line. The limit is ``threshold``, or ``baseline_factor`` times the benign gap where
that is larger.

Skipped, with one note, where it cannot work: a backend that cannot score prompts (an
OpenAI-compatible server), several ranks. Skipped without a note for a shared model (the
backend samples from the policy's own model object: the gap is 0 by construction).
"""

from __future__ import annotations

import asyncio
from typing import Any

from agentfly_cli.errors import UserError
from agentfly_cli.settings.train import SyncCheckSettings

#: what the probe says: a tool-use exchange and a plain one
PROBE_CONVERSATIONS = (
    [
        {"role": "user", "content": "What is 17 + 25? Use the calculator if you need it."},
        {"role": "assistant", "content": "17 + 25 = 42, so the answer is 42."},
    ],
    [
        {"role": "user", "content": "Name a prime number larger than ten, and say why."},
        {"role": "assistant", "content": "13 is prime: no number but 1 and 13 divides it."},
    ],
)


class WeightSyncMismatch(UserError):
    """The rollout backend's logprobs on the probe left the trainer's after a push."""


def render_probe(chat: Any, sequences: int, tokens: int) -> list[list[int]]:
    """The first ``tokens`` ids of ``sequences`` probe conversations in ``chat``'s template
    (plain text where the template cannot render them)."""
    probe = []
    for i in range(sequences):
        messages = PROBE_CONVERSATIONS[i % len(PROBE_CONVERSATIONS)]
        try:
            text = chat.render_text(messages)
        except UserError:
            text = " ".join(m["content"] for m in messages)
        ids = chat.encode_text(text * (1 + i // len(PROBE_CONVERSATIONS)))[:tokens]
        if len(ids) >= 2:
            probe.append(ids)
    return probe


def probe_gap(ours: list[list[float]], theirs: list[list[float]]) -> tuple[float, float]:
    """Mean and max of |trainer logprob - backend logprob| over every probe token."""
    gaps = [
        abs(a - b)
        for mine, other in zip(ours, theirs, strict=True)
        for a, b in zip(mine, other, strict=True)
    ]
    return sum(gaps) / max(len(gaps), 1), max(gaps, default=0.0)


class SyncTripwire:
    """Compares the rollout backend with the trainer on a fixed probe after each push."""

    def __init__(
        self, settings: SyncCheckSettings, train: Any, backend: Any, chat: Any, *, shared: bool
    ) -> None:
        self.settings, self.train, self.backend = settings, train, backend
        self.probe = render_probe(chat, settings.probe_sequences, settings.probe_tokens)
        self.baseline: float | None = None  # the benign gap, before any push
        self.notes: list[str] = []
        self.active = settings.enabled and not shared and bool(self.probe)
        if self.active and not getattr(backend, "scores_prompts", False):
            self._skip("it cannot score prompts (prompt logprobs)")
        elif self.active and train.world_size > 1:
            self._skip("the trainer runs on several ranks")

    @property
    def backend_name(self) -> str:
        return getattr(self.backend, "name", "rollout")

    def _skip(self, why: str) -> None:
        self.active = False
        self.notes.append(
            f"trainer.sync_check is skipped for the {self.backend_name} backend: {why}; "
            "sync/sampler_kl_mean still compares its sampled logprobs with the trainer's"
        )

    def take_notes(self) -> list[str]:
        """The notes not yet shown (each is shown once)."""
        notes, self.notes = self.notes, []
        return notes

    @property
    def limit(self) -> float:
        """The gap that stops the run: the threshold, or a multiple of the benign gap."""
        return max(self.settings.threshold, self.settings.baseline_factor * (self.baseline or 0))

    async def start(self) -> None:
        """Measure the benign gap while both sides hold the same weights (before training, or
        right after a resumed run's first push)."""
        if self.active and self.baseline is None:
            gap = await self._gap()
            if gap is not None:
                self.baseline = gap[0]

    async def check(self, version: int) -> dict[str, float]:
        """Score the probe on both sides; the gap as metrics, or one error over the limit.
        The first check of a run without a baseline takes it (:meth:`start`)."""
        if not self.active:
            return {}
        if self.baseline is None:
            await self.start()
            if self.baseline is None:
                return {}
            return {"sync/probe_gap_mean": self.baseline, "sync/probe_gap_before": self.baseline}
        gap = await self._gap()
        if gap is None:
            return {}
        mean, worst = gap
        if mean > self.limit:
            tokens = sum(len(row) - 1 for row in self.probe)
            raise WeightSyncMismatch(
                f"weight sync check failed after push {version}: the {self.backend_name} "
                f"backend's logprobs on the {tokens}-token probe differ from the trainer's by "
                f"{mean:.4g} per token on average (max {worst:.4g}; limit {self.limit:.4g}, "
                f"before training {self.baseline:.4g}); likely causes: a dtype mismatch, a "
                "stale KV / prefix cache, or a push that failed or went to the wrong weight "
                "names; fix the backend, or raise trainer.sync_check.threshold "
                "(trainer.sync_check.enabled=false turns the check off)"
            )
        return {
            "sync/probe_gap_mean": mean,
            "sync/probe_gap_max": worst,
            "sync/probe_gap_before": self.baseline,
        }

    async def _gap(self) -> tuple[float, float] | None:
        try:
            theirs = await self.backend.prompt_logprobs(self.probe)
        except NotImplementedError:
            self._skip("it cannot score prompts (prompt logprobs)")
            return None
        ours = await asyncio.to_thread(self._trainer_scores)
        return probe_gap(ours, theirs)

    def _trainer_scores(self) -> list[list[float]]:
        """The trainer's logprobs on the probe (no grad, temperature 1, model in eval mode)."""
        import torch

        from agentfly_cli.train.tensors.logprobs import SequenceBatch, sequence_logprobs

        model = self.train.model
        scores = []
        with torch.no_grad():
            model.eval()
            for ids in self.probe:
                tokens = torch.tensor([ids], device=self.train.device)
                inputs, targets = tokens[:, :-1], tokens[:, 1:]
                ones = torch.ones_like(inputs)
                batch = SequenceBatch.unshared(inputs, ones, targets, ones.bool())
                scores.append(sequence_logprobs(model, batch).logprobs.float().cpu().tolist())
        return scores
