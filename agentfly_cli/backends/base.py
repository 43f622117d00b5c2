"""The backend protocol. Async, token in and token out.

A backend takes the prompt's token ids and returns the ids it sampled, their logprobs and a
finish reason. The engine never decodes sampled text to encode it again: the ids a backend
returns are the ids that training learns on.
"""

from __future__ import annotations

import abc
import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from agentfly_cli.errors import UserError

FinishReason = Literal["stop", "length", "abort"]

#: Prefixes that wrappers add to parameter names: DDP, torch.compile, FSDP.
WRAPPER_PREFIXES = ("module.", "_orig_mod.", "_fsdp_wrapped_module.")


def unwrapped_names(named_tensors: Any) -> list[tuple[str, Any]]:
    """``(name, tensor)`` pairs from a state dict or an iterable of pairs, with the prefixes
    that DDP, torch.compile and FSDP add to names removed."""
    items = named_tensors.items() if hasattr(named_tensors, "items") else named_tensors
    pairs = []
    for name, tensor in items:
        for prefix in WRAPPER_PREFIXES:
            name = name.removeprefix(prefix)
        pairs.append((name, tensor))
    return pairs


class BackendUnavailableError(UserError):
    """A backend's optional dependency is missing, or it cannot serve this request."""


@dataclass(frozen=True)
class SamplingParams:
    """How to sample one response."""

    max_tokens: int = 256
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0  # 0 = off
    stop_token_ids: tuple[int, ...] = ()  # end-of-turn ids; sampling one of them ends the turn
    seed: int | None = None


@dataclass(frozen=True)
class RequestContext:
    """Where a request comes from. Backends may ignore it; ``scripted`` replays by it."""

    task_index: int = 0
    sample_index: int = 0  # which of the n chains of the task
    turn: int = 0  # assistant turn number within the chain, from 0
    group_id: str = ""
    task_id: str | None = None  # the task row's "id", when it has one


@dataclass
class Generation:
    """One sampled response.

    ``token_ids`` include the stop token when the model sampled one (finish reason ``stop``).
    ``logprobs`` has one float per token, or is None when the backend cannot give them.
    ``token_exact`` is False when the ids were re-encoded from text (an OpenAI server that
    does not return token ids): such trajectories serve evaluation, never training.
    """

    token_ids: list[int]
    logprobs: list[float] | None
    finish_reason: FinishReason
    text: str | None = None
    token_exact: bool = True
    info: dict[str, Any] = field(default_factory=dict)
    #: the weight version that sampled every token (a backend that knows sets it; else the
    #: engine takes the backend's ``policy_version`` from before the request, the oldest one
    #: that can have sampled it)
    policy_version: int | None = None


class Backend(abc.ABC):
    """An async token-in, token-out LLM."""

    name: str = "backend"
    #: True when ``generate`` returns the ids the model sampled (training needs this).
    returns_tokens: bool = True
    #: Capabilities the trainer checks: ``update_weights`` (full pushes) and
    #: ``update_adapter`` (LoRA adapter pushes) are implemented. A backend that implements one
    #: sets its flag.
    takes_weights: bool = False
    takes_adapters: bool = False
    #: ``update_weights`` takes some of the weights (the others stay): delta sync sends only
    #: what changed. False: every push carries every weight.
    takes_partial_weights: bool = False
    #: ``prompt_logprobs`` is implemented (the weight-sync tripwire scores its probe with it).
    scores_prompts: bool = False
    #: How many weight updates the weights it samples from have seen (0: the weights it
    #: started with). The trainer sets it as each push begins: requests sent from then on
    #: wait for the push and run on those weights.
    policy_version: int = 0

    @abc.abstractmethod
    async def generate(
        self, prompt_ids: list[int], params: SamplingParams, context: RequestContext | None = None
    ) -> Generation:
        """Sample one response to ``prompt_ids``."""

    async def stream(
        self, prompt_ids: list[int], params: SamplingParams, context: RequestContext | None = None
    ) -> AsyncIterator[list[int] | Generation]:
        """Sample one response, yielding lists of new token ids as they are sampled, then the
        :class:`Generation` (its ``token_ids`` are the whole response: they are what counts).
        By default the whole response at once; a backend that can does better (``hf``)."""
        yield await self.generate(prompt_ids, params, context)

    async def update_weights(self, named_tensors: Any) -> None:
        """Load new policy weights: an iterable of ``(name, tensor)`` pairs or a state dict."""
        raise NotImplementedError(f"the {self.name} backend cannot take new weights")

    async def prompt_logprobs(self, sequences: list[list[int]]) -> list[list[float]]:
        """For each sequence of ids, the logprob of every token after the first given those
        before it, from the raw logits (temperature 1): ``len(ids) - 1`` floats."""
        raise NotImplementedError(f"the {self.name} backend cannot score prompts")

    async def update_adapter(self, tensors: Any, config: Any) -> None:
        """Load new LoRA adapter weights (named as PEFT saves them) for a PEFT ``config``
        (a ``peft.LoraConfig`` or its dict); the base weights stay."""
        raise NotImplementedError(f"the {self.name} backend cannot take LoRA adapters")

    async def close(self) -> None:  # noqa: B027 - optional hook
        """Release the model, threads and connections."""

    async def __aenter__(self) -> Backend:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


async def stream_steps(
    submit: Callable[[Callable[[list[int]], None]], Awaitable[Generation]],
) -> AsyncIterator[list[int] | Generation]:
    """``Backend.stream`` for a backend that calls a listener with each step's new ids:
    ``submit(listener)`` starts the request and returns its Generation. Yields the ids as the
    listener gets them, then the Generation; a consumer that stops early cancels the request."""
    steps: asyncio.Queue[list[int]] = asyncio.Queue()
    task = asyncio.ensure_future(submit(steps.put_nowait))
    try:
        while not task.done():
            waiter = asyncio.ensure_future(steps.get())
            await asyncio.wait({task, waiter}, return_when=asyncio.FIRST_COMPLETED)
            if waiter.done():
                yield waiter.result()
            else:
                waiter.cancel()
        while not steps.empty():
            yield steps.get_nowait()
        yield task.result()
    finally:
        task.cancel()  # a client that stopped reading: its request leaves the batch


class StepStreaming:
    """``Backend.stream`` for a backend whose ``_submit(prompt_ids, params, listener)`` calls
    ``listener`` with each step's new ids and returns the Generation (``hf``, ``vllm``)."""

    async def stream(
        self, prompt_ids: list[int], params: SamplingParams, context: RequestContext | None = None
    ) -> AsyncIterator[list[int] | Generation]:
        """Sample one response, yielding each step's new ids, then the Generation."""
        submit = self._submit  # type: ignore[attr-defined]
        async for item in stream_steps(lambda listener: submit(prompt_ids, params, listener)):
            yield item
