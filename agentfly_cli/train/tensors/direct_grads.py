"""The output head and the token embedding with their weight gradients added straight into
``.grad``, for backends that accumulate gradients plainly (the torch backend).

Autograd computes a weight's gradient into a new tensor and then adds it to ``.grad``; where a
weight is used several times in one backward it first sums those uses in one more buffer. For
the largest matrix of a small model that is expensive: SmolLM2-135M ties its embedding to its
output head, a [49152, 576] matrix (113 MB in float32) used by every logprob chunk and by the
embedding, so a backward held ``.grad``, a running sum and the newest share at once, 226 MB
over ``.grad`` at the peak of every micro-batch. Here each share is added into ``.grad`` inside
the backward that computes it (``addmm_``, ``index_add_``): no temporary as large as the weight.

The gradients are the same sums in another order (equal to float rounding). A backend that takes
gradients from autograd hooks (DeepSpeed ZeRO) must not use this: those hooks never fire here.
"""

from __future__ import annotations

from typing import Any

import torch


def _grad_of(param: torch.Tensor) -> torch.Tensor:
    """``param.grad``, created as zeros on first use (what autograd would create)."""
    if param.grad is None:
        param.grad = torch.zeros_like(param)
    return param.grad


class _HeadProjection(torch.autograd.Function):
    """``hidden @ weight.T``; the backward adds ``grad.T @ hidden`` into ``weight.grad``."""

    @staticmethod
    def forward(ctx, hidden: torch.Tensor, weight: torch.Tensor, param: torch.Tensor):
        ctx.save_for_backward(hidden, weight)
        ctx.param = param
        return hidden @ weight.t()

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        hidden, weight = ctx.saved_tensors
        grad = grad.to(weight.dtype)
        _grad_of(ctx.param).addmm_(grad.t(), hidden.to(weight.dtype))
        grad_hidden = grad @ weight if ctx.needs_input_grad[0] else None
        return grad_hidden, None, None


class _TokenEmbedding(torch.autograd.Function):
    """``weight[ids]``; the backward adds each position's gradient into its row of
    ``weight.grad`` (positions holding ``padding_idx`` add nothing, as in ``nn.Embedding``)."""

    @staticmethod
    def forward(ctx, ids: torch.Tensor, weight: torch.Tensor, param: torch.Tensor, padding_idx):
        ctx.save_for_backward(ids)
        ctx.param = param
        ctx.padding_idx = padding_idx
        return torch.nn.functional.embedding(ids, weight)

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        (ids,) = ctx.saved_tensors
        target = _grad_of(ctx.param)
        rows = ids.reshape(-1)
        grad = grad.reshape(-1, grad.shape[-1]).to(target.dtype)
        if ctx.padding_idx is not None:
            keep = rows != ctx.padding_idx
            rows, grad = rows[keep], grad[keep]
        target.index_add_(0, rows, grad)
        return None, None, None, None


def _trains(module: Any, kind: type) -> bool:
    """``module`` is exactly ``kind`` (no subclass that changes the forward, such as a scaled
    embedding or a LoRA layer) and its weight is trained."""
    weight = getattr(module, "weight", None)
    return type(module) is kind and weight is not None and weight.requires_grad


def direct_head(head: Any) -> bool:
    """Whether :func:`project` can add ``head``'s gradient straight into ``.grad``: a plain
    ``nn.Linear`` without bias whose weight is trained."""
    return _trains(head, torch.nn.Linear) and head.bias is None


def project(head: Any, hidden: torch.Tensor) -> torch.Tensor:
    """``head(hidden)`` for a :func:`direct_head` head, gradient added into its ``.grad``."""
    weight = head.weight
    return _HeadProjection.apply(hidden, weight.detach(), weight)


def direct_embedding(body: Any) -> Any | None:
    """``body``'s token embedding when :func:`embed` can add its gradient into ``.grad`` (a
    plain ``nn.Embedding`` whose weight is trained), else None."""
    getter = getattr(body, "get_input_embeddings", None)
    module = getter() if getter is not None else None
    if module is None or not _trains(module, torch.nn.Embedding):
        return None
    if module.max_norm is not None or module.sparse or module.scale_grad_by_freq:
        return None
    return module


def embed(module: Any, ids: torch.Tensor) -> torch.Tensor:
    """``module(ids)`` for a :func:`direct_embedding` module, gradient added into ``.grad``."""
    weight = module.weight
    return _TokenEmbedding.apply(ids, weight.detach(), weight, module.padding_idx)
