"""On-policy distillation: ``trainer.distill`` (a teacher scores the tokens the student
sampled; agentfly_cli/algorithms/distill.py computes the per-token term)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field


class DistillSettings(BaseModel):
    """A teacher's per-token reverse KL as (part of) the advantage: docs/training.md."""

    model_config = ConfigDict(extra="forbid")

    teacher: str | None = Field(
        None,
        description="the teacher: a local model folder or a --model alias (tiny, smollm2) with "
        "the student's tokenizer; loaded like the reference model (the policy's dtype and "
        "device, frozen); null: no distillation",
    )
    coef: float = Field(
        1.0,
        ge=0.0,
        allow_inf_nan=False,
        description="weight of the per-token term coef * (log p_teacher - log p_student)",
    )
    mode: Literal["add", "only"] = Field(
        "add",
        description="add: the task's advantage (after the estimator, e.g. GRPO's group "
        "normalisation) plus the term; only: the term alone (the rewards are still logged)",
    )

    @property
    def enabled(self) -> bool:
        return self.teacher is not None
