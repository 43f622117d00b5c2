"""On-policy distillation: a teacher scores the tokens the student sampled, and the per-token
reverse KL is (part of) the advantage.

For each trained token x_t (loss mask 1) the single-sample reverse-KL estimate is
``k1_t = log p_student(x_t) - log p_teacher(x_t)``; the advantage term is ``-coef * k1_t``,
with no discount across tokens: each token is credited only with its own log-ratio. This is
the objective of Thinking Machines' "On-Policy Distillation" (Lu et al., 2025) and the
on-policy, reverse-KL case of GKD (Agarwal et al., "On-Policy Distillation of Language Models:
Learning from Self-Generated Mistakes", ICLR 2024). ``student`` is the trainer's old-policy
logprobs (the weights that sampled), ``teacher`` the frozen teacher's over the same tokens at
the same temperature.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

    from agentfly_cli.settings.distill import DistillSettings


def distill_term(
    teacher: torch.Tensor, student: torch.Tensor, mask: torch.Tensor, coef: float
) -> torch.Tensor:
    """``coef * (teacher - student)`` on the trained tokens (``mask`` 1), exactly 0 elsewhere."""
    return (coef * (teacher - student)).where(mask > 0, teacher.new_zeros(()))


def distill_advantages(
    advantages: torch.Tensor,
    teacher: torch.Tensor,
    student: torch.Tensor,
    mask: torch.Tensor,
    settings: DistillSettings,
) -> tuple[torch.Tensor, dict[str, float]]:
    """The advantages with the distillation term (``add``: the estimator's plus the term;
    ``only``: the term alone) and the metrics ``distill/reverse_kl`` (mean k1 over the trained
    tokens) and ``distill/term_mean`` (the term's mean over them)."""
    term = distill_term(teacher, student, mask, settings.coef)
    trained = mask > 0
    count = max(int(trained.sum()), 1)
    k1 = (student - teacher).where(trained, student.new_zeros(()))
    metrics = {
        "distill/reverse_kl": float(k1.sum()) / count,
        "distill/term_mean": float(term.sum()) / count,
    }
    out = term if settings.mode == "only" else advantages + term
    return out, metrics
