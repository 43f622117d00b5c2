"""Agent sessions in each of the gateway's dialects, as their SDKs' clients shape them.

One session is a multi-turn conversation through ``/s/{session}/v1/...``: each request extends
the one before in its dialect's own shape, and a reply's tool call is answered by a tool result
(the next turn's marker in it) before the next user turn:

- ``chat``: chat completions, the whole ``messages`` history (the reply's message echoed back,
  a ``tool`` message per call);
- ``responses``: the Responses API continuing by ``previous_response_id`` (only the new items:
  a ``function_call_output`` or a user message);
- ``responses_full``: the Responses API sending its whole ``input`` each time (the reply's
  output items echoed back, as the Agents SDK does);
- ``messages``: Anthropic Messages, the whole history in content blocks (``tool_use`` echoed
  back, a ``tool_result`` block in the next user turn).

Each turn's text carries the marker ``session-S turn-T``, so that a backend echoing the
session's last marker (:class:`MarkerEcho`) shows a reply or a recorded turn in the wrong
session. Shared by ``benchmarks/gateway_bench.py`` and tests/serve/test_serve_mixed_dialects.py.
"""

from __future__ import annotations

import json
import re
import time
from dataclasses import dataclass, field
from typing import Any

from agentfly_cli.backends.base import Backend, Generation

MARKER = re.compile(r"session-(\d+) turn-(\d+)")
NOTE = {"type": "object", "properties": {"marker": {"type": "string"}}, "required": ["marker"]}
CHAT_TOOLS = [{"type": "function", "function": {"name": "note", "description": "Note a marker.",
                                                "parameters": NOTE}}]  # fmt: skip
RESPONSES_TOOLS = [{"type": "function", "name": "note", "description": "Note a marker.",
                    "parameters": NOTE}]  # fmt: skip
MESSAGES_TOOLS = [{"name": "note", "description": "Note a marker.", "input_schema": NOTE}]
SYSTEM = "Note every marker you are told."
PATHS = {"chat": "/v1/chat/completions", "responses": "/v1/responses",
         "responses_full": "/v1/responses", "messages": "/v1/messages"}  # fmt: skip
DIALECTS = tuple(PATHS)


def marker(session: int, turn: int) -> str:
    return f"session-{session} turn-{turn}"


def tool_call_text(mark: str) -> str:
    """The hermes tool call a model writes to note ``mark``."""
    return "<tool_call>\n" + json.dumps({"name": "note", "arguments": {"marker": mark}}) + \
        "\n</tool_call>"  # fmt: skip


@dataclass
class Said:
    """A reply as its client read it: its text, its tool calls (id, name, arguments) and
    whether it came in its dialect's own shape."""

    text: str
    calls: list[tuple[str, str, dict]] = field(default_factory=list)
    shaped: bool = True


@dataclass
class Conversation:
    """One session's client side in one dialect: what it sends next."""

    dialect: str
    session: int
    name: str
    history: list[Any] = field(default_factory=list)  # messages, or input items
    pending: list[Any] = field(default_factory=list)  # previous_response_id: the new items
    previous: str | None = None

    @property
    def path(self) -> str:
        return f"/s/{self.name}{PATHS[self.dialect]}"

    def user(self, text: str) -> None:
        """The next user turn."""
        if self.dialect == "chat":
            self.history.append({"role": "user", "content": text})
        elif self.dialect == "messages":
            self.history.append({"role": "user", "content": [{"type": "text", "text": text}]})
        else:
            item = {"type": "message", "role": "user",
                    "content": [{"type": "input_text", "text": text}]}  # fmt: skip
            (self.pending if self.dialect == "responses" else self.history).append(item)

    def results(self, answers: list[tuple[str, str]]) -> None:
        """The tool results (call id, output) of the last reply's calls."""
        if self.dialect == "chat":
            self.history += [{"role": "tool", "tool_call_id": i, "content": out}
                             for i, out in answers]  # fmt: skip
        elif self.dialect == "messages":
            blocks = [{"type": "tool_result", "tool_use_id": i, "content": out}
                      for i, out in answers]  # fmt: skip
            self.history.append({"role": "user", "content": blocks})
        else:
            items = [{"type": "function_call_output", "call_id": i, "output": out}
                     for i, out in answers]  # fmt: skip
            (self.pending if self.dialect == "responses" else self.history).extend(items)

    def body(self, max_tokens: int = 16) -> dict[str, Any]:
        """The next request."""
        if self.dialect == "chat":
            return {"model": "tiny", "messages": [{"role": "system", "content": SYSTEM},
                                                  *self.history],
                    "tools": CHAT_TOOLS, "max_tokens": max_tokens}  # fmt: skip
        if self.dialect == "messages":
            return {"model": "tiny", "system": SYSTEM, "messages": self.history,
                    "tools": MESSAGES_TOOLS, "max_tokens": max_tokens}  # fmt: skip
        body = {"model": "tiny", "instructions": SYSTEM, "tools": RESPONSES_TOOLS,
                "max_output_tokens": max_tokens}  # fmt: skip
        if self.dialect == "responses_full":
            return {**body, "input": list(self.history)}
        if self.previous is not None:
            body["previous_response_id"] = self.previous
        return {**body, "input": list(self.pending)}

    def read(self, reply: dict[str, Any]) -> Said:
        """Read a reply (its shape checked) and keep it as the dialect's client does."""
        if self.dialect == "chat":
            return self._read_chat(reply)
        if self.dialect == "messages":
            return self._read_messages(reply)
        return self._read_response(reply)

    def _read_chat(self, reply: dict[str, Any]) -> Said:
        shaped = reply.get("object") == "chat.completion" and len(reply.get("choices", [])) == 1
        shaped = shaped and not {"output", "content", "type"} & set(reply)
        message = reply["choices"][0]["message"]
        self.history.append(message)
        calls = [(c["id"], c["function"]["name"], json.loads(c["function"]["arguments"]))
                 for c in message.get("tool_calls") or []]  # fmt: skip
        finish = reply["choices"][0]["finish_reason"]
        shaped = shaped and finish == ("tool_calls" if calls else "stop")
        return Said(message.get("content") or "", calls, shaped)

    def _read_messages(self, reply: dict[str, Any]) -> Said:
        blocks = reply.get("content") or []
        shaped = reply.get("type") == "message" and reply.get("role") == "assistant" \
            and str(reply.get("id", "")).startswith("msg_")  # fmt: skip
        shaped = shaped and not {"choices", "output", "object"} & set(reply)
        self.history.append({"role": "assistant", "content": blocks})
        text = "".join(b["text"] for b in blocks if b.get("type") == "text")
        calls = [(b["id"], b["name"], b["input"]) for b in blocks if b.get("type") == "tool_use"]
        shaped = shaped and reply.get("stop_reason") == ("tool_use" if calls else "end_turn")
        return Said(text, calls, shaped)

    def _read_response(self, reply: dict[str, Any]) -> Said:
        items = reply.get("output") or []
        shaped = reply.get("object") == "response" and reply.get("status") == "completed" \
            and str(reply.get("id", "")).startswith("resp_")  # fmt: skip
        shaped = shaped and not {"choices", "content", "type"} & set(reply)
        parts = [p for i in items if i.get("type") == "message" for p in i["content"]]
        text = "".join(p["text"] for p in parts if p.get("type") == "output_text")
        calls = [(i["call_id"], i["name"], json.loads(i["arguments"])) for i in items
                 if i.get("type") == "function_call"]  # fmt: skip
        if self.dialect == "responses":
            self.previous, self.pending = reply["id"], []
        else:
            self.history += items
        return Said(text, calls, shaped)


async def converse(send: Any, dialect: str, session: int, turns: int, times: list[float],
                   prefix: str = "s") -> list[Said | None]:  # fmt: skip
    """One session of ``turns`` requests through ``send(path, body) -> (status, json)``; what
    each reply said (None from the first refused one on). A tool call is answered with
    ``noted`` and the next turn's marker; a text reply with the next user turn."""
    conversation = Conversation(dialect, session, f"{prefix}{session}")
    conversation.user(f"Remember {marker(session, 0)}.")
    said: list[Said | None] = []
    for turn in range(turns):
        started = time.perf_counter()
        status, reply = await send(conversation.path, conversation.body())
        times.append(time.perf_counter() - started)
        if status != 200:
            return said + [None] * (turns - turn)
        said.append(conversation.read(reply))
        following = marker(session, turn + 1)
        if said[-1].calls:
            conversation.results([(i, f"noted {following}") for i, _, _ in said[-1].calls])
        else:
            conversation.user(f"Remember {following}.")
    return said


def http_sender(client: Any, url: str) -> Any:
    """``send`` over HTTP with an ``httpx.AsyncClient``."""

    async def send(path: str, body: dict) -> tuple[int, Any]:
        response = await client.post(f"{url}{path}", json=body)
        return response.status_code, response.json()

    return send


class Alternating(Backend):
    """At once, a tool call on a session's even requests and a short text on its odd ones
    (the same ids for every session: what the gateway and the dialects cost, nothing else)."""

    name = "alternating"

    def __init__(self, chat: Any) -> None:
        self.call = chat.encode_response(tool_call_text(marker(0, 0)))
        self.text = chat.encode_response("OK.")

    async def generate(self, prompt_ids, params, context=None):
        ids = self.text if context is not None and context.turn % 2 else self.call
        return Generation(list(ids), [-0.1] * len(ids), "stop")


class MarkerEcho(Backend):
    """Echoes the last marker in the prompt: a ``note`` tool call for an even turn's marker,
    ``ack session-S turn-T`` for an odd one's (``ack none`` without a marker)."""

    name = "marker-echo"
    TAIL = 96  # prompt ids read from the end (the last turn and the generation prompt)

    def __init__(self, chat: Any) -> None:
        self.chat = chat

    async def generate(self, prompt_ids, params, context=None):
        found = MARKER.findall(self.chat.decode(list(prompt_ids[-self.TAIL :])))
        if not found:
            text = "ack none"
        else:
            mark = marker(int(found[-1][0]), int(found[-1][1]))
            text = tool_call_text(mark) if int(found[-1][1]) % 2 == 0 else f"ack {mark}"
        ids = self.chat.encode_response(text)
        return Generation(ids, [-0.1] * len(ids), "stop")


def expected(session: int, turn: int) -> tuple[str, list[dict]]:
    """What :class:`MarkerEcho` answers to turn ``turn`` of ``session``: (text, call inputs)."""
    mark = marker(session, turn)
    return ("", [{"marker": mark}]) if turn % 2 == 0 else (f"ack {mark}", [])


def misattributed(session: int, said: list[Said | None]) -> int:
    """Replies of ``session`` (to :class:`MarkerEcho`) that are not its own turn's answer."""
    wrong = 0
    for turn, reply in enumerate(said):
        if reply is None:
            continue
        text, inputs = expected(session, turn)
        wrong += (reply.text.strip(), [c[2] for c in reply.calls]) != (text, inputs)
    return wrong


def recorded_wrong(chat: Any, episode: Any, session: int, turns: int) -> str | None:
    """What is wrong with a session's recorded episode (None: one token-exact segment of
    ``turns`` turns holding only the session's own markers)."""
    if episode is None:
        return "not recorded"
    if len(episode.segments) != 1:
        return f"{len(episode.segments)} segments"
    trajectory = episode.segments[0].trajectory
    try:
        trajectory.check()
    except Exception as exc:  # noqa: BLE001 - reported, counted
        return f"not token-exact: {exc}"
    seen = {int(s) for s, _ in MARKER.findall(chat.decode(trajectory.ids))}
    if seen != {session}:
        return f"markers of sessions {sorted(seen)}"
    if trajectory.num_turns != turns:
        return f"{trajectory.num_turns} turns"
    return None


class LeanHTTP:
    """A minimal keep-alive HTTP/1.1 client on one connection (JSON bodies with a
    Content-Length, as the gateway answers them): a few tens of µs a request, where
    httpx spends milliseconds of the same two cores the server runs on."""

    def __init__(self, url: str) -> None:
        host, _, port = url.removeprefix("http://").partition(":")
        self.host, self.port = host, int(port)
        self.reader: Any = None
        self.writer: Any = None

    async def send(self, path: str, body: dict) -> tuple[int, Any]:
        import asyncio

        if self.writer is None:
            self.reader, self.writer = await asyncio.open_connection(self.host, self.port)
        payload = json.dumps(body).encode()
        head = (f"POST {path} HTTP/1.1\r\nHost: {self.host}:{self.port}\r\n"
                "Content-Type: application/json\r\n"
                f"Content-Length: {len(payload)}\r\n\r\n").encode()  # fmt: skip
        self.writer.write(head + payload)
        status_line = await self.reader.readline()
        length = None
        while (line := await self.reader.readline()) not in (b"\r\n", b""):
            name, _, value = line.decode("latin-1").partition(":")
            if name.strip().lower() == "content-length":
                length = int(value)
        if length is None:
            raise RuntimeError(f"a reply without a Content-Length: {status_line!r}")
        data = await self.reader.readexactly(length)
        return int(status_line.split()[1]), json.loads(data)

    async def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
            self.writer = None
