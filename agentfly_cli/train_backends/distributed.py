"""What the trainer needs from torch.distributed when it runs as several ranks (DeepSpeed).

Every rank rolls out its own share of the step's tasks and trains on it. ZeRO runs collectives
inside forward and backward passes, so all ranks must run the same number of them: the trainer
agrees on the largest count and lets the ranks with less work run zero-weight passes.
With one process every helper is a no-op.
"""

from __future__ import annotations

from collections.abc import Mapping

import torch


def active() -> bool:
    """True when this process is one of several ranks."""
    import torch.distributed as dist

    return dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1


def _device():
    """Where collective tensors live: NCCL takes only CUDA tensors."""
    import torch.distributed as dist

    if dist.get_backend() == "nccl":
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def agree_max(value: int) -> int:
    """The largest ``value`` over the ranks."""
    if not active():
        return value
    import torch.distributed as dist

    tensor = torch.tensor([value], dtype=torch.long, device=_device())
    dist.all_reduce(tensor, op=dist.ReduceOp.MAX)
    return int(tensor.item())


def all_sum(value: float) -> float:
    """The sum of ``value`` over the ranks."""
    if not active():
        return value
    import torch.distributed as dist

    tensor = torch.tensor([float(value)], dtype=torch.float64, device=_device())
    dist.all_reduce(tensor)
    return float(tensor.item())


def gather_lists(items: list) -> list:
    """Every rank's ``items`` (picklable), concatenated in rank order."""
    if not active():
        return list(items)
    import torch.distributed as dist

    gathered: list[list] = [[] for _ in range(dist.get_world_size())]
    dist.all_gather_object(gathered, list(items))
    return [item for part in gathered for item in part]


#: Metrics that are counts (summed over ranks), minima and maxima; the rest are averaged.
SUMMED_PREFIXES = (
    "env/",  # each rank has its own env pools
    "tools/calls",
    "tools/errors",
    "tokens/",
    "rollout/trajectories",
    "train/dropped",
    "train/trajectories",
    "train/trained_tokens",
)
MINIMA, MAXIMA = ("reward/min",), ("reward/max",)


def combine_metrics(metrics: Mapping[str, float]) -> dict[str, float]:
    """The ranks' metrics combined: counts summed, min/max kept, everything else averaged
    (ranks hold equal task shares, so means of means are the overall means; ``reward/std``
    is the mean of the ranks' stds)."""
    if not active():
        return dict(metrics)
    import torch.distributed as dist

    gathered: list[dict[str, float]] = [{} for _ in range(dist.get_world_size())]
    dist.all_gather_object(gathered, dict(metrics))
    keys = {key for part in gathered for key in part}
    out = {}
    for key in keys:
        values = [part[key] for part in gathered if part.get(key) is not None]
        if not values:
            out[key] = float("nan")
        elif key.startswith(SUMMED_PREFIXES):
            out[key] = sum(values)
        elif key in MINIMA:
            out[key] = min(values)
        elif key in MAXIMA:
            out[key] = max(values)
        else:
            out[key] = sum(values) / len(values)
    return out


def average_gradients(parameters) -> None:
    """All-reduce and average the gradients of parameters outside the DeepSpeed engine."""
    if not active():
        return
    import torch.distributed as dist

    world = dist.get_world_size()
    for param in parameters:
        if param.grad is None:
            param.grad = torch.zeros_like(param)
        dist.all_reduce(param.grad)
        param.grad /= world
