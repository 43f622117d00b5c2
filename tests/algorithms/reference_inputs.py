"""Random float64 inputs for checking the algorithms against independent transcriptions:
multi-turn rows (trained spans between untrained observation tokens) of uneven lengths."""

from __future__ import annotations

import random

import torch

#: each row's spans: (trained, length) in order; three rows of several turns, one of one turn
SPANS = [
    [(0, 2), (1, 3), (0, 2), (1, 4), (0, 1)],
    [(0, 1), (1, 5), (0, 3), (1, 1), (0, 2)],
    [(0, 3), (1, 2), (0, 1), (1, 2), (0, 1), (1, 3)],
    [(0, 4), (1, 7), (0, 1)],
    [(0, 2), (1, 1), (0, 9)],
]
WIDTH = 12


def multi_turn_mask() -> torch.Tensor:
    """[5, 12] float64: 1 on the trained (sampled) tokens of each row's turns."""
    rows = []
    for spans in SPANS:
        row = [float(trained) for trained, length in spans for _ in range(length)]
        rows.append(row + [0.0] * (WIDTH - len(row)))
    return torch.tensor(rows, dtype=torch.float64)


def policy_inputs(seed: int, spread: float = 0.4):
    """(logprobs, old_logprobs, advantages, mask): logprobs below 0, log-ratios with a std of
    ``spread`` (so that many fall outside a 0.2 clip), per-token advantages of both signs;
    the values off the mask are junk (large, or inf) that must not leak."""
    generator = torch.Generator().manual_seed(seed)
    mask = multi_turn_mask()
    shape = mask.shape
    logprobs = -torch.rand(shape, generator=generator, dtype=torch.float64) * 3 - 0.05
    old = logprobs + torch.randn(shape, generator=generator, dtype=torch.float64) * spread
    advantages = torch.randn(shape, generator=generator, dtype=torch.float64)
    off = ~mask.bool()
    logprobs = torch.where(off, -1e4, logprobs)
    old = torch.where(off, -torch.inf, old)
    advantages = torch.where(off, 1e6, advantages)
    return logprobs, old, advantages, mask


def trained_positions(mask: torch.Tensor) -> list[tuple[int, int]]:
    """The (row, column) of every trained token, row-major."""
    return [(i, t) for i in range(mask.shape[0]) for t in range(mask.shape[1]) if mask[i, t]]


def random_rewards(seed: int, count: int) -> list[float]:
    """``count`` rewards in [0, 1), some repeated within a group by the caller."""
    rng = random.Random(seed)
    return [round(rng.random(), 3) for _ in range(count)]
