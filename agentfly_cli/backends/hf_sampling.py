"""Token sampling for the ``hf`` backend: temperature, top-k and top-p, one generator per row.

Each sampled token's logprob is taken from the distribution it was drawn from: the log-softmax
of the logits divided by the temperature, after top-k and top-p (vLLM's
``processed_logprobs``).
"""

from __future__ import annotations

from typing import Any

GREEDY_BELOW = 1e-5  # temperatures below this sample greedily


def draw(logits: Any, params: list[Any], generators: list[Any]) -> tuple[Any, Any]:
    """Sample row ``i`` of ``logits`` [rows, vocab] with ``params[i]`` (temperature, top_k,
    top_p) and ``generators[i]``; the tokens and their logprobs under that tempered, filtered
    distribution."""
    import torch

    device = logits.device
    logits = logits / torch.tensor([p.temperature for p in params], device=device)[:, None]
    uniform = torch.stack([torch.rand((), generator=generator) for generator in generators])
    uniform = uniform.to(device)
    filtered = any(p.top_k > 0 or p.top_p < 1.0 for p in params)
    order = None
    if filtered:
        logits, order = logits.sort(dim=-1, descending=True)
        vocab = logits.shape[-1]
        ranks = torch.arange(vocab, device=device)[None, :]
        top_k = torch.tensor([p.top_k if p.top_k > 0 else vocab for p in params], device=device)
        drop = ranks >= top_k[:, None]
        probs = logits.masked_fill(drop, float("-inf")).softmax(dim=-1)
        top_p = torch.tensor([p.top_p for p in params], device=device, dtype=probs.dtype)
        drop |= (probs.cumsum(dim=-1) - probs) >= top_p[:, None]
        drop[:, 0] = False
        logits = logits.masked_fill(drop, float("-inf"))
    cdf = logits.softmax(dim=-1).cumsum(dim=-1)
    target = (uniform * cdf[:, -1])[:, None].to(cdf.dtype)
    choice = torch.searchsorted(cdf, target, right=True).clamp(max=cdf.shape[-1] - 1)
    logprobs = torch.log_softmax(logits, dim=-1).gather(1, choice)[:, 0]
    if order is not None:
        choice = order.gather(1, choice)
    return choice[:, 0], logprobs
