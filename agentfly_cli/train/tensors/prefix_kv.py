"""A shared prompt's KV that stays right when gradient checkpointing replays a layer.

The trainer forwards a group's shared prompt once and lets every continuation attend to its
KV (:mod:`agentfly_cli.train.tensors.logprobs`). A plain ``DynamicCache`` grows on every ``update``:
under gradient checkpointing each decoder layer runs twice (forward, then again in backward),
so the replay would append the same keys a second time and attend to the wrong ones.
Transformers therefore drops the cache under checkpointing, and the shared-prefix pass had to be
turned off, which costs more compute than checkpointing saves memory on short agent turns.

:class:`ReplaySafeCache` makes both passes idempotent:

- **filling** (the prefix pass, which starts from no past): a layer's first ``update`` stores
  its keys and values; a replay of that layer returns the recomputed ones and stores nothing;
- **reading** (the continuations, through :meth:`ReplaySafeCache.expanded`, which stands each
  prefix row for its continuations): ``update`` returns the prefix's keys, repeated for the
  rows, followed by the new ones and stores nothing, so a replay sees the same keys.

Gradients flow from the continuations into the stored prefix keys, and from there into the one
prefix pass, exactly as without checkpointing (tested against full sequences).

**Gradient memory.** Each weight is used twice in one backward, by the continuations and by the
prefix pass, and autograd holds a weight's first gradient until its second one arrives: the
prefix pass runs first forward, so its backward comes last, and every weight's gradient from
the continuations waited, a second copy of all gradients (0.5 GB for SmolLM2-135M in float32).
:func:`aliased_forward` runs the prefix pass on aliases of the weights (same storage, other
autograd leaves) whose gradients are added into the weights' own as they arrive.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import torch
from transformers import DynamicCache
from transformers.cache_utils import DynamicLayer


class ReplaySafeCache(DynamicCache):
    """A ``DynamicCache`` whose ``update`` gives the same answer when a layer runs again."""

    def __init__(self) -> None:
        super().__init__()
        self.frozen = False
        self.repeats: torch.Tensor | None = None

    def update(
        self, key_states: torch.Tensor, value_states: torch.Tensor, layer_idx: int, *args, **kwargs
    ):
        if self.frozen:
            layer = self.layers[layer_idx]
            rows = key_states.shape[0]
            keys = torch.cat([self._rows(layer.keys, rows), key_states], dim=-2)
            return keys, torch.cat([self._rows(layer.values, rows), value_states], dim=-2)
        if layer_idx < len(self.layers) and self.layers[layer_idx].is_initialized:
            return key_states, value_states  # a replay of the prefix pass, which had no past
        return super().update(key_states, value_states, layer_idx, *args, **kwargs)

    def expanded(self, repeats: torch.Tensor) -> ReplaySafeCache:
        """A reading cache in which row ``i`` of this one stands for ``repeats[i]`` rows.

        The rows are repeated inside each layer's ``update``, into the tensor that layer attends
        to and drops: a cache of repeated copies would hold every layer's at once through the
        forward and the backward (88 MB for 16 continuations of a 120-token SmolLM2 prompt).
        This cache stays as it is: the prefix pass's replay in backward still updates it."""
        kinds = {type(layer) for layer in self.layers}
        if kinds - {DynamicLayer}:
            names = ", ".join(sorted(kind.__name__ for kind in kinds))
            raise TypeError(f"a shared prefix needs full-attention cache layers, not {names}")
        reading = ReplaySafeCache()
        for layer in self.layers:
            copy = DynamicLayer()
            copy.lazy_initialization(layer.keys, layer.values)
            copy.keys, copy.values = layer.keys, layer.values
            reading.layers.append(copy)
        reading.frozen = True
        reading.repeats = repeats
        return reading

    def _rows(self, prefix: torch.Tensor, rows: int) -> torch.Tensor:
        """The prefix's keys or values, one row per continuation."""
        if prefix.shape[0] == 1:
            return prefix.expand(rows, *prefix.shape[1:])  # a view: the cat copies it once
        return prefix.repeat_interleave(self.repeats, dim=0, output_size=rows)


def aliased_forward(body: Any) -> Callable[..., Any]:
    """``body``'s forward on aliases of its trainable weights, for the prefix pass: their
    gradients go into the weights' ``.grad`` as soon as each is complete, instead of waiting in
    autograd for the continuations' share.

    Only for plain gradient accumulation (the torch backend): a backend that takes each weight's
    gradient from a hook when it is accumulated (DeepSpeed ZeRO) would miss the aliases' share.
    """
    aliases: dict[str, torch.Tensor] = {}
    for name, param in body.named_parameters():
        if param.requires_grad:
            alias = param.detach().requires_grad_(True)
            alias.register_post_accumulate_grad_hook(_adder_into(param))
            aliases[name] = alias

    def forward(**inputs: Any) -> Any:
        return torch.func.functional_call(body, aliases, args=(), kwargs=inputs, strict=False)

    return forward


def _adder_into(param: torch.Tensor):
    def add(alias: torch.Tensor) -> None:
        if param.grad is None:
            param.grad = alias.grad
        else:
            param.grad.add_(alias.grad)
        alias.grad = None

    return add


def checkpointed_layers(body: Any) -> list[Any]:
    """The decoder layers of ``body`` that gradient checkpointing replays."""
    return [
        module
        for module in body.modules()
        if getattr(module, "gradient_checkpointing", False)
        and hasattr(module, "_can_checkpoint_with_cache")
    ]


@contextmanager
def replay_safe_checkpointing(body: Any) -> Iterator[None]:
    """Let checkpointed layers keep a :class:`ReplaySafeCache` (transformers drops any cache
    under checkpointing unless the layer says the replay only reads it)."""
    layers = checkpointed_layers(body)
    for layer in layers:
        layer._can_checkpoint_with_cache = True
    try:
        yield
    finally:
        for layer in layers:
            del layer._can_checkpoint_with_cache  # back to the class's False
