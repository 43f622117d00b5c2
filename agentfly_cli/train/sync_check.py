"""The weight-sync tripwire: after each push, the rollout backend and the trainer score one
fixed probe (the first tokens of the first step's first chains); a mean gap over
``trainer.sync_check.threshold`` stops the run with one line.

Skipped, with one note, where it cannot work: a backend that cannot score prompts (an
OpenAI-compatible server), several ranks. Skipped without a note for a shared model (the
backend samples from the policy's own model object: the gap is 0 by construction).
"""

from __future__ import annotations

import asyncio
from typing import Any

from agentfly_cli.errors import UserError
from agentfly_cli.settings.train import SyncCheckSettings


class WeightSyncMismatch(UserError):
    """The rollout backend's logprobs on the probe left the trainer's after a push."""


def probe_of(trajectories: list[Any], sequences: int, tokens: int) -> list[list[int]]:
    """The first ``tokens`` ids of the first ``sequences`` chains with at least two ids."""
    probe = [list(t.ids[:tokens]) for t in trajectories if len(t.ids) >= 2]
    return probe[:sequences]


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
        self, settings: SyncCheckSettings, train: Any, backend: Any, *, shared: bool
    ) -> None:
        self.settings, self.train, self.backend = settings, train, backend
        self.probe: list[list[int]] | None = None
        self.notes: list[str] = []
        self.active = settings.enabled and not shared
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

    def observe(self, trajectories: list[Any]) -> None:
        """Fix the probe from the first step's chains that have ids."""
        if self.active and not self.probe:
            s = self.settings
            self.probe = probe_of(trajectories, s.probe_sequences, s.probe_tokens) or None

    async def check(self, version: int) -> dict[str, float]:
        """Score the probe on both sides; the gap as metrics, or one error over the threshold."""
        if not self.active or not self.probe:
            return {}
        try:
            theirs = await self.backend.prompt_logprobs(self.probe)
        except NotImplementedError:
            self._skip("it cannot score prompts (prompt logprobs)")
            return {}
        ours = await asyncio.to_thread(self._trainer_scores)
        mean, worst = probe_gap(ours, theirs)
        threshold = self.settings.threshold
        if mean > threshold:
            tokens = sum(len(row) for row in ours)
            raise WeightSyncMismatch(
                f"weight sync check failed after push {version}: the {self.backend_name} "
                f"backend's logprobs on the {tokens}-token probe differ from the trainer's by "
                f"{mean:.4g} per token on average (max {worst:.4g}; threshold {threshold:g}); "
                "likely causes: a dtype mismatch, a stale KV / prefix cache, or a push that "
                "failed or went to the wrong weight names; fix the backend, or raise "
                "trainer.sync_check.threshold (trainer.sync_check.enabled=false turns it off)"
            )
        return {"sync/probe_gap_mean": mean, "sync/probe_gap_max": worst}

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
