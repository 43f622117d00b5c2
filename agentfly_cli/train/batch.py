"""Trajectories into training tensors: rows of trained tokens, and padded micro-batches.

Every quantity the algorithms need per token (advantages, old, reference and sampler
logprobs) lives in a ``[rows, L]`` matrix of *trained* tokens only: row ``i`` holds the
``loss_mask == 1`` tokens of trajectory ``i`` in order, padded to ``L``. A micro-batch's
forward pass returns its trained-token logprobs in the same row-major order, so they scatter
straight into that layout.

Micro-batches are built for little padding: the rows of one group (same task, same prompt)
share their prompt prefix, forwarded once; rows are sorted by length and packed up to a
token budget.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from agentfly_cli.train.logprobs import SequenceBatch

MIN_SHARED_PREFIX = 16  # shorter common prefixes are not worth a separate pass


@dataclass
class TrainRow:
    """One trajectory reduced to what training reads."""

    ids: list[int]
    loss_mask: list[int]
    group: str

    @property
    def first_trained(self) -> int:
        return self.loss_mask.index(1)

    @property
    def num_trained(self) -> int:
        return sum(self.loss_mask)


@dataclass
class MicroBatch:
    """A forward-pass unit: which rows, and their tensors."""

    rows: list[int]
    batch: SequenceBatch

    def to(self, device) -> MicroBatch:
        b = self.batch
        return MicroBatch(
            self.rows,
            SequenceBatch(
                *(
                    t.to(device)
                    for t in (b.prefix_ids, b.input_ids, b.attention_mask, b.targets, b.target_mask)
                )
            ),
        )


def token_matrix(rows: Sequence[TrainRow], values: Sequence[Sequence[float]]) -> torch.Tensor:
    """``[len(rows), L]`` float32 matrix of per-trained-token values (0-padded)."""
    width = max((r.num_trained for r in rows), default=0)
    out = torch.zeros(len(rows), max(width, 1), dtype=torch.float32)
    for i, vals in enumerate(values):
        if len(vals):
            out[i, : len(vals)] = torch.as_tensor(list(vals), dtype=torch.float32)
    return out


def trained_mask(rows: Sequence[TrainRow]) -> torch.Tensor:
    """``[len(rows), L]`` 1 where a row has a trained token."""
    counts = [r.num_trained for r in rows]
    width = max(max(counts, default=0), 1)
    return (torch.arange(width).unsqueeze(0) < torch.tensor(counts).unsqueeze(1)).float()


def shared_prefix_length(rows: Sequence[TrainRow]) -> int:
    """Tokens every row starts with, stopping before the position that predicts the first
    trained token of any row."""
    if not rows:
        return 0
    limit = min(r.first_trained for r in rows) - 1
    first = rows[0].ids
    length = 0
    while length < limit and all(
        len(r.ids) > length and r.ids[length] == first[length] for r in rows
    ):
        length += 1
    return length if length >= MIN_SHARED_PREFIX else 0


def make_sequence_batch(rows: Sequence[TrainRow], prefix_len: int) -> SequenceBatch:
    """Right-padded rows after ``prefix_len`` shared tokens."""
    width = max(len(r.ids) - 1 - prefix_len for r in rows)
    shape = (len(rows), width)
    input_ids = torch.zeros(shape, dtype=torch.long)
    attention = torch.zeros(shape, dtype=torch.long)
    targets = torch.zeros(shape, dtype=torch.long)
    target_mask = torch.zeros(shape, dtype=torch.bool)
    for i, row in enumerate(rows):
        length = len(row.ids) - 1 - prefix_len
        input_ids[i, :length] = torch.tensor(row.ids[prefix_len:-1])
        attention[i, :length] = 1
        targets[i, :length] = torch.tensor(row.ids[prefix_len + 1 :])
        target_mask[i, :length] = torch.tensor(row.loss_mask[prefix_len + 1 :], dtype=torch.bool)
    prefix = torch.tensor(rows[0].ids[:prefix_len], dtype=torch.long)
    return SequenceBatch(prefix, input_ids, attention, targets, target_mask)


def plan_micro_batches(
    rows: Sequence[TrainRow],
    indices: Sequence[int],
    *,
    max_tokens: int,
    share_prefix: bool = True,
) -> list[MicroBatch]:
    """Pack ``rows[indices]`` into micro-batches of at most ``max_tokens`` padded tokens
    (a longer row goes alone). Rows are sorted by length (bucketing); with ``share_prefix``
    a micro-batch holds rows of one group and forwards their common prompt once."""
    buckets: dict[str, list[int]] = {}
    for index in indices:
        key = rows[index].group if share_prefix else ""
        buckets.setdefault(key, []).append(index)
    plans: list[MicroBatch] = []
    for members in buckets.values():
        prefix = shared_prefix_length([rows[i] for i in members]) if share_prefix else 0
        members.sort(key=lambda i: len(rows[i].ids))
        current: list[int] = []
        for index in members:
            width = len(rows[index].ids) - 1 - prefix
            if current and (len(current) + 1) * width > max_tokens:
                plans.append(_micro(rows, current, prefix))
                current = []
            current.append(index)
        if current:
            plans.append(_micro(rows, current, prefix))
    return plans


def _micro(rows: Sequence[TrainRow], members: list[int], prefix: int) -> MicroBatch:
    chosen = [rows[i] for i in members]
    return MicroBatch(list(members), make_sequence_batch(chosen, prefix))


def scatter_rows(flat: torch.Tensor, rows: Sequence[TrainRow], width: int) -> torch.Tensor:
    """Flat per-trained-token values of ``rows`` (row-major) into a ``[len(rows), width]``
    matrix, differentiably."""
    counts = torch.tensor([r.num_trained for r in rows])
    mask = torch.arange(width).unsqueeze(0) < counts.unsqueeze(1)
    out = flat.new_zeros(len(rows), width)
    return out.masked_scatter(mask.to(flat.device), flat)
