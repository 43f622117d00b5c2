"""The gateway's core: OpenAI chat completions over a token-in, token-out backend, captured.

:class:`Gateway` takes an OpenAI ``/v1/chat/completions`` body, renders the prompt with the
model's chat template (or extends the session's segment, see :mod:`.capture`), samples with the
backend, parses the tool calls with the model's parser, and answers with an OpenAI reply. The
HTTP side is :mod:`.app`.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import math
import secrets
import time
import uuid
from dataclasses import dataclass
from typing import Any

from agentfly_cli.backends.base import Generation, RequestContext, SamplingParams
from agentfly_cli.serve.capture import Episode, Plan
from agentfly_cli.serve.errors import (  # noqa: F401 (the gateway's errors, importable from here)
    ContextTooLong,
    RequestError,
    SessionEnded,
    TooManySessions,
    UnknownSession,
)
from agentfly_cli.serve.limits import LRU, ServeLimits
from agentfly_cli.serve.sessions import Sessions

MAX_N = 16
SEED_RANGE = (-(2**63), 2**63 - 1)  # a 64-bit seed (a choice's own is seed + its index)
INLINE_RENDER_CHARS = 8192  # a request's new text up to this renders on the loop, else a thread


def context_limit(backend: Any) -> float:
    """The backend's context in tokens (vLLM's ``max_model_len``, hf's ``max_context``)."""
    for name in ("max_model_len", "max_context"):
        value = getattr(backend, name, None)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    return math.inf


@dataclass
class Sampling:
    """A request's sampling settings, checked."""

    n: int
    params: SamplingParams
    tools: list | None
    parse_calls: bool
    stream: bool
    stops: tuple[str, ...] = ()  # the request's stop strings: cut from the reply's text
    usage: str = ""  # streamed usage: "" none, "last" a final chunk, "each" every chunk too


def greedy_if(episode: Episode, sampling: Sampling) -> Sampling:
    """``sampling`` at temperature 0 (top_p 1, no top_k) for a greedy episode, ReMax's
    baseline: the policy's mode, not a sample of it; else ``sampling`` as it is."""
    if not episode.greedy:
        return sampling
    params = dataclasses.replace(sampling.params, temperature=0.0, top_p=1.0, top_k=0)
    return dataclasses.replace(sampling, params=params)


class Gateway:
    """Chat completions for one model, each recorded in its session's :class:`Episode`."""

    def __init__(
        self,
        backend: Any,
        chat: Any,
        parser: Any,
        model_name: str,
        *,
        max_tokens: int = 1024,
        sampling: Any = None,
        max_prompt_tokens: int | None = None,
        limits: ServeLimits | None = None,
        open_on_request: bool = True,
    ) -> None:
        """``sampling`` (RolloutSettings): its temperature, top_p and top_k replace the
        requests', and its max_tokens_per_turn caps theirs (training). ``max_prompt_tokens``:
        a longer conversation is refused (so is one over the backend's context).
        ``limits``: the bounds on requests and sessions. ``open_on_request`` False: only
        sessions opened with :meth:`open_episode` are served (the agent engine's)."""
        self.backend, self.chat, self.parser = backend, chat, parser
        self.model_name = model_name
        self.max_tokens = max_tokens
        self.sampling = sampling
        self.max_prompt_tokens = max_prompt_tokens
        self.limits = limits or ServeLimits()
        self.sessions = Sessions(self.limits, open_on_request=open_on_request, on_close=self._ended)
        self.on_close: Any = None  # called with each episode that ends (e.g. to write it)
        self.sampled_tokens = 0
        self._eot = set(chat.eot_token_ids)
        self._stop_cache = LRU(self.limits.stop_cache_size)
        self._typed_parsers: dict[str, Any] = {}  # request tools (as JSON) -> typed parser

    @property
    def eot_ids(self) -> set[int]:
        """The template's end-of-turn ids (a reply's last id when the model ended its turn)."""
        return self._eot

    # ---- sessions (sessions.py) -------------------------------------------------------------
    @property
    def episodes(self) -> dict[str, Episode]:
        """The open sessions' episodes, by session id."""
        return self.sessions.episodes

    def episode(self, session: str) -> Episode:
        """The session's episode, opened on first use where sessions open on request."""
        return self.sessions.get(session)

    def open_episode(self, session: str, **task: Any) -> Episode:
        """Open ``session`` (the agent engine's, before its agent runs) for the task of index
        ``task_index`` and id ``task_id`` (the row's ``"id"``): its requests reach the backend
        as that task's (the scripted backend replays that task's line). ``greedy=True``: its
        requests sample at temperature 0 (ReMax's baseline episode), whatever they ask."""
        return self.sessions.open(session, **task)

    def close_episode(
        self, session: str, reward: float | None = None, *, checked: bool = False, why: str = ""
    ) -> Episode | None:
        """End a session (:meth:`.Sessions.close`): its episode, or None when unknown."""
        return self.sessions.close(session, reward, checked=checked, why=why)

    def expire_idle(self, *, force: bool = False) -> int:
        """End the idle sessions (:meth:`.Sessions.expire_idle`); how many ended."""
        return self.sessions.expire_idle(force=force)

    def _ended(self, episode: Episode) -> None:
        if self.on_close is not None:
            self.on_close(episode)

    # ---- requests ---------------------------------------------------------------------------
    def check(self, body: Any) -> tuple[list[dict[str, Any]], Sampling]:
        """The request's messages and sampling settings; :class:`RequestError` when bad."""
        if not isinstance(body, dict):
            raise RequestError("the request body must be a JSON object")
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages:
            raise RequestError("'messages' must be a non-empty list of messages", "messages")
        for i, message in enumerate(messages):
            _check_message(i, message)
        n = _integer(body, "n", 1, 1, MAX_N)
        key = "max_completion_tokens" if "max_completion_tokens" in body else "max_tokens"
        max_tokens = _integer(body, key, self.max_tokens, 1)
        temperature = _number(body, "temperature", 1.0, 0.0, 2.0)
        top_p = _number(body, "top_p", 1.0, 0.0, 1.0)
        if top_p == 0.0:
            raise RequestError("'top_p' must be above 0", "top_p")
        seed = body.get("seed")
        if seed is not None:
            seed = _integer(body, "seed", 0, *SEED_RANGE)
        stops = body.get("stop") or []
        if isinstance(stops, str):
            stops = [stops]
        if not isinstance(stops, list) or not all(isinstance(s, str) and s for s in stops):
            raise RequestError("'stop' must be a string or a list of strings", "stop")
        limits = self.limits
        if len(stops) > limits.max_stops or any(len(s) > limits.max_stop_chars for s in stops):
            raise RequestError(
                f"'stop' takes at most {limits.max_stops} strings of at most "
                f"{limits.max_stop_chars} characters each", "stop",
            )  # fmt: skip
        tools = body.get("tools") or None
        if tools is not None and not isinstance(tools, list):
            raise RequestError("'tools' must be a list of tool definitions", "tools")
        for i, definition in enumerate(tools or []):
            function = definition.get("function") if isinstance(definition, dict) else None
            if not isinstance(function, dict) or not isinstance(function.get("name"), str):
                raise RequestError(
                    f"tools[{i}] must be an object with a function and its name "
                    '({"type": "function", "function": {"name": ..., "parameters": {...}}})',
                    "tools",
                )
        choice = body.get("tool_choice", "auto")
        if choice not in ("auto", "none", "required") and not isinstance(choice, dict):
            raise RequestError(
                "'tool_choice' must be auto, none, required or a tool", "tool_choice"
            )
        top_k = 0
        if self.sampling is not None:  # training: RL explores with the rollout's settings
            rollout = self.sampling
            temperature, top_p, top_k = rollout.temperature, rollout.top_p, rollout.top_k
            max_tokens = min(max_tokens, rollout.max_tokens_per_turn)
        params = SamplingParams(
            max_tokens=max_tokens,
            temperature=temperature,
            top_p=top_p,
            top_k=top_k,
            stop_token_ids=tuple(self.chat.eot_token_ids),  # and the stops' (prepare)
            seed=seed,
        )
        stream = bool(body.get("stream", False))
        usage = _stream_usage(body.get("stream_options"))
        return messages, Sampling(n, params, tools, choice != "none", stream, tuple(stops), usage)

    async def prepare(
        self, session: str | None, checked: tuple[list[dict[str, Any]], Sampling]
    ) -> tuple[Episode, Plan, Sampling]:
        """A checked request planned: its episode (an anonymous one, never listed, without a
        session; marked busy until :meth:`release`), the prompt's plan and the sampling
        settings with the stop strings' ids; :class:`RequestError` when bad. Rendering and
        the stop ids' vocabulary scan run in worker threads: the event loop stays free."""
        messages, sampling = checked
        if sampling.stops:
            stop_ids = await self._stop_ids(sampling.stops)
            params = dataclasses.replace(
                sampling.params, stop_token_ids=(*sampling.params.stop_token_ids, *stop_ids)
            )
            sampling = dataclasses.replace(sampling, params=params)
        if session is None:
            self.sessions.check(None)  # refused where only an engine opens sessions
            anonymous = f"anon-{secrets.token_urlsafe(16)}"
            episode = Episode(anonymous, group_id=anonymous)
        else:
            episode = self.episode(session)
            sampling = greedy_if(episode, sampling)
        episode.busy += 1
        try:
            match = episode.match(messages)  # on the loop: the segment as it is now
            render = (episode.render, self.chat, messages, sampling.tools, match)
            if _render_size(messages[match.start :], match.segment is None and sampling.tools):
                plan = await asyncio.to_thread(*render)  # a big render: off the event loop
            else:
                plan = render[0](*render[1:])  # a few kB: faster than a thread's round trip
            limit = min(self.max_prompt_tokens or math.inf, context_limit(self.backend))
            if len(plan.prompt_ids) >= limit:
                raise ContextTooLong(len(plan.prompt_ids), limit)
        except BaseException:
            self.release(episode)
            raise
        return episode, plan, sampling

    def release(self, episode: Episode) -> None:
        """A request of ``episode`` is over (answered or failed): it may go idle."""
        episode.busy = max(0, episode.busy - 1)
        episode.last_used = time.monotonic()

    async def complete(self, session: str | None, body: Any) -> dict[str, Any]:
        """One ``/v1/chat/completions`` call; its choices recorded in ``session``'s episode
        (when None, a one-request episode that ends with the request)."""
        episode, plan, sampling = await self.prepare(session, self.check(body))
        try:
            generations = await asyncio.gather(
                *(self._sample(plan, sampling, episode, i) for i in range(sampling.n))
            )
        finally:
            self.release(episode)
        choices = []
        for i, generation in enumerate(generations):
            message, finish = self.reply(
                generation, sampling.parse_calls, sampling.stops, sampling.tools
            )
            choices.append({"index": i, "message": message, "finish_reason": finish,
                            "logprobs": None})  # fmt: skip
            if (stop := self.stop_sequence(generation, sampling.stops)) is not None:
                choices[-1]["stop_reason"] = stop  # as vLLM's server says it
        self.finish_request(session, episode, plan, generations, [c["message"] for c in choices])
        completion_tokens = sum(len(g.token_ids) for g in generations)
        return {
            "id": f"chatcmpl-{uuid.uuid4().hex}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": self.model_name,
            "choices": choices,
            "usage": {
                "prompt_tokens": len(plan.prompt_ids),
                "completion_tokens": completion_tokens,
                "total_tokens": len(plan.prompt_ids) + completion_tokens,
            },
        }

    def stream(self, session: str | None, body: Any) -> Any:
        """A ``stream: true`` call: checked now (a bad request raises here), then an async
        iterator that plans it (its errors raise from the first ``__anext__``, before any
        event) and gives server-sent events, text as it is sampled (streaming.py)."""
        return self._stream(session, self.check(body))

    async def _stream(self, session: str | None, checked: tuple) -> Any:
        from agentfly_cli.serve.streaming import stream_events

        episode, plan, sampling = await self.prepare(session, checked)
        try:
            async for event in stream_events(self, session, episode, plan, sampling):
                yield event
        finally:
            self.release(episode)

    def finish_request(
        self,
        session: str | None,
        episode: Episode,
        plan: Plan,
        generations: list[Generation],
        messages: list[dict[str, Any]],
    ) -> None:
        """Record a request's choices in its episode (each its own segment when n > 1)."""
        for generation, message in zip(generations, messages, strict=True):
            episode.record(plan, generation, message, self._eot)
        self.sampled_tokens += sum(len(g.token_ids) for g in generations)
        if session is None and self.on_close is not None:  # a one-request episode, ended
            self.on_close(episode)

    def request_args(
        self, sampling: Sampling, episode: Episode, index: int
    ) -> tuple[SamplingParams, RequestContext]:
        """Choice ``index``'s sampling parameters (its own seed, kept a signed 64-bit
        integer) and request context (:meth:`.Episode.request_context`)."""
        params = sampling.params
        if params.seed is not None and index:
            seed = params.seed + index
            seed = seed - 2**64 if seed > SEED_RANGE[1] else seed  # wraps, as int64 would
            params = SamplingParams(**{**params.__dict__, "seed": seed})
        return params, episode.request_context(index)

    async def _sample(
        self, plan: Plan, sampling: Sampling, episode: Episode, index: int
    ) -> Generation:
        params, context = self.request_args(sampling, episode, index)
        version = getattr(self.backend, "policy_version", 0)
        generation = await self.backend.generate(plan.prompt_ids, params, context)
        if generation.policy_version is None:
            generation.policy_version = version
        return generation

    def reply(
        self,
        generation: Generation,
        parse_calls: bool,
        stops: tuple[str, ...] = (),
        tools: list | None = None,
    ) -> tuple[dict[str, Any], str]:
        """The OpenAI assistant message for a generation, and its finish reason. As OpenAI does,
        the text ends before a stop string (the recorded ids keep the token that held it).
        ``tools``: the request's tool definitions, for a format that types values by them."""
        text, _ = reply_text(self.chat, self._eot, generation, stops)
        message: dict[str, Any] = {"role": "assistant", "content": text}
        finish = "length" if generation.finish_reason == "length" else "stop"
        if not parse_calls:
            return message, finish
        parsed = self.parser_for(tools).parse(text)
        if parsed.reasoning is not None:
            message["reasoning_content"] = parsed.reasoning
        message["content"] = parsed.content if parsed.content or not parsed.calls else None
        if parsed.calls:
            message["tool_calls"] = [
                {
                    "id": call.id or f"call_{uuid.uuid4().hex[:24]}",
                    "type": "function",
                    "function": {
                        "name": call.name,
                        "arguments": call.arguments
                        if isinstance(call.arguments, str)
                        else json.dumps(call.arguments),
                    },
                }
                for call in parsed.calls
            ]
            finish = "tool_calls"
        return message, finish

    def stop_sequence(self, generation: Generation, stops: tuple[str, ...]) -> str | None:
        """The stop string that ended the reply's text (None: none did, or none was asked)."""
        return reply_text(self.chat, self._eot, generation, stops)[1] if stops else None

    def parser_for(self, tools: list | None) -> Any:
        """The parser, typing argument values by the request's tool schemas where its format
        reads values as text (qwen3_coder: ``<parameter=n>5</parameter>`` is 5 or "5" by the
        schema). Agents send the same tools with every request: one typed parser per tool set."""
        with_tools = getattr(self.parser, "with_tools", None)
        if not tools or not callable(with_tools):
            return self.parser
        key = json.dumps(tools, sort_keys=True, default=str)
        parser = self._typed_parsers.get(key)
        if parser is None:
            if len(self._typed_parsers) >= 64:  # agents with ever-changing tools: keep it small
                self._typed_parsers.pop(next(iter(self._typed_parsers)))
            parser = self._typed_parsers[key] = with_tools(tools)
        return parser

    async def _stop_ids(self, stops: tuple[str, ...]) -> tuple[int, ...]:
        """The ids of the tokens holding a stop string (a scan of the vocabulary, in a worker
        thread; the last ``limits.stop_cache_size`` stop lists are kept)."""
        ids = self._stop_cache.get(stops)
        if ids is None:
            ids = tuple(await asyncio.to_thread(self.chat.stop_token_ids, list(stops)))
            self._stop_cache.put(stops, ids)
        return ids


async def count_tokens(gateway: Gateway, body: Any, session: str | None = None) -> int:
    """The length of a request's prompt rendered in full (in a worker thread); nothing is
    sampled or recorded, no session opened (``session`` is refused where a request to it
    would be: :meth:`.Sessions.check`)."""
    messages, sampling = gateway.check(body)
    gateway.sessions.check(session)
    plan = await asyncio.to_thread(Episode("count").plan, gateway.chat, messages, sampling.tools)
    return len(plan.prompt_ids)


def reply_text(
    chat: Any, eot: set[int], generation: Generation, stops: tuple[str, ...]
) -> tuple[str, str | None]:
    """A generation's text (without its end-of-turn id), ending before the first stop string
    in it, and that string (None: none was in it)."""
    ids = list(generation.token_ids)
    text = chat.decode(ids[:-1] if ids and ids[-1] in eot else ids)
    cuts = [(text.find(stop), stop) for stop in stops if stop in text]
    if not cuts:
        return text, None
    at, stop = min(cuts)
    return text[:at], stop


def _render_size(messages: list[dict[str, Any]], tools: Any) -> bool:
    """Whether rendering these messages (and ``tools``) is worth a worker thread: over
    ``INLINE_RENDER_CHARS`` of text, about 10 ms of the event loop."""
    size = 0
    for message in messages:
        content = message.get("content")
        size += len(content) if isinstance(content, str) else len(str(content or ""))
        size += len(str(message.get("tool_calls") or ""))
        if size > INLINE_RENDER_CHARS:
            return True
    return bool(tools) and size + len(str(tools)) > INLINE_RENDER_CHARS


def _stream_usage(options: Any) -> str:
    """What usage a stream reports: ``stream_options.include_usage`` (OpenAI's: a last chunk
    with the request's usage), with vLLM's ``continuous_usage_stats`` (every chunk, so far)."""
    if options is None:
        return ""
    if not isinstance(options, dict):
        raise RequestError("'stream_options' must be an object", "stream_options")
    if not options.get("include_usage"):
        return ""
    return "each" if options.get("continuous_usage_stats") else "last"


def _check_message(i: int, message: Any) -> None:
    """An OpenAI chat message: a role, text content (or parts), well-formed tool calls."""
    if not isinstance(message, dict) or not isinstance(message.get("role"), str):
        raise RequestError(f"messages[{i}] must be an object with a 'role'", "messages")
    content = message.get("content")
    if content is not None and not isinstance(content, (str, list)):
        raise RequestError(f"messages[{i}].content must be a string or a list of parts", "messages")
    if isinstance(content, list) and not all(isinstance(p, (dict, str)) for p in content):
        raise RequestError(f"messages[{i}].content parts must be objects", "messages")
    calls = message.get("tool_calls")
    if calls is None:
        return
    if not isinstance(calls, list):
        raise RequestError(f"messages[{i}].tool_calls must be a list", "messages")
    for j, call in enumerate(calls):
        function = call.get("function") if isinstance(call, dict) else None
        if not isinstance(function, dict) or not isinstance(function.get("name"), str):
            raise RequestError(
                f"messages[{i}].tool_calls[{j}] must be an object with a function and its name",
                "messages",
            )


def _integer(body: dict, name: str, default: int, low: int, high: float = math.inf) -> int:
    value = body.get(name, default)
    if value is None:
        return default
    if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= high:
        bound = f"from {low} to {high}" if high != math.inf else f"at least {low}"
        if name == "seed":
            bound = "from -2**63 to 2**63-1"
        raise RequestError(f"'{name}' must be an integer {bound}", name)
    return value


def _number(body: dict, name: str, default: float, low: float, high: float) -> float:
    value = body.get(name, default)
    if value is None:
        return default
    if (
        not isinstance(value, (int, float))
        or isinstance(value, bool)
        or not low <= value <= high  # before isfinite: an int too large for a float compares
        or not math.isfinite(value)
    ):
        raise RequestError(f"'{name}' must be a number from {low:g} to {high:g}", name)
    return float(value)
