"""Scoring given token ids with the ``hf`` backend's model (prompt logprobs)."""

from __future__ import annotations

from typing import Any


def score_sequences(model: Any, device: str, sequences: list[list[int]]) -> list[list[float]]:
    """For each sequence, the log-softmax of the raw logits at every next token: one forward
    pass per sequence, no padding, no cache (the probe of the weight-sync tripwire)."""
    import torch

    scores = []
    with torch.no_grad():
        for ids in sequences:
            tokens = torch.tensor([[int(t) for t in ids]], device=device)
            logits = model(input_ids=tokens, use_cache=False).logits[0, :-1].float()
            picked = torch.log_softmax(logits, dim=-1).gather(-1, tokens[0, 1:, None])
            scores.append(picked[:, 0].cpu().tolist())
    return scores
