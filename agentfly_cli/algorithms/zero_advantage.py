"""Rows whose advantages are all 0 (a GRPO group of equal rewards): when their passes can be
skipped without changing the update (``trainer.skip_zero_advantage``), and which rows those are.

Under the built-in policy losses such a row's loss and gradient are exactly 0; the update skips
its forward and backward passes while the loss's normalisers still count it.
"""

from __future__ import annotations

from typing import Any

#: Built-in policy losses whose loss and gradient are exactly 0 on a row with zero advantages.
#: Not clip_cov and kl_cov: the tokens they select depend on every row of the micro-batch.
POLICY_LOSSES_ZERO_AT_ZERO_ADVANTAGE = frozenset({"ppo", "gspo", "cispo", "sapo", "gpg"})


def zero_advantage_rows_are_inert(
    settings: Any, *, has_reference: bool, has_value_head: bool
) -> bool:
    """Whether a zero-advantage row adds exactly nothing to the gradient under ``settings``
    (``trainer``): the switch is on, the policy loss is a built-in one (-A times a ratio term)
    and no entropy bonus, KL loss or value loss reads the row."""
    algo = settings.algorithm
    return (
        settings.skip_zero_advantage
        and algo.policy_loss in POLICY_LOSSES_ZERO_AT_ZERO_ADVANTAGE
        and algo.entropy_coef == 0
        and (not has_reference or algo.kl_in_reward)
        and not has_value_head
    )


def rows_with_gradient(advantages: Any, skipping: bool) -> list[bool]:
    """Per row of ``advantages`` ([B, T]), whether its passes can change the update (all True
    unless ``skipping``; a NaN advantage is kept, so that it still shows)."""
    if not skipping:
        return [True] * advantages.shape[0]
    return (advantages != 0).any(dim=1).tolist()
