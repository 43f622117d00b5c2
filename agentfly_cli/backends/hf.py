"""The ``hf`` backend: a transformers model on CPU or CUDA, concurrent requests batched.

Requests from many chains meet in a queue. One asyncio worker task admits them into a running
batch and runs every forward pass in one worker thread, so the event loop never blocks. The
batch is continuous: new requests are prefilled and merged into the KV cache (left padding,
attention mask, per-row position ids) at any decode step, and finished rows drop out. This
module is the event-loop side (queue, admission, weight updates, shutdown); the batch itself,
its forward passes and how logprobs are recorded are in :mod:`.hf_batch`.
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import logging
import random
from typing import Any

from agentfly_cli.backends.base import (
    Backend,
    BackendUnavailableError,
    Generation,
    RequestContext,
    SamplingParams,
    StepStreaming,
)
from agentfly_cli.backends.hf_batch import BatchRequest, RunningBatch
from agentfly_cli.errors import UserError
from agentfly_cli.runtime.devices import pick_device, pick_dtype
from agentfly_cli.runtime.malloc import keep_freed_memory
from agentfly_cli.settings.rollout import BackendSettings

log = logging.getLogger(__name__)


def _as_ids(value: Any) -> set[int]:
    if value is None:
        return set()
    if isinstance(value, int):
        return {value}
    return {int(v) for v in value}


class HFBackend(StepStreaming, Backend):
    """Token-in, token-out generation with a transformers model and continuous batching."""

    name = "hf"
    returns_tokens = True
    takes_weights = True
    takes_adapters = True
    takes_partial_weights = True
    scores_prompts = True

    def __init__(self, config: BackendSettings, tokenizer: Any = None, model: Any = None):
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

            tokenizer = load_tokenizer(config.tokenizer or config.model, config.tokenizer_loader)
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
        try:
            embeddings = getattr(model, "get_input_embeddings", lambda: None)()
        except (NotImplementedError, AttributeError):  # a remote-code model may not have it
            embeddings = None
        self.vocab_size = getattr(embeddings, "num_embeddings", None)  # None: not checked
        self._seeds = random.Random(config.seed)
        self._executor = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="agentfly-hf")
        # Model-thread state: the running batch (touched only from the executor's thread).
        self._batch = RunningBatch(
            model.eval(), self.device, self.pad_id, config.prefix_cache_tokens
        )
        self.stats = self._batch.stats
        # Event-loop state.
        self._loop: asyncio.AbstractEventLoop | None = None
        self._worker: asyncio.Task | None = None
        self._pending: collections.deque[BatchRequest] = collections.deque()
        self._active: set[BatchRequest] = set()
        self._wakeup: asyncio.Event | None = None
        self._idle: asyncio.Event | None = None
        self._weights_lock: asyncio.Lock | None = None
        self._paused = False
        self._closed = False

    # ---- public API -------------------------------------------------------------------------

    @property
    def model(self) -> Any:
        """The transformers model (PEFT-wrapped once LoRA adapters arrive; None once closed)."""
        return self._batch.model

    @property
    def forward_passes(self) -> int:
        """How many forward passes the model ran (prefills and decode steps)."""
        return self.stats["forward_passes"]

    async def generate(
        self, prompt_ids: list[int], params: SamplingParams, context: RequestContext | None = None
    ) -> Generation:
        """Sample one response; concurrent calls share forward passes."""
        return await self._submit(prompt_ids, params)

    async def _submit(
        self, prompt_ids: list[int], params: SamplingParams, listener: Any = None
    ) -> Generation:
        if self._closed:
            raise BackendUnavailableError("the hf backend is closed")
        prompt = [int(t) for t in prompt_ids]
        if not prompt:
            raise ValueError("hf backend: prompt_ids is empty")
        self._check_request(prompt, params)  # here: a bad request must not fail the batch
        max_new = min(params.max_tokens, self.max_context - len(prompt))
        if max_new <= 0:
            return Generation([], [], "length", info={"batch_size": 0, "forward_passes": 0})
        self._ensure_worker()
        loop = asyncio.get_running_loop()
        seed = params.seed if params.seed is not None else self._seeds.getrandbits(63)
        req = BatchRequest(
            prompt,
            params,
            loop.create_future(),
            frozenset(params.stop_token_ids) | self.eos_ids,
            max_new,
            seed,
            listener=listener,
        )
        self._pending.append(req)
        self._wakeup.set()
        return await req.future

    def _check_request(self, prompt: list[int], params: SamplingParams) -> None:
        """What would fail inside the shared batch (and so every request in it) fails this
        request alone: a seed torch does not take, a token id outside the vocabulary."""
        if params.seed is not None and not -(2**63) <= int(params.seed) <= 2**64 - 1:
            raise ValueError(  # the range torch's manual_seed takes
                f"hf backend: seed {params.seed} is outside torch's range (-2**63 to 2**64-1)"
            )
        if self.vocab_size is not None and (min(prompt) < 0 or max(prompt) >= self.vocab_size):
            raise ValueError(
                f"hf backend: a prompt token id is outside the vocabulary (0 to "
                f"{self.vocab_size - 1})"
            )

    def _notify_listeners(self) -> None:
        """Hand each streaming row the ids it sampled since the last step (a finished row's
        last ids come with its Generation)."""
        for row in self._batch.rows:
            req = row.req
            if req.listener is not None and len(row.token_ids) > req.streamed:
                req.listener(row.token_ids[req.streamed :])
                req.streamed = len(row.token_ids)

    async def update_weights(self, named_tensors: Any) -> None:
        """Load new weights once the running batch has drained; queued requests wait."""
        await self._while_idle(self._batch.load_weights, named_tensors)

    async def update_adapter(self, tensors: Any, config: Any) -> None:
        """Load LoRA adapter tensors; the first call wraps the model with PEFT's ``config``."""
        await self._while_idle(self._batch.load_adapter, tensors, config)

    async def prompt_logprobs(self, sequences: list[list[int]]) -> list[list[float]]:
        """Score ``sequences`` with one plain forward pass each, once the batch has drained."""
        from agentfly_cli.backends.hf_scoring import score_sequences

        def score() -> list[list[float]]:
            return score_sequences(self._batch.model, self.device, sequences)

        return await self._while_idle(score)

    async def _while_idle(self, function: Any, *args: Any) -> Any:
        """Run ``function`` in the model thread once the running batch has drained; its
        result."""
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
                return await loop.run_in_executor(self._executor, function, *args)
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
        self._batch.reset()
        self._batch.model = None
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
        self._executor.submit(self._batch.reset).result()
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

    def _take_admissions(self) -> list[BatchRequest]:
        room = self.config.max_batch_size - len(self._active)
        if self._paused or room <= 0 or (self._active and not self._batch.can_merge):
            return []
        admit = []
        while self._pending and len(admit) < room:
            req = self._pending.popleft()
            if not req.future.done():  # skip callers that were cancelled while queued
                # an update waits for the running batch to drain: these weights sample it all
                req.policy_version = self.policy_version
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
                finished = await loop.run_in_executor(
                    self._executor, self._batch.step, admit, dropped
                )
            except Exception as exc:  # a failed forward pass fails the batch, not the worker
                log.warning("hf backend: forward pass failed: %s", exc)
                for req in self._active:
                    if not req.future.done():
                        req.future.set_exception(exc)
                self._active.clear()
                await loop.run_in_executor(self._executor, self._batch.reset)
                continue
            self._active.difference_update(dropped)
            self._notify_listeners()
            for req, generation in finished:
                self._active.discard(req)
                generation.policy_version = req.policy_version
                if not req.future.done():
                    req.future.set_result(generation)
