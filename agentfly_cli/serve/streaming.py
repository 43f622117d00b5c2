"""A streamed reply's text, shown as the tokens arrive, never more than the whole reply will say.

The gateway streams ``reasoning_content`` and ``content`` deltas while the backend samples
(``Backend.stream``), and sends the tool calls, the rest of the text and the finish reason
once the reply is whole and parsed. What it streams is always the start of what the parsed
reply holds, so a client that joins the deltas gets the same message as without streaming:

- text is decoded incrementally (a few ids of context, so byte-level and SentencePiece
  tokenizers give the same characters as a whole decode); a split UTF-8 character waits;
- a think block (opened by the prompt or at the start of the reply) streams as reasoning up to
  ``</think>``;
- content streams up to the first text that may begin markup: the parser's ``stream_markers``
  (``<tool_call>``, ``[TOOL_CALLS]``...), think tags, end-of-turn markers, the request's stop
  strings; the last characters that could be the start of one, and trailing whitespace, wait;
- a parser without ``stream_markers`` (``line``, ``react``, ``harmony``) holds all the text
  to the end: it is sent whole, as before.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

from agentfly_cli.backends.base import Generation
from agentfly_cli.chat.parser_output import _TRAILING_MARKERS, THINK_CLOSE, THINK_OPEN

log = logging.getLogger(__name__)
CONTEXT_IDS = 6  # ids decoded before the new ones, so the new text comes out as in context
MAX_WAIT_IDS = 16  # a character still split after this many ids is shown as decoded


@dataclass
class _View:
    """What of one part (reasoning or content) has been looked at and sent."""

    cursor: int  # self.text up to here has been looked at
    first: int | None = None  # the part's first non-blank character
    last: int = 0  # after its last non-blank character so far
    shown: int = 0  # sent up to here


class ReplyStream:
    """One choice of a streamed reply: :meth:`feed` the sampled ids, get the deltas to send;
    :meth:`finish` with the parsed message, get the last delta."""

    def __init__(
        self,
        chat: Any,
        parser: Any,
        *,
        eot_ids: set[int],
        stops: tuple[str, ...] = (),
        parse_calls: bool = True,
        opens_in_think: bool = False,
    ) -> None:
        self.chat, self.eot_ids = chat, eot_ids
        markers = getattr(parser, "stream_markers", None) if parse_calls else ()
        self.hold_all = markers is None
        self.strip = parse_calls  # a parsed reply's text is stripped, a raw one is not
        self.think = parse_calls and getattr(parser, "think_tags", False)
        found = [*(markers or ()), *_TRAILING_MARKERS, *stops]
        if self.think:
            found += [THINK_OPEN, THINK_CLOSE]
        self.markers = tuple(m for m in found if m)
        self.tail = max((len(m) for m in self.markers), default=1) - 1
        self.starts = frozenset(m[0] for m in self.markers)  # where a held-back prefix may begin
        self.ids: list[int] = []
        self.read = 0  # ids whose characters are in self.text
        self.text = ""
        self.state = "reasoning" if self.think and opens_in_think else "start"
        self.start = 0  # where the current part (reasoning or content) begins in self.text
        self.scanned = 0  # self.text searched for markers up to here
        self.views: dict[str, _View] = {}

    # ---- while sampling -------------------------------------------------------------------
    def feed(self, new_ids: list[int]) -> dict[str, str]:
        """The deltas these ids allow: ``{"reasoning_content": ..., "content": ...}`` (only
        the non-empty ones)."""
        self.ids.extend(int(i) for i in new_ids if int(i) not in self.eot_ids)
        self._decode()
        if self.hold_all:
            return {}
        out: dict[str, str] = {}
        if self.state == "start":
            self._enter()
        if self.state == "reasoning":
            close = self.text.find(THINK_CLOSE, max(self.start, self.scanned - self.tail))
            self.scanned = len(self.text)
            if close < 0:
                self._show(out, "reasoning_content", self._safe_end(self.start))
                return out
            self._show(out, "reasoning_content", close)
            self.state, self.start = "content", close + len(THINK_CLOSE)
            self.scanned = self.start
        if self.state == "content":
            hit = self._first_marker(self.start)
            if hit >= 0:
                self._show(out, "content", hit)
                self.state = "held"  # markup from here: the rest comes parsed, at the end
            else:
                self._show(out, "content", self._safe_end(self.start))
        return out

    def _decode(self) -> None:
        """Add the characters of the ids read since the last call (a split character waits)."""
        start = max(0, self.read - CONTEXT_IDS)
        before = self.chat.decode(self.ids[start : self.read])
        after = self.chat.decode(self.ids[start:])
        waiting = len(self.ids) - self.read < MAX_WAIT_IDS  # invalid bytes never complete
        if waiting and (after.endswith("\ufffd") or not after.startswith(before)):
            return  # half a character, or a merge that changed the context: wait for more
        self.text += after[len(before) :]
        self.read = len(self.ids)

    def _enter(self) -> None:
        """Decide, once the reply's first characters are known, whether it opens a think
        block (reasoning first) or is content."""
        lead = self.text.lstrip()
        if not lead:
            return
        if self.think and lead.startswith(THINK_OPEN):
            self.state = "reasoning"
            self.start = self.text.find(THINK_OPEN) + len(THINK_OPEN)
        elif self.think and THINK_OPEN.startswith(lead[: len(THINK_OPEN)]):
            return  # "<thi": wait
        else:
            self.state = "content"

    def _first_marker(self, start: int) -> int:
        """The first marker at or after ``start``; text already searched is not searched again
        (a long reply costs one pass)."""
        since = max(start, self.scanned - self.tail)
        self.scanned = len(self.text)
        hits = [i for i in (self.text.find(m, since) for m in self.markers) if i >= 0]
        return min(hits, default=-1)

    def _safe_end(self, start: int) -> int:
        """Where shown text may end: before the last characters that could begin a marker
        (memory and time linear in the markers' length: only characters that begin one are
        compared, and nothing is stored per prefix)."""
        text, end = self.text, len(self.text)
        for i in range(max(start, end - self.tail), end):
            if text[i] in self.starts:
                rest = end - i
                if any(len(m) > rest and m.startswith(text[i:]) for m in self.markers):
                    return i
        return end

    def _show(self, out: dict[str, str], key: str, end: int) -> None:
        """Send what ``self.text[self.start:end]``, stripped as the parser strips (when it
        parses), adds to what was sent. Only the characters new since the last call are
        looked at."""
        view = self.views.setdefault(key, _View(self.start))
        if end <= view.cursor:
            return
        if not self.strip:  # text as sampled (no tool calls parsed): nothing is stripped
            view.first, view.last = self.start, end
        else:
            chunk = self.text[view.cursor : end]
            if view.first is None:
                rest = chunk.lstrip()
                if rest:
                    view.first = view.shown = end - len(rest)
            if view.first is not None:
                kept = chunk.rstrip()
                if kept:
                    view.last = max(view.first, view.cursor + len(kept))
        view.cursor = end
        if view.last > view.shown:
            out[key] = out.get(key, "") + self.text[max(view.shown, view.first) : view.last]
            view.shown = view.last

    def _shown(self, key: str) -> str:
        """The text of ``key`` sent so far."""
        view = self.views.get(key)
        if view is None or view.first is None:
            return ""
        return self.text[view.first : view.shown]

    # ---- at the end -------------------------------------------------------------------------
    def finish(self, message: dict[str, Any]) -> dict[str, Any]:
        """The last delta: the rest of the text the parsed ``message`` holds beyond what was
        streamed, and its tool calls."""
        delta: dict[str, Any] = {}
        for key in ("reasoning_content", "content"):
            whole, shown = message.get(key) or "", self._shown(key)
            if whole.startswith(shown):
                if len(whole) > len(shown):
                    delta[key] = whole[len(shown) :]
            else:  # model output the markers did not foresee (a stray </think>): cannot unsay
                log.warning("gateway: the streamed %s is not the start of the reply's", key)
        calls = message.get("tool_calls") or []
        if calls:
            delta["tool_calls"] = [{"index": i, **call} for i, call in enumerate(calls)]
        return delta


def opens_in_think(chat: Any, prompt_ids: list[int]) -> bool:
    """Whether the rendered prompt leaves a think block open (the reply starts inside it)."""
    tail = chat.decode(list(prompt_ids[-16:]))
    return tail.rfind(THINK_OPEN) > tail.rfind(THINK_CLOSE)


async def stream_events(
    gateway: Any, session: str | None, episode: Any, plan: Any, sampling: Any
) -> AsyncIterator[str]:
    """A planned request's ``chat.completion.chunk`` events: per choice the role, text deltas
    as the backend samples, then the parsed rest (tool calls) and the finish reason; then
    ``[DONE]``. The choices are recorded in the episode once all are whole; a client that
    leaves early cancels the sampling and records nothing."""
    base = {"id": f"chatcmpl-{uuid.uuid4().hex}", "object": "chat.completion.chunk",
            "created": int(time.time()), "model": gateway.model_name}  # fmt: skip
    think = opens_in_think(gateway.chat, plan.prompt_ids)
    events: asyncio.Queue[str | None] = asyncio.Queue()

    async def choice(index: int) -> tuple[Generation, dict[str, Any]]:
        streamer = ReplyStream(
            gateway.chat,
            gateway.parser_for(sampling.tools),
            eot_ids=gateway.eot_ids,
            stops=sampling.stops,
            parse_calls=sampling.parse_calls,
            opens_in_think=think,
        )
        events.put_nowait(_event(base, index, {"role": "assistant", "content": ""}))
        params, context = gateway.request_args(sampling, episode, index)
        version = getattr(gateway.backend, "policy_version", 0)
        generation, fed = None, 0
        async for item in gateway.backend.stream(plan.prompt_ids, params, context):
            if isinstance(item, Generation):  # the last item: the stream ends with it
                generation = item
                continue
            fed += len(item)
            delta = streamer.feed(item)
            if delta:
                events.put_nowait(_event(base, index, delta))
        if generation is None:
            raise RuntimeError(f"the {gateway.backend.name} backend's stream gave no Generation")
        if generation.policy_version is None:
            generation.policy_version = version
        delta = streamer.feed(generation.token_ids[fed:])  # ids the last step sampled
        if delta:
            events.put_nowait(_event(base, index, delta))
        message, finish = gateway.reply(
            generation, sampling.parse_calls, sampling.stops, sampling.tools
        )
        last = streamer.finish(message)
        if last:
            events.put_nowait(_event(base, index, last))
        events.put_nowait(_event(base, index, {}, finish))
        return generation, message

    async def run_all() -> list[tuple[Generation, dict[str, Any]]]:
        tasks = [asyncio.ensure_future(choice(i)) for i in range(sampling.n)]
        try:
            return await asyncio.gather(*tasks)
        except BaseException:
            for task in tasks:  # one choice failed: the others stop sampling
                task.cancel()
            raise
        finally:
            events.put_nowait(None)

    task = asyncio.ensure_future(run_all())
    results = None
    try:
        while (event := await events.get()) is not None:
            yield event
        results = task.result()  # a failed choice: one error event, nothing recorded
    except Exception as exc:
        log.exception("gateway: a streamed request failed")
        yield _error_event(exc)
        return
    finally:
        task.cancel()
        if results is None and session is None:  # a one-request episode that never was
            gateway.episodes.pop(episode.id, None)
    generations = [g for g, _ in results]
    gateway.finish_request(session, episode, plan, generations, [m for _, m in results])
    if sampling.include_usage:  # OpenAI's last chunk: no choices, the request's usage
        sampled = sum(len(g.token_ids) for g in generations)
        usage = {"prompt_tokens": len(plan.prompt_ids), "completion_tokens": sampled,
                 "total_tokens": len(plan.prompt_ids) + sampled}  # fmt: skip
        yield f"data: {json.dumps({**base, 'choices': [], 'usage': usage})}\n\n"
    yield "data: [DONE]\n\n"


def _event(base: dict, index: int, delta: dict, finish: str | None = None) -> str:
    chunk = {**base, "choices": [{"index": index, "delta": delta, "finish_reason": finish,
                                  "logprobs": None}]}  # fmt: skip
    return f"data: {json.dumps(chunk)}\n\n"


def _error_event(exc: BaseException) -> str:
    message = f"the request failed ({type(exc).__name__}: {exc})"
    body = {"error": {"message": message, "type": "server_error", "param": None, "code": None}}
    return f"data: {json.dumps(body)}\n\n"
