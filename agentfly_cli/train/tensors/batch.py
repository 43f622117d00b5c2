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

from agentfly_cli.train.tensors.logprobs import SequenceBatch

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
    """A forward-pass unit: which rows (in the batch's row order), and their tensors."""

    rows: list[int]
    batch: SequenceBatch

    def to(self, device) -> MicroBatch:
        return MicroBatch(self.rows, self.batch.to(device))


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


def make_sequence_batch(units: Sequence[tuple[int, Sequence[TrainRow]]]) -> SequenceBatch:
    """Rows after their group's shared prefix; ``units`` are ``(prefix length, rows)``, each
    unit's rows sharing their first ``prefix length`` tokens (0: no prefix)."""
    rows = [(prefix, row) for prefix, members in units for row in members]
    width = max(len(row.ids) - 1 - prefix for prefix, row in rows)
    shape = (len(rows), width)
    input_ids = torch.zeros(shape, dtype=torch.long)
    attention = torch.zeros(shape, dtype=torch.long)
    targets = torch.zeros(shape, dtype=torch.long)
    target_mask = torch.zeros(shape, dtype=torch.bool)
    for i, (prefix, row) in enumerate(rows):
        length = len(row.ids) - 1 - prefix
        input_ids[i, :length] = torch.tensor(row.ids[prefix:-1])
        attention[i, :length] = 1
        targets[i, :length] = torch.tensor(row.ids[prefix + 1 :])
        target_mask[i, :length] = torch.tensor(row.loss_mask[prefix + 1 :], dtype=torch.bool)
    longest = max(prefix for prefix, _ in units)
    prefix_ids = torch.zeros(len(units), longest, dtype=torch.long)
    prefix_mask = torch.zeros(len(units), longest, dtype=torch.long)
    for g, (prefix, members) in enumerate(units):  # left-padded: every prefix ends at P
        if prefix:
            prefix_ids[g, longest - prefix :] = torch.tensor(members[0].ids[:prefix])
            prefix_mask[g, longest - prefix :] = 1
    repeats = torch.tensor([len(members) for _, members in units])
    return SequenceBatch(
        prefix_ids, prefix_mask, repeats, input_ids, attention, targets, target_mask
    )


def plan_micro_batches(
    rows: Sequence[TrainRow],
    indices: Sequence[int],
    *,
    max_tokens: int,
    share_prefix: bool = True,
) -> list[MicroBatch]:
    """Pack ``rows[indices]`` into micro-batches of at most ``max_tokens`` padded positions
    (a longer row goes alone), rows sorted by length (bucketing).

    With ``share_prefix``, each group's common prompt is forwarded once and several groups
    share a micro-batch; groups too short to share a prefix are packed on their own.
    """
    units: list[tuple[int, list[int]]] = []  # (prefix length, rows of one group)
    if share_prefix:
        groups: dict[str, list[int]] = {}
        for index in indices:
            groups.setdefault(rows[index].group, []).append(index)
        for members in groups.values():
            prefix = shared_prefix_length([rows[i] for i in members])
            if prefix:
                units.append((prefix, members))
            else:
                units.extend((0, [i]) for i in members)
    else:
        units = [(0, [i]) for i in indices]
    plans: list[MicroBatch] = []
    for shared in (True, False):  # a prefix-free row never pads a prefix pass
        kind = [
            (p, sorted(m, key=lambda i: len(rows[i].ids))) for p, m in units if bool(p) == shared
        ]
        plans.extend(_pack(rows, kind, max_tokens))
    return plans


def _pack(rows, units, max_tokens: int) -> list[MicroBatch]:
    """Greedy packing of units (split when one alone is over budget) by suffix width."""

    def width(prefix: int, index: int) -> int:
        return len(rows[index].ids) - 1 - prefix

    pieces: list[tuple[int, list[int]]] = []
    for prefix, members in units:
        current: list[int] = []
        for index in members:  # sorted by length: the last one is the widest
            if current and (len(current) + 1) * width(prefix, index) + prefix > max_tokens:
                pieces.append((prefix, current))
                current = []
            current.append(index)
        pieces.append((prefix, current))
    pieces.sort(key=lambda unit: width(unit[0], unit[1][-1]))
    plans: list[MicroBatch] = []
    batch: list[tuple[int, list[int]]] = []
    for piece in pieces:
        trial = [*batch, piece]
        count = sum(len(m) for _, m in trial)
        widest = max(width(p, m[-1]) for p, m in trial)
        cost = count * widest + len(trial) * max(p for p, _ in trial)
        if batch and cost > max_tokens:
            plans.append(_micro(rows, batch))
            trial = [piece]
        batch = trial
    if batch:
        plans.append(_micro(rows, batch))
    return plans


def _micro(rows: Sequence[TrainRow], units: list[tuple[int, list[int]]]) -> MicroBatch:
    order = [i for _, members in units for i in members]
    chosen = [(prefix, [rows[i] for i in members]) for prefix, members in units]
    return MicroBatch(order, make_sequence_batch(chosen))


def scatter_rows(flat: torch.Tensor, rows: Sequence[TrainRow], width: int) -> torch.Tensor:
    """Flat per-trained-token values of ``rows`` (row-major) into a ``[len(rows), width]``
    matrix, differentiably."""
    counts = torch.tensor([r.num_trained for r in rows])
    mask = torch.arange(width).unsqueeze(0) < counts.unsqueeze(1)
    out = flat.new_zeros(len(rows), width)
    return out.masked_scatter(mask.to(flat.device), flat)
