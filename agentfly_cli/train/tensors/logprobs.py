"""Token logprobs of a causal LM, computed without full-vocabulary logits for the whole batch.

The transformer body runs once over the batch; the output head then runs only on the
positions that predict trained tokens, a chunk of rows at a time, each chunk under activation
checkpointing. Peak memory for the head is one chunk of fp32 logits ``[chunk, vocab]``
instead of ``[batch, seq, vocab]``; the backward pass recomputes each chunk's logits.

A group's shared prompt can be forwarded once (batch 1) and its KV expanded to the group's
continuations: gradients flow back through the expanded KV into the one prefix pass, so the
result equals running every full sequence, at a fraction of the cost, with or without gradient
checkpointing (:mod:`agentfly_cli.train.tensors.prefix_kv`).

``temperature`` divides the logits before the log-softmax (and the entropy), as verl does: the
trainer passes the rollout's sampling temperature (:func:`logprob_temperature`), so that the
policy it optimises is the distribution the tokens were sampled from. SFT keeps 1.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch.utils.checkpoint import checkpoint

from agentfly_cli.train.tensors.direct_grads import direct_embedding, direct_head, embed, project
from agentfly_cli.train.tensors.prefix_kv import (
    ReplaySafeCache,
    aliased_forward,
    replay_safe_checkpointing,
)


@dataclass
class TokenStats:
    """Per trained position: the logprob of the target token and, if asked, the entropy."""

    logprobs: torch.Tensor  # [N] float32
    entropy: torch.Tensor | None  # [N] float32
    hidden: torch.Tensor | None = None  # [N, H] last hidden states (for a value head)


def split_model(model: Any) -> tuple[Any, Any]:
    """``(body, head)`` of a causal LM: the decoder that returns hidden states, and the output
    projection. Unwraps DeepSpeed engines, DDP and PEFT models."""
    inner = model
    for _ in range(4):
        if hasattr(inner, "module") and not hasattr(inner, "get_output_embeddings"):
            inner = inner.module  # DeepSpeed engine, DDP
            continue
        if hasattr(inner, "get_base_model"):
            inner = inner.get_base_model()  # PEFT: LoRA layers stay injected in place
            continue
        break
    head = inner.get_output_embeddings()
    body = getattr(inner, getattr(inner, "base_model_prefix", ""), None)
    if body is None or head is None or body is inner:
        raise TypeError(
            f"{type(inner).__name__} is not a causal LM with a decoder body and an output head"
        )
    return body, head


#: Sampling temperatures below this are greedy (as in the hf backend and vLLM).
GREEDY_BELOW = 1e-5


def logprob_temperature(sampling_temperature: float) -> float:
    """The temperature of the trainer's logprobs for rollouts sampled at this temperature:
    the same one, or 1 for greedy decoding (whose sampler logprobs are the raw model's)."""
    return sampling_temperature if sampling_temperature >= GREEDY_BELOW else 1.0


def _head_chunk(
    head: Any,
    hidden: torch.Tensor,
    targets: torch.Tensor,
    entropy: bool,
    temperature: float,
    direct: bool,
):
    logits = (project(head, hidden) if direct else head(hidden)).float()
    if temperature != 1.0:
        logits = logits.div_(temperature)  # in place: one [chunk, vocab] tensor, not two
    logp = torch.log_softmax(logits, dim=-1)
    picked = logp.gather(-1, targets.unsqueeze(-1)).squeeze(-1)
    if not entropy:
        return picked, picked.new_zeros(())
    ent = -(logp.exp() * logp).sum(-1)
    return picked, ent


#: Logits per output-head chunk when the chunk size is automatic: 128 MB in fp32 on an
#: accelerator, where larger matrix products pay; 16 MB on a CPU, where they do not and memory
#: is short (a chunk holds its logits, log-softmax and entropy terms at once: 0.1 GB, not 0.5).
AUTO_CHUNK_LOGITS = 32 * 1024 * 1024
AUTO_CHUNK_LOGITS_CPU = 4 * 1024 * 1024


def auto_chunk_size(head: Any) -> int:
    """Positions per chunk so that one chunk's fp32 logits stay near AUTO_CHUNK_LOGITS (or
    AUTO_CHUNK_LOGITS_CPU when the head's weight is on the CPU)."""
    weight = getattr(head, "weight", None)
    # ZeRO-3 partitions the weight (its local shape is [0]); ds_shape is the full one
    shape = getattr(weight, "ds_shape", None) or getattr(weight, "shape", None) or (32_768,)
    on_cpu = weight is not None and weight.device.type == "cpu"
    budget = AUTO_CHUNK_LOGITS_CPU if on_cpu else AUTO_CHUNK_LOGITS
    return max(16, budget // max(int(shape[0]), 1))


def head_logprobs(
    head: Any,
    hidden: torch.Tensor,
    targets: torch.Tensor,
    *,
    chunk_size: int = 0,
    entropy: bool = False,
    num_chunks: int | None = None,
    temperature: float = 1.0,
    plain_grads: bool = False,
) -> TokenStats:
    """Logprobs of ``targets`` [N] under ``head(hidden) / temperature`` for hidden [N, H], chunk
    by chunk (``chunk_size`` positions at a time; 0: :func:`auto_chunk_size`). ``num_chunks``
    makes exactly that many head calls instead (some may be empty): ranks under ZeRO-3 must
    agree. ``plain_grads``: the head's weight gradient may go straight into ``.grad``
    (:mod:`agentfly_cli.train.tensors.direct_grads`)."""
    if not temperature > 0:
        raise ValueError(f"temperature must be > 0, got {temperature}")
    chunk_size = chunk_size or auto_chunk_size(head)
    count = hidden.shape[0]
    if num_chunks is None:
        bounds = list(range(0, count, chunk_size)) + [count]
    else:
        bounds = [count * i // num_chunks for i in range(num_chunks + 1)]
    pieces, entropies = [], []
    needs_ckpt = torch.is_grad_enabled() and hidden.requires_grad
    direct = plain_grads and torch.is_grad_enabled() and direct_head(head)
    for start, stop in zip(bounds[:-1], bounds[1:], strict=True):
        h = hidden[start:stop]
        t = targets[start:stop]
        if needs_ckpt:
            lp, ent = checkpoint(
                _head_chunk, head, h, t, entropy, temperature, direct, use_reentrant=False
            )
        else:
            lp, ent = _head_chunk(head, h, t, entropy, temperature, direct)
        pieces.append(lp)
        if entropy:
            entropies.append(ent)
    logprobs = torch.cat(pieces) if pieces else hidden.new_zeros(0, dtype=torch.float32)
    ent_all = torch.cat(entropies) if entropies else None
    return TokenStats(logprobs, ent_all)


@dataclass
class SequenceBatch:
    """Right-padded continuations, grouped behind shared prompt prefixes.

    ``prefix_ids`` [G, P] holds one left-padded prefix per group (``prefix_mask`` marks its real
    tokens; P may be 0: no prefixes), forwarded once each. ``repeats`` [G] says how many of the
    consecutive rows continue each prefix. ``input_ids`` [B, S] are the rows after their prefix;
    ``attention_mask`` [B, S] marks real tokens; ``targets`` [B, S] is the next token at each
    position and ``target_mask`` [B, S] marks positions whose target is trained.
    """

    prefix_ids: torch.Tensor
    prefix_mask: torch.Tensor
    repeats: torch.Tensor
    input_ids: torch.Tensor
    attention_mask: torch.Tensor
    targets: torch.Tensor
    target_mask: torch.Tensor

    @classmethod
    def unshared(cls, input_ids, attention_mask, targets, target_mask) -> SequenceBatch:
        """Rows without a shared prefix."""
        rows = input_ids.shape[0]
        empty = input_ids.new_zeros(1, 0)
        repeats = torch.tensor([rows], device=input_ids.device)
        return cls(empty, empty, repeats, input_ids, attention_mask, targets, target_mask)

    @property
    def num_tokens(self) -> int:
        """Token positions the body runs over (each prefix once, plus the padded rows)."""
        return int(self.prefix_ids.numel() + self.input_ids.numel())

    @property
    def num_real_tokens(self) -> int:
        return int(self.prefix_mask.sum().item() + self.attention_mask.sum().item())

    def to(self, device: Any) -> SequenceBatch:
        return SequenceBatch(*(getattr(self, f).to(device) for f in self.__dataclass_fields__))


def _prefix_cache(body: Any, batch: SequenceBatch, tokens: Callable, separate_grads: bool):
    """The KV of every group's prefix, one row per continuation, and each row's prefix length.

    The cache is a :class:`ReplaySafeCache`: right under gradient checkpointing too. It is passed
    with ``use_cache=False``, so that the model neither warns that checkpointing turns caching
    off nor builds a cache of its own: the layers still read and fill the one they are given.
    ``separate_grads``: run it on aliases of the weights (:func:`aliased_forward`)."""
    mask = batch.prefix_mask.long()
    filled = ReplaySafeCache()
    forward = aliased_forward(body) if separate_grads and torch.is_grad_enabled() else body
    forward(
        **tokens(batch.prefix_ids),
        attention_mask=mask,
        position_ids=(mask.cumsum(-1) - 1).clamp(min=0),
        past_key_values=filled,
        use_cache=False,
    )
    past = filled.expanded(batch.repeats)  # gradients flow back into the one pass
    return past, mask.repeat_interleave(batch.repeats, dim=0)


def sequence_logprobs(
    model: Any,
    batch: SequenceBatch,
    *,
    chunk_size: int = 0,
    entropy: bool = False,
    return_hidden: bool = False,
    num_chunks: int | None = None,
    temperature: float = 1.0,
    plain_grads: bool = False,
) -> TokenStats:
    """Logprobs (and entropies) at ``batch.target_mask`` positions, in row-major order, of the
    model's distribution at ``temperature``.

    ``plain_grads``: the caller sums gradients plainly into ``.grad`` and reads them only after
    backward (the torch backend), so weight gradients may be added there as they arrive, which
    saves memory: the shared prefix's (:func:`aliased_forward`), the output head's and the
    embedding's (:mod:`agentfly_cli.train.tensors.direct_grads`)."""
    body, head = split_model(model)
    embedding = direct_embedding(body) if plain_grads and torch.is_grad_enabled() else None

    def tokens(ids: torch.Tensor) -> dict[str, torch.Tensor]:
        if embedding is None:
            return {"input_ids": ids}
        return {"inputs_embeds": embed(embedding, ids)}

    rows, width = batch.input_ids.shape
    device = batch.input_ids.device
    attention = batch.attention_mask.long()
    past = None
    start = torch.zeros(rows, 1, dtype=torch.long, device=device)
    with replay_safe_checkpointing(body):
        if batch.prefix_ids.shape[1]:
            past, prefix_mask = _prefix_cache(body, batch, tokens, plain_grads)
            start = prefix_mask.sum(-1, keepdim=True)
            attention = torch.cat([prefix_mask, attention], dim=1)
        positions = start + torch.arange(width, device=device)
        out = body(
            **tokens(batch.input_ids),
            attention_mask=attention,
            position_ids=positions,
            past_key_values=past,
            use_cache=False,
        )
    hidden = out.last_hidden_state
    select = batch.target_mask.bool()
    picked = hidden[select]
    targets = batch.targets[select]
    stats = head_logprobs(
        head,
        picked,
        targets,
        chunk_size=chunk_size,
        entropy=entropy,
        num_chunks=num_chunks,
        temperature=temperature,
        plain_grads=plain_grads,
    )
    if return_hidden:
        stats.hidden = picked
    return stats


def naive_sequence_logprobs(
    model: Any, input_ids: torch.Tensor, attention_mask: torch.Tensor, temperature: float = 1.0
):
    """Reference: full logits in fp32 for the whole batch, then log-softmax (what we avoid)."""
    logits = model(input_ids=input_ids, attention_mask=attention_mask).logits.float()
    logits = logits / temperature
    logp = torch.log_softmax(logits[:, :-1], dim=-1)
    return logp.gather(-1, input_ids[:, 1:].unsqueeze(-1)).squeeze(-1)
