"""The hf backend's running batch: the model-thread side of continuous batching.

:class:`RunningBatch` holds the KV cache of the rows being decoded and does every forward pass
(the hf backend calls it from its one model thread only). Each :meth:`~RunningBatch.step` drops
cancelled rows, decodes one token for the running rows, prefills newly admitted requests
(extending a chain's stored prefix where one matches, else one left-padded pass in which a
group's identical prompts run once) and merges them in, then retires finished rows, keeping
their KV for the chain's next turn (a :class:`.prefix_cache.PrefixCache`).

Logprobs: each sampled token's logprob is taken from the distribution it was drawn from: the
log-softmax of the logits divided by the temperature, after top-k and top-p (vLLM's
``processed_logprobs``); a greedy token's is the raw model's (temperature 1). Without top-k and
top-p this is what the trainer computes (it divides its logits by the rollout temperature).
"""

from __future__ import annotations

import asyncio
import collections
import inspect
import time
from dataclasses import dataclass, field
from typing import Any

from agentfly_cli.backends.base import Generation, SamplingParams
from agentfly_cli.backends.hf_sampling import GREEDY_BELOW, draw
from agentfly_cli.backends.hf_weights import (
    load_named_weights,
    set_adapters,
    with_adapters,
)
from agentfly_cli.backends.prefix_cache import KVSnapshot, PrefixCache


@dataclass(eq=False)
class BatchRequest:
    """One ``generate`` call waiting for, or taking part in, the batch."""

    prompt_ids: list[int]
    params: SamplingParams
    future: asyncio.Future
    stop_ids: frozenset[int]
    max_new: int
    seed: int
    queued_at: float = field(default_factory=time.perf_counter)
    policy_version: int | None = None  # the backend's weights when the batch admitted it
    listener: Any = None  # streaming: called (in the event loop) with each step's new ids
    streamed: int = 0  # how many of the row's ids the listener has had


@dataclass(eq=False)
class BatchRow:
    """A request's state inside the running batch (touched by the model thread only)."""

    req: BatchRequest
    generator: Any  # torch.Generator
    token_ids: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    passes: int = 0
    max_batch: int = 0
    admitted_at: float = 0.0


class RunningBatch:
    """The rows being decoded, their KV cache, and the prefixes kept for the next turns."""

    def __init__(self, model: Any, device: str, pad_id: int, prefix_cache_tokens: int) -> None:
        import torch

        self.torch = torch
        self.model = model
        self.device = device
        self.pad_id = pad_id
        self.logits_to_keep = "logits_to_keep" in inspect.signature(model.forward).parameters
        # forward_passes, prefill_passes, decode_passes, generated_tokens, prompt_tokens,
        # max_batch_size_seen, forward_seconds, step_seconds, weight_updates, weights_loaded
        self.stats: collections.Counter[str] = collections.Counter()
        self.rows: list[BatchRow] = []
        self.cache: Any = None
        self.mask: Any = None  # [B, T] 1 where the cache holds a real token
        self.pos: Any = None  # [B] position id of each row's next token
        self.last: Any = None  # [B] the token each row feeds next
        self.can_merge = True  # False once a model's cache turns out not to be mergeable
        self.prefix = PrefixCache(prefix_cache_tokens)

    def reset(self) -> None:
        self.rows, self.cache, self.mask, self.pos, self.last = [], None, None, None, None

    def step(
        self, admit: list[BatchRequest], dropped: list[BatchRequest]
    ) -> list[tuple[BatchRequest, Generation]]:
        """One decode step for the running rows, plus the prefill of newly admitted ones."""
        torch = self.torch
        start = time.perf_counter()
        with torch.inference_mode():
            if dropped:
                gone = set(dropped)
                self.keep([i for i, row in enumerate(self.rows) if row.req not in gone])
            if self.rows:
                self.decode()
            if admit:
                self.prefill(admit)
            finished = self.finish()
        self.stats["step_seconds"] += time.perf_counter() - start
        return finished

    def forward(self, **inputs: Any) -> Any:
        self.stats["forward_passes"] += 1
        batch = inputs["input_ids"].shape[0]
        self.stats["max_batch_size_seen"] = max(self.stats["max_batch_size_seen"], batch)
        start = time.perf_counter()
        out = self.model(**inputs, use_cache=True)
        self.stats["forward_seconds"] += time.perf_counter() - start
        return out

    def decode(self) -> None:
        torch = self.torch
        rows = self.rows
        mask = torch.cat([self.mask, self.mask.new_ones((len(rows), 1))], dim=1)
        out = self.forward(
            input_ids=self.last[:, None],
            attention_mask=mask,
            position_ids=self.pos[:, None],
            past_key_values=self.cache,
        )
        self.stats["decode_passes"] += 1
        self.cache, self.mask = out.past_key_values, mask
        self.pos = self.pos + 1
        self.last = self.sample(out.logits[:, -1, :], rows)

    def prefill(self, admit: list[BatchRequest]) -> None:
        """Prefill new requests: extend a stored prefix where one matches, batch the rest."""
        misses = []
        for req in admit:
            snapshot = self.prefix.take(req.prompt_ids) if self.prefix_on() else None
            if snapshot is None:
                misses.append(req)
            else:
                self.prefill_extension(req, snapshot)
        if misses:
            self.prefill_batch(misses)

    def prefix_on(self) -> bool:
        return self.prefix.max_tokens > 0 and self.can_merge

    def new_rows(self, admit: list[BatchRequest]) -> list[BatchRow]:
        torch = self.torch
        now = time.perf_counter()
        rows = []
        for req in admit:
            generator = torch.Generator()
            generator.manual_seed(req.seed)
            rows.append(BatchRow(req, generator, admitted_at=now))
        return rows

    def prefill_batch(self, admit: list[BatchRequest]) -> None:
        """One left-padded forward pass; identical prompts (a group's n chains) run once."""
        torch = self.torch
        slots: dict[tuple[int, ...], int] = {}
        for req in admit:
            slots.setdefault(tuple(req.prompt_ids), len(slots))
        unique = list(slots)
        longest = max(len(prompt) for prompt in unique)
        ids = torch.full((len(unique), longest), self.pad_id, dtype=torch.long)
        mask = torch.zeros((len(unique), longest), dtype=torch.long)
        for i, prompt in enumerate(unique):
            ids[i, longest - len(prompt) :] = torch.tensor(prompt)
            mask[i, longest - len(prompt) :] = 1
        ids, mask = ids.to(self.device), mask.to(self.device)
        extra = {"logits_to_keep": 1} if self.logits_to_keep else {}
        out = self.forward(
            input_ids=ids,
            attention_mask=mask,
            position_ids=(mask.cumsum(-1) - 1).clamp(min=0),
            **extra,
        )
        self.stats["prefill_passes"] += 1
        self.stats["prompt_tokens"] += int(mask.sum())
        logits, cache = out.logits[:, -1, :], out.past_key_values
        if len(unique) < len(admit):
            index = torch.tensor([slots[tuple(r.prompt_ids)] for r in admit], device=mask.device)
            cache.batch_select_indices(index)
            mask, logits = mask[index], logits[index]
            self.stats["shared_prompts"] += len(admit) - len(unique)
        rows = self.new_rows(admit)
        last = self.sample(logits, rows)
        self.merge(rows, cache, mask, mask.sum(-1), last)

    def prefill_extension(self, req: BatchRequest, snapshot: KVSnapshot) -> None:
        """Prefill only the tokens after a stored prefix, on top of its KV."""
        from transformers import DynamicCache

        torch = self.torch
        start, total = len(snapshot.tokens), len(req.prompt_ids)
        suffix = torch.tensor([req.prompt_ids[start:]], dtype=torch.long, device=self.device)
        mask = torch.ones((1, total), dtype=torch.long, device=self.device)
        extra = {"logits_to_keep": 1} if self.logits_to_keep else {}
        out = self.forward(
            input_ids=suffix,
            attention_mask=mask,
            position_ids=torch.arange(start, total, device=self.device)[None, :],
            past_key_values=DynamicCache(ddp_cache_data=snapshot.layers),
            **extra,
        )
        self.stats["prefill_passes"] += 1
        self.stats["prompt_tokens"] += total - start
        self.stats["prefix_hit_tokens"] += start
        rows = self.new_rows([req])
        last = self.sample(out.logits[:, -1, :], rows)
        self.merge(rows, out.past_key_values, mask, mask.sum(-1), last)

    def store_prefix(self, index: int, row: BatchRow) -> None:
        """Keep a finished row's KV (without padding) for the chain's next turn."""
        valid = int(self.mask[index].sum())
        tokens = row.req.prompt_ids + row.token_ids[:-1]
        if valid != len(tokens) or not bool(self.mask[index, -valid:].all()):
            return  # not the layout this code expects: store nothing rather than a wrong KV
        layers = [
            (
                layer.keys[index : index + 1, :, -valid:, :].clone(),
                layer.values[index : index + 1, :, -valid:, :].clone(),
            )
            for layer in self.cache.layers
        ]
        self.prefix.put(KVSnapshot(tuple(tokens), layers))

    def merge(self, rows: list[BatchRow], cache: Any, mask: Any, pos: Any, last: Any) -> None:
        """Add prefilled rows to the running batch, left-padding the shorter cache."""
        torch = self.torch
        layers = getattr(cache, "layers", None)
        from transformers.cache_utils import DynamicLayer

        self.can_merge = layers is not None and all(type(x) is DynamicLayer for x in layers)
        if not self.rows:
            self.rows, self.cache, self.mask = rows, cache, mask
            self.pos, self.last = pos, last
            return
        if not self.can_merge:  # the worker only admits into an empty batch from now on
            raise RuntimeError("hf backend: this model's KV cache cannot be merged")
        width = max(self.mask.shape[1], mask.shape[1])

        def pad(t: Any, dim: int) -> Any:
            missing = width - t.shape[dim]
            if missing == 0:
                return t
            shape = list(t.shape)
            shape[dim] = missing
            return torch.cat([t.new_zeros(shape), t], dim=dim)

        for old, new in zip(self.cache.layers, layers, strict=True):
            old.keys = torch.cat([pad(old.keys, -2), pad(new.keys, -2)], dim=0)
            old.values = torch.cat([pad(old.values, -2), pad(new.values, -2)], dim=0)
        self.mask = torch.cat([pad(self.mask, 1), pad(mask, 1)], dim=0)
        self.pos = torch.cat([self.pos, pos])
        self.last = torch.cat([self.last, last])
        self.rows = self.rows + rows

    def keep(self, keep: list[int]) -> None:
        """Drop the other rows and any cache columns that only padding uses now."""
        if len(keep) == len(self.rows):
            return
        if not keep:
            self.reset()
            return
        torch = self.torch
        index = torch.tensor(keep, device=self.mask.device)
        self.rows = [self.rows[i] for i in keep]
        self.mask, self.pos, self.last = self.mask[index], self.pos[index], self.last[index]
        self.cache.batch_select_indices(index)
        start = int(self.mask.any(dim=0).nonzero()[0])
        if start > 0 and self.can_merge:
            self.mask = self.mask[:, start:]
            for layer in self.cache.layers:
                layer.keys = layer.keys[..., start:, :]
                layer.values = layer.values[..., start:, :]

    def sample(self, logits: Any, rows: list[BatchRow]) -> Any:
        """Pick each row's next token and record it with its logprob (see the module doc)."""
        torch = self.torch
        logits = logits.float()
        tokens = logits.argmax(dim=-1)
        logprobs = torch.log_softmax(logits, dim=-1).gather(1, tokens[:, None])[:, 0]
        temps = [row.req.params.temperature for row in rows]
        sampled = [i for i, t in enumerate(temps) if t >= GREEDY_BELOW]
        if sampled:
            index = torch.tensor(sampled, device=logits.device)
            picked = [rows[i] for i in sampled]
            tokens[index], logprobs[index] = draw(
                logits[index], [r.req.params for r in picked], [r.generator for r in picked]
            )
        for row, token, logprob in zip(rows, tokens.tolist(), logprobs.tolist(), strict=True):
            row.token_ids.append(token)
            row.logprobs.append(logprob)
            row.passes += 1
            row.max_batch = max(row.max_batch, len(rows))
        self.stats["generated_tokens"] += len(rows)
        return tokens

    def finish(self) -> list[tuple[BatchRequest, Generation]]:
        done, keep = [], []
        for i, row in enumerate(self.rows):
            req = row.req
            reason = None
            if row.token_ids[-1] in req.stop_ids:
                reason = "stop"
            elif len(row.token_ids) >= req.max_new:
                reason = "length"
            if reason is None:
                keep.append(i)
                continue
            info = {
                "batch_size": row.max_batch,
                "forward_passes": row.passes,
                "prompt_tokens": len(req.prompt_ids),
                "queue_s": round(row.admitted_at - req.queued_at, 6),
                "logprobs": "processed",
            }
            done.append((req, Generation(row.token_ids, row.logprobs, reason, info=info)))
            if self.prefix_on():
                self.store_prefix(i, row)
        self.keep(keep)
        return done

    def load_adapter(self, tensors: Any, config: Any) -> None:
        """Set the adapter tensors (PEFT-wrapping the model once); stored KV is dropped."""
        self.model = with_adapters(self.model, config)
        try:
            set_adapters(self.model, tensors)
        finally:
            self.prefix.clear()
        self.stats["adapter_updates"] += 1

    def load_weights(self, named_tensors: Any) -> None:
        """Check every name and shape first, then copy: a bad update changes nothing."""
        try:
            loaded = load_named_weights(self.model, named_tensors)
        finally:
            self.prefix.clear()  # stored KV was computed with the old weights
        self.stats["weight_updates"] += 1
        self.stats["weights_loaded"] += loaded
