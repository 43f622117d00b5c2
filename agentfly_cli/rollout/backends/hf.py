"""The ``hf`` backend: a transformers model on CPU or CUDA, concurrent requests batched.

Requests from many chains meet in a queue. One asyncio worker task admits them into a running
batch and runs every forward pass in one worker thread, so the event loop never blocks. The
batch is continuous: new requests are prefilled and merged into the KV cache (left padding,
attention mask, per-row position ids) at any decode step, and finished rows drop out.

Logprobs: each sampled token's logprob is taken from the distribution it was drawn from: the
log-softmax of the logits divided by the temperature, after top-k and top-p (vLLM's
``processed_logprobs``); a greedy token's is the raw model's (temperature 1). Without top-k and
top-p this is what the trainer computes (it divides its logits by the rollout temperature).
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import logging
import random
import time
from dataclasses import dataclass, field
from typing import Any

from agentfly_cli.allocator import keep_freed_memory
from agentfly_cli.devices import pick_device, pick_dtype
from agentfly_cli.errors import UserError
from agentfly_cli.rollout.backends.base import (
    Backend,
    BackendConfig,
    BackendUnavailableError,
    Generation,
    RequestContext,
    SamplingParams,
)
from agentfly_cli.rollout.backends.hf_sampling import GREEDY_BELOW, draw
from agentfly_cli.rollout.backends.hf_weights import (
    load_named_weights,
    set_adapters,
    with_adapters,
)
from agentfly_cli.rollout.backends.prefix_cache import KVSnapshot, PrefixCache

log = logging.getLogger(__name__)


@dataclass(eq=False)
class _Request:
    """One ``generate`` call waiting for, or taking part in, the batch."""

    prompt_ids: list[int]
    params: SamplingParams
    future: asyncio.Future
    stop_ids: frozenset[int]
    max_new: int
    seed: int
    queued_at: float = field(default_factory=time.perf_counter)


@dataclass(eq=False)
class _Row:
    """A request's state inside the running batch (touched by the model thread only)."""

    req: _Request
    generator: Any  # torch.Generator
    token_ids: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    passes: int = 0
    max_batch: int = 0
    admitted_at: float = 0.0


def _as_ids(value: Any) -> set[int]:
    if value is None:
        return set()
    if isinstance(value, int):
        return {value}
    return {int(v) for v in value}


class HFBackend(Backend):
    """Token-in, token-out generation with a transformers model and continuous batching."""

    name = "hf"
    returns_tokens = True
    takes_weights = True
    takes_adapters = True

    def __init__(self, config: BackendConfig, tokenizer: Any = None, model: Any = None):
        """Load ``config.model`` (a local folder), or wrap an already loaded ``model``."""
        try:
            import torch
            from transformers import AutoModelForCausalLM
        except ImportError as exc:  # pragma: no cover - torch and transformers are core deps
            raise BackendUnavailableError(
                f"the hf backend needs torch and transformers ({exc}); "
                "run `pip install agentfly-cli` again"
            ) from exc
        self.config = config
        keep_freed_memory()
        if model is None:
            if not config.model:
                raise UserError("the hf backend needs backend.model: a model folder or alias")
            self.device = str(pick_device(config.device, "backend.device"))
            dtype = pick_dtype(config.dtype, self.device, "backend.dtype")
            try:
                model = AutoModelForCausalLM.from_pretrained(config.model, dtype=dtype)
            except (OSError, ValueError) as exc:
                raise UserError(
                    f"hf backend: cannot load a model from {config.model!r} "
                    f"({type(exc).__name__}: {str(exc).splitlines()[0]}); pass a folder with "
                    "config.json and weights, or an alias (tiny, smollm2)"
                ) from exc
            model.to(self.device)
        else:
            self.device = str(next(model.parameters()).device)
        if tokenizer is None:
            from agentfly_cli.chat.templates import load_tokenizer

            tokenizer = load_tokenizer(config.tokenizer or config.model)
        self.model = model.eval()
        self.tokenizer = tokenizer
        self.dtype = next(model.parameters()).dtype
        self._torch = torch

        gen_config = getattr(model, "generation_config", None)
        self.eos_ids = frozenset(
            _as_ids(getattr(tokenizer, "eos_token_id", None))
            | _as_ids(getattr(gen_config, "eos_token_id", None))
        )
        pad = getattr(tokenizer, "pad_token_id", None)
        self.pad_id = pad if pad is not None else (min(self.eos_ids) if self.eos_ids else 0)
        self.max_context = getattr(model.config, "max_position_embeddings", None) or 1 << 30
        import inspect

        self._logits_to_keep = "logits_to_keep" in inspect.signature(model.forward).parameters
        # forward_passes, prefill_passes, decode_passes, generated_tokens, prompt_tokens,
        # max_batch_size_seen, forward_seconds, step_seconds, weight_updates, weights_loaded
        self.stats: collections.Counter[str] = collections.Counter()
        self._seeds = random.Random(config.seed)
        self._executor = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="agentfly-hf")
        # Model-thread state: the running batch.
        self._rows: list[_Row] = []
        self._cache: Any = None
        self._mask: Any = None  # [B, T] 1 where the cache holds a real token
        self._pos: Any = None  # [B] position id of each row's next token
        self._last: Any = None  # [B] the token each row feeds next
        self._can_merge = True
        self._prefix = PrefixCache(config.prefix_cache_tokens)
        # Event-loop state.
        self._loop: asyncio.AbstractEventLoop | None = None
        self._worker: asyncio.Task | None = None
        self._pending: collections.deque[_Request] = collections.deque()
        self._active: set[_Request] = set()
        self._wakeup: asyncio.Event | None = None
        self._idle: asyncio.Event | None = None
        self._weights_lock: asyncio.Lock | None = None
        self._paused = False
        self._closed = False

    # ---- public API -------------------------------------------------------------------------

    @property
    def forward_passes(self) -> int:
        """How many forward passes the model ran (prefills and decode steps)."""
        return self.stats["forward_passes"]

    async def generate(
        self, prompt_ids: list[int], params: SamplingParams, context: RequestContext | None = None
    ) -> Generation:
        """Sample one response; concurrent calls share forward passes."""
        if self._closed:
            raise BackendUnavailableError("the hf backend is closed")
        prompt = [int(t) for t in prompt_ids]
        if not prompt:
            raise ValueError("hf backend: prompt_ids is empty")
        max_new = min(params.max_tokens, self.max_context - len(prompt))
        if max_new <= 0:
            return Generation([], [], "length", info={"batch_size": 0, "forward_passes": 0})
        self._ensure_worker()
        loop = asyncio.get_running_loop()
        seed = params.seed if params.seed is not None else self._seeds.getrandbits(63)
        req = _Request(
            prompt,
            params,
            loop.create_future(),
            frozenset(params.stop_token_ids) | self.eos_ids,
            max_new,
            seed,
        )
        self._pending.append(req)
        self._wakeup.set()
        return await req.future

    async def update_weights(self, named_tensors: Any) -> None:
        """Load new weights once the running batch has drained; queued requests wait."""
        await self._while_idle(self._load_weights, named_tensors)

    async def update_adapter(self, tensors: Any, config: Any) -> None:
        """Load LoRA adapter tensors; the first call wraps the model with PEFT's ``config``."""
        await self._while_idle(self._load_adapter, tensors, config)

    async def _while_idle(self, function: Any, *args: Any) -> None:
        """Run ``function`` in the model thread once the running batch has drained."""
        if self._closed:
            raise BackendUnavailableError("the hf backend is closed")
        self._ensure_worker()
        async with self._weights_lock:
            self._paused = True
            try:
                await self._idle.wait()
                if self._closed:
                    raise BackendUnavailableError("the hf backend was closed")
                loop = asyncio.get_running_loop()
                await loop.run_in_executor(self._executor, function, *args)
            finally:
                self._paused = False
                self._wakeup.set()

    async def close(self) -> None:
        """Stop the worker, fail waiting requests, and release the model thread."""
        if self._closed:
            return
        self._closed = True
        if self._worker is not None and not self._worker.done():
            self._worker.cancel()
            try:
                await self._worker
            except (asyncio.CancelledError, Exception):
                pass
        closed = BackendUnavailableError("the hf backend was closed")
        for req in [*self._pending, *self._active]:
            if not req.future.done():
                req.future.set_exception(closed)
        self._pending.clear()
        self._active.clear()
        if self._idle is not None:
            self._idle.set()  # an update_weights waiting for the batch to drain sees the close
        # A step already running finishes in its thread; wait for it without blocking the loop.
        await asyncio.get_running_loop().run_in_executor(None, self._executor.shutdown, True)
        self._reset_batch()
        self.model = None
        if self.device.startswith("cuda"):
            self._torch.cuda.empty_cache()

    # ---- event-loop side --------------------------------------------------------------------

    def _ensure_worker(self) -> None:
        loop = asyncio.get_running_loop()
        if self._loop is loop and self._worker is not None and not self._worker.done():
            return
        # First use, a new event loop (the old one is gone), or a worker that died: start clean.
        self._pending.clear()
        self._active.clear()
        self._executor.submit(self._reset_batch).result()
        if self._loop is not loop:
            self._wakeup = asyncio.Event()
            self._idle = asyncio.Event()
            self._weights_lock = asyncio.Lock()
            self._loop = loop
        self._idle.set()
        self._worker = loop.create_task(self._work(), name="agentfly-hf-batcher")
        self._worker.add_done_callback(self._worker_done)

    def _worker_done(self, task: asyncio.Task) -> None:
        """A worker that crashed fails its waiting requests instead of leaving them hanging."""
        if task.cancelled() or task.exception() is None:
            return
        exc = task.exception()
        log.error("hf backend: the batching worker failed: %r", exc)
        for req in [*self._pending, *self._active]:
            if not req.future.done():
                req.future.set_exception(exc)
        self._pending.clear()
        self._active.clear()

    def _take_admissions(self) -> list[_Request]:
        room = self.config.max_batch_size - len(self._active)
        if self._paused or room <= 0 or (self._active and not self._can_merge):
            return []
        admit = []
        while self._pending and len(admit) < room:
            req = self._pending.popleft()
            if not req.future.done():  # skip callers that were cancelled while queued
                admit.append(req)
        return admit

    async def _work(self) -> None:
        loop = asyncio.get_running_loop()
        wait_s = self.config.batch_wait_ms / 1000
        while True:
            if not self._active:
                self._idle.set()
                while not self._pending or self._paused:
                    self._wakeup.clear()
                    await self._wakeup.wait()
                if wait_s and len(self._pending) < self.config.max_batch_size:
                    await asyncio.sleep(wait_s)  # let a burst of requests arrive together
            admit = self._take_admissions()
            if not admit and not self._active:
                continue
            self._idle.clear()
            self._active.update(admit)
            dropped = [req for req in self._active if req.future.done()]
            try:
                finished = await loop.run_in_executor(self._executor, self._step, admit, dropped)
            except Exception as exc:  # a failed forward pass fails the batch, not the worker
                log.warning("hf backend: forward pass failed: %s", exc)
                for req in self._active:
                    if not req.future.done():
                        req.future.set_exception(exc)
                self._active.clear()
                await loop.run_in_executor(self._executor, self._reset_batch)
                continue
            self._active.difference_update(dropped)
            for req, generation in finished:
                self._active.discard(req)
                if not req.future.done():
                    req.future.set_result(generation)

    # ---- model-thread side ------------------------------------------------------------------

    def _reset_batch(self) -> None:
        self._rows, self._cache, self._mask, self._pos, self._last = [], None, None, None, None

    def _step(
        self, admit: list[_Request], dropped: list[_Request]
    ) -> list[tuple[_Request, Generation]]:
        """One decode step for the running rows, plus the prefill of newly admitted ones."""
        torch = self._torch
        start = time.perf_counter()
        with torch.inference_mode():
            if dropped:
                gone = set(dropped)
                self._keep([i for i, row in enumerate(self._rows) if row.req not in gone])
            if self._rows:
                self._decode()
            if admit:
                self._prefill(admit)
            finished = self._finish()
        self.stats["step_seconds"] += time.perf_counter() - start
        return finished

    def _forward(self, **inputs: Any) -> Any:
        self.stats["forward_passes"] += 1
        batch = inputs["input_ids"].shape[0]
        self.stats["max_batch_size_seen"] = max(self.stats["max_batch_size_seen"], batch)
        start = time.perf_counter()
        out = self.model(**inputs, use_cache=True)
        self.stats["forward_seconds"] += time.perf_counter() - start
        return out

    def _decode(self) -> None:
        torch = self._torch
        rows = self._rows
        mask = torch.cat([self._mask, self._mask.new_ones((len(rows), 1))], dim=1)
        out = self._forward(
            input_ids=self._last[:, None],
            attention_mask=mask,
            position_ids=self._pos[:, None],
            past_key_values=self._cache,
        )
        self.stats["decode_passes"] += 1
        self._cache, self._mask = out.past_key_values, mask
        self._pos = self._pos + 1
        self._last = self._sample(out.logits[:, -1, :], rows)

    def _prefill(self, admit: list[_Request]) -> None:
        """Prefill new requests: extend a stored prefix where one matches, batch the rest."""
        misses = []
        for req in admit:
            snapshot = self._prefix.take(req.prompt_ids) if self._prefix_on() else None
            if snapshot is None:
                misses.append(req)
            else:
                self._prefill_extension(req, snapshot)
        if misses:
            self._prefill_batch(misses)

    def _prefix_on(self) -> bool:
        return self._prefix.max_tokens > 0 and self._can_merge

    def _new_rows(self, admit: list[_Request]) -> list[_Row]:
        torch = self._torch
        now = time.perf_counter()
        rows = []
        for req in admit:
            generator = torch.Generator()
            generator.manual_seed(req.seed)
            rows.append(_Row(req, generator, admitted_at=now))
        return rows

    def _prefill_batch(self, admit: list[_Request]) -> None:
        """One left-padded forward pass; identical prompts (a group's n chains) run once."""
        torch = self._torch
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
        extra = {"logits_to_keep": 1} if self._logits_to_keep else {}
        out = self._forward(
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
        rows = self._new_rows(admit)
        last = self._sample(logits, rows)
        self._merge(rows, cache, mask, mask.sum(-1), last)

    def _prefill_extension(self, req: _Request, snapshot: KVSnapshot) -> None:
        """Prefill only the tokens after a stored prefix, on top of its KV."""
        from transformers import DynamicCache

        torch = self._torch
        start, total = len(snapshot.tokens), len(req.prompt_ids)
        suffix = torch.tensor([req.prompt_ids[start:]], dtype=torch.long, device=self.device)
        mask = torch.ones((1, total), dtype=torch.long, device=self.device)
        extra = {"logits_to_keep": 1} if self._logits_to_keep else {}
        out = self._forward(
            input_ids=suffix,
            attention_mask=mask,
            position_ids=torch.arange(start, total, device=self.device)[None, :],
            past_key_values=DynamicCache(ddp_cache_data=snapshot.layers),
            **extra,
        )
        self.stats["prefill_passes"] += 1
        self.stats["prompt_tokens"] += total - start
        self.stats["prefix_hit_tokens"] += start
        rows = self._new_rows([req])
        last = self._sample(out.logits[:, -1, :], rows)
        self._merge(rows, out.past_key_values, mask, mask.sum(-1), last)

    def _store_prefix(self, index: int, row: _Row) -> None:
        """Keep a finished row's KV (without padding) for the chain's next turn."""
        valid = int(self._mask[index].sum())
        tokens = row.req.prompt_ids + row.token_ids[:-1]
        if valid != len(tokens) or not bool(self._mask[index, -valid:].all()):
            return  # not the layout this code expects: store nothing rather than a wrong KV
        layers = [
            (
                layer.keys[index : index + 1, :, -valid:, :].clone(),
                layer.values[index : index + 1, :, -valid:, :].clone(),
            )
            for layer in self._cache.layers
        ]
        self._prefix.put(KVSnapshot(tuple(tokens), layers))

    def _merge(self, rows: list[_Row], cache: Any, mask: Any, pos: Any, last: Any) -> None:
        """Add prefilled rows to the running batch, left-padding the shorter cache."""
        torch = self._torch
        layers = getattr(cache, "layers", None)
        from transformers.cache_utils import DynamicLayer

        self._can_merge = layers is not None and all(type(x) is DynamicLayer for x in layers)
        if not self._rows:
            self._rows, self._cache, self._mask = rows, cache, mask
            self._pos, self._last = pos, last
            return
        if not self._can_merge:  # the worker only admits into an empty batch from now on
            raise RuntimeError("hf backend: this model's KV cache cannot be merged")
        width = max(self._mask.shape[1], mask.shape[1])

        def pad(t: Any, dim: int) -> Any:
            missing = width - t.shape[dim]
            if missing == 0:
                return t
            shape = list(t.shape)
            shape[dim] = missing
            return torch.cat([t.new_zeros(shape), t], dim=dim)

        for old, new in zip(self._cache.layers, layers, strict=True):
            old.keys = torch.cat([pad(old.keys, -2), pad(new.keys, -2)], dim=0)
            old.values = torch.cat([pad(old.values, -2), pad(new.values, -2)], dim=0)
        self._mask = torch.cat([pad(self._mask, 1), pad(mask, 1)], dim=0)
        self._pos = torch.cat([self._pos, pos])
        self._last = torch.cat([self._last, last])
        self._rows = self._rows + rows

    def _keep(self, keep: list[int]) -> None:
        """Drop the other rows and any cache columns that only padding uses now."""
        if len(keep) == len(self._rows):
            return
        if not keep:
            self._reset_batch()
            return
        torch = self._torch
        index = torch.tensor(keep, device=self._mask.device)
        self._rows = [self._rows[i] for i in keep]
        self._mask, self._pos, self._last = self._mask[index], self._pos[index], self._last[index]
        self._cache.batch_select_indices(index)
        start = int(self._mask.any(dim=0).nonzero()[0])
        if start > 0 and self._can_merge:
            self._mask = self._mask[:, start:]
            for layer in self._cache.layers:
                layer.keys = layer.keys[..., start:, :]
                layer.values = layer.values[..., start:, :]

    def _sample(self, logits: Any, rows: list[_Row]) -> Any:
        """Pick each row's next token and record it with its logprob (see the module doc)."""
        torch = self._torch
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

    def _finish(self) -> list[tuple[_Request, Generation]]:
        done, keep = [], []
        for i, row in enumerate(self._rows):
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
            if self._prefix_on():
                self._store_prefix(i, row)
        self._keep(keep)
        return done

    def _load_adapter(self, tensors: Any, config: Any) -> None:
        """Set the adapter tensors (PEFT-wrapping the model once); stored KV is dropped."""
        self.model = with_adapters(self.model, config)
        try:
            set_adapters(self.model, tensors)
        finally:
            self._prefix.clear()
        self.stats["adapter_updates"] += 1

    def _load_weights(self, named_tensors: Any) -> None:
        """Check every name and shape first, then copy: a bad update changes nothing."""
        try:
            loaded = load_named_weights(self.model, named_tensors)
        finally:
            self._prefix.clear()  # stored KV was computed with the old weights
        self.stats["weight_updates"] += 1
        self.stats["weights_loaded"] += loaded
