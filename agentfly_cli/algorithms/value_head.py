"""The value head of PPO with GAE: a scalar per position on the policy's last hidden state,
and the critic that trains it (the head with its optimizer)."""

from __future__ import annotations

import math
from typing import Any

import torch

from agentfly_cli.train_backends import distributed


class ValueHead(torch.nn.Module):
    """A scalar value per position on top of the policy's last hidden state (PPO/GAE)."""

    def __init__(self, hidden_size: int) -> None:
        super().__init__()
        self.proj = torch.nn.Linear(hidden_size, 1)
        torch.nn.init.zeros_(self.proj.weight)
        torch.nn.init.zeros_(self.proj.bias)

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.proj(hidden.float()).squeeze(-1)

    def step(
        self, optimizer: torch.optim.Optimizer, policy_grad_norm: float, max_norm: float | None
    ) -> None:
        """The head's optimizer step, skipped with the policy's when gradients are not finite."""
        distributed.average_gradients(self.parameters())
        if math.isfinite(policy_grad_norm):
            if max_norm is not None:
                torch.nn.utils.clip_grad_norm_(self.parameters(), max_norm)
            optimizer.step()
        optimizer.zero_grad(set_to_none=True)


class Critic:
    """A :class:`ValueHead` and its optimizer, trained beside the policy; checkpointed under
    the keys ``value_head`` and ``value_optimizer``."""

    def __init__(self, hidden_size: int, device: Any, *, lr: float) -> None:
        self.head = ValueHead(hidden_size).to(device)
        self.optimizer = torch.optim.AdamW(self.head.parameters(), lr=lr)

    def __call__(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.head(hidden)

    def step(self, policy_grad_norm: float, max_norm: float | None) -> None:
        """The head's optimizer step (:meth:`ValueHead.step`)."""
        self.head.step(self.optimizer, policy_grad_norm, max_norm)

    def state_dict(self) -> dict[str, Any]:
        return {
            "value_head": self.head.state_dict(),
            "value_optimizer": self.optimizer.state_dict(),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.head.load_state_dict(state["value_head"])
        self.optimizer.load_state_dict(state["value_optimizer"])
