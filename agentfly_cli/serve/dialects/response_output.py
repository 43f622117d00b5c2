"""The Responses API's output: the Response object, its output items, and the events that
stream them (:class:`ResponseEvents`, from the gateway's chat-completions chunks).

A streamed response is, in order: ``response.created``, ``response.in_progress``; per output
item ``response.output_item.added``, its parts (``response.content_part.added``, text deltas,
``response.output_text.done`` or ``response.reasoning_text.done``,
``response.content_part.done``) or a function call's arguments
(``response.function_call_arguments.delta``/``.done``), ``response.output_item.done``; then
``response.completed`` (``response.incomplete`` at ``max_output_tokens``), or
``response.failed`` when sampling fails midway. Each event has its ``type`` and
``sequence_number``; the items joined are those a plain request's Response holds.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import AsyncIterator
from typing import Any


def new_id(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex}"


def response_object(
    request: dict, response_id: str, status: str, output: list, usage: dict | None, model: str
) -> dict[str, Any]:
    """A Response object around ``output`` (its items) and ``usage`` (chat's, converted)."""
    incomplete = {"reason": "max_output_tokens"} if status == "incomplete" else None
    return {
        "id": response_id, "object": "response", "created_at": int(time.time()),
        "status": status, "error": None, "incomplete_details": incomplete, "model": model,
        "instructions": request.get("instructions"), "output": output,
        "max_output_tokens": request.get("max_output_tokens"),
        "temperature": request.get("temperature", 1.0), "top_p": request.get("top_p", 1.0),
        "tools": request.get("tools") or [], "tool_choice": request.get("tool_choice", "auto"),
        "parallel_tool_calls": request.get("parallel_tool_calls", True),
        "previous_response_id": request.get("previous_response_id"),
        "store": request.get("store", True), "truncation": "disabled",
        "text": {"format": {"type": "text"}}, "metadata": request.get("metadata") or {},
        "usage": None if usage is None else responses_usage(usage),
    }  # fmt: skip


def responses_usage(usage: dict) -> dict[str, Any]:
    prompt, sampled = usage.get("prompt_tokens", 0), usage.get("completion_tokens", 0)
    return {"input_tokens": prompt, "input_tokens_details": {"cached_tokens": 0},
            "output_tokens": sampled, "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": prompt + sampled}  # fmt: skip


def output_items(message: dict[str, Any], spaces: dict[str, str] | None = None) -> list[dict]:
    """A chat assistant message as output items: its reasoning, its text (a message, also
    when empty and nothing else is said), its tool calls (function_call items, with the
    ``namespace`` that ``spaces`` gives a namespaced tool's name)."""
    items = []
    if message.get("reasoning_content"):
        items.append(reasoning_item(new_id("rs"), message["reasoning_content"]))
    calls = message.get("tool_calls") or []
    if message.get("content") or not calls:
        items.append(message_item(new_id("msg"), message.get("content") or ""))
    items += [call_item(new_id("fc"), call, spaces=spaces) for call in calls]
    return items


def reasoning_item(item_id: str, text: str, status: str = "completed") -> dict[str, Any]:
    content = [{"type": "reasoning_text", "text": text}] if text else []
    return {"type": "reasoning", "id": item_id, "summary": [], "content": content,
            "status": status}  # fmt: skip


def message_item(item_id: str, text: str | None, status: str = "completed") -> dict[str, Any]:
    content = [] if text is None else [{"type": "output_text", "text": text, "annotations": []}]
    return {"type": "message", "id": item_id, "status": status, "role": "assistant",
            "content": content}  # fmt: skip


def call_item(
    item_id: str,
    call: dict,
    status: str = "completed",
    arguments: str | None = None,
    spaces: dict[str, str] | None = None,
) -> dict[str, Any]:
    function = call.get("function") or {}
    item = {
        "type": "function_call",
        "id": item_id,
        "call_id": call.get("id"),
        "name": function.get("name"),
        "status": status,
        "arguments": function.get("arguments", "") if arguments is None else arguments,
    }
    if spaces and function.get("name") in spaces:
        item["namespace"] = spaces[function["name"]]
    return item


def namespaces(request: Any) -> dict[str, str]:
    """Each namespaced tool's name -> its namespace, from a Responses request's tools."""
    tools = request.get("tools") if isinstance(request, dict) else None
    found: dict[str, str] = {}
    for tool in tools if isinstance(tools, list) else []:
        if isinstance(tool, dict) and tool.get("type") == "namespace":
            for inner in tool.get("tools") or []:
                if isinstance(inner, dict) and isinstance(inner.get("name"), str):
                    found[inner["name"]] = str(tool.get("name"))
    return found


async def stream(
    chat_events: Any, request: dict, model: str, on_reply: Any = None
) -> AsyncIterator[str]:
    """The Responses events of a chat-completions event stream (what ``Gateway.stream``
    yields). Errors before the first event raise before anything is sent;
    ``on_reply(response_id, message)`` gets the assembled assistant message once whole."""
    events = ResponseEvents(request, new_id("resp"), model)
    try:
        first = await chat_events.__anext__()
        for event in events.start():
            yield event
        raw = first
        while True:
            data = raw.removeprefix("data: ").strip()
            if data == "[DONE]":
                last = events.done()
                if on_reply is not None:
                    on_reply(events.response_id, events.message())
                for event in last:
                    yield event
                return
            chunk = json.loads(data)
            for event in events.feed(chunk):
                yield event
            if events.failed:
                return
            try:
                raw = await chat_events.__anext__()
            except StopAsyncIteration:
                return
    finally:
        await chat_events.aclose()


class ResponseEvents:
    """One streamed response's events, from the chat chunks of its one choice."""

    PARTS = {"reasoning_content": ("reasoning", "reasoning_text"),
             "content": ("message", "output_text")}  # fmt: skip

    def __init__(self, request: dict, response_id: str, model: str) -> None:
        self.request, self.response_id, self.model = request, response_id, model
        self.spaces = namespaces(request)
        self.sequence = 0
        self.output: list[dict[str, Any]] = []  # finished items
        self.open: dict[str, Any] | None = None  # the text item being streamed: kind, id, text
        self.calls: list[dict[str, Any]] = []  # the chat tool calls, as sent
        self.texts = {"reasoning_content": "", "content": ""}
        self.finish: str | None = None
        self.usage: dict | None = None
        self.failed = False

    def event(self, kind: str, **fields: Any) -> str:
        data = {"type": kind, "sequence_number": self.sequence, **fields}
        self.sequence += 1
        return f"event: {kind}\ndata: {json.dumps(data)}\n\n"

    def response(self, status: str, usage: dict | None = None) -> dict[str, Any]:
        return response_object(self.request, self.response_id, status, list(self.output),
                               usage, self.model)  # fmt: skip

    def start(self) -> list[str]:
        return [
            self.event("response.created", response=self.response("in_progress")),
            self.event("response.in_progress", response=self.response("in_progress")),
        ]

    def feed(self, chunk: dict[str, Any]) -> list[str]:
        """The events of one chat chunk (text deltas, tool calls, the finish, the usage)."""
        if "error" in chunk:  # sampling failed midway: the response failed
            self.failed = True
            error = chunk["error"] or {}
            failed = {
                **self.response("failed"),
                "error": {
                    "code": "server_error",
                    "message": error.get("message", "the request failed"),
                },
            }
            return [self.event("response.failed", response=failed)]
        if chunk.get("usage"):
            self.usage = chunk["usage"]
        out: list[str] = []
        for choice in chunk.get("choices") or []:
            delta = choice.get("delta") or {}
            for key in ("reasoning_content", "content"):
                if delta.get(key):
                    out += self._text(key, delta[key])
            for call in delta.get("tool_calls") or []:
                out += self._call(call)
            if choice.get("finish_reason"):
                self.finish = choice["finish_reason"]
        return out

    def _text(self, key: str, delta: str) -> list[str]:
        kind, part_kind = self.PARTS[key]
        out = []
        if self.open is None or self.open["kind"] != kind:
            out += self._close()
            self.open = {"kind": kind, "id": new_id("rs" if kind == "reasoning" else "msg"),
                         "text": ""}  # fmt: skip
            index = len(self.output)
            item = self._item("in_progress", text=None)
            out.append(self.event("response.output_item.added", output_index=index, item=item))
            part = {"type": part_kind, "text": ""}
            if kind == "message":
                part["annotations"] = []
            out.append(self.event("response.content_part.added", item_id=self.open["id"],
                                  output_index=index, content_index=0, part=part))  # fmt: skip
        self.open["text"] += delta
        self.texts[key] += delta
        extra = {} if kind == "reasoning" else {"logprobs": []}
        out.append(self.event(f"response.{part_kind}.delta", item_id=self.open["id"],
                              output_index=len(self.output), content_index=0, delta=delta,
                              **extra))  # fmt: skip
        return out

    def _item(self, status: str, text: str | None) -> dict[str, Any]:
        if self.open["kind"] == "reasoning":
            return reasoning_item(self.open["id"], text or "", status)
        return message_item(self.open["id"], text, status)

    def _close(self) -> list[str]:
        """Close the open text item: its text's done, its part's done, its item's done."""
        if self.open is None:
            return []
        text, item_id, index = self.open["text"], self.open["id"], len(self.output)
        item = self._item("completed", text)
        part = item["content"][0] if item["content"] else {"type": "reasoning_text", "text": ""}
        extra = {} if self.open["kind"] == "reasoning" else {"logprobs": []}
        out = [self.event(f"response.{part['type']}.done", item_id=item_id, output_index=index,
                          content_index=0, text=text, **extra),
               self.event("response.content_part.done", item_id=item_id, output_index=index,
                          content_index=0, part=part),
               self.event("response.output_item.done", output_index=index, item=item)]  # fmt: skip
        self.output.append(item)
        self.open = None
        return out

    def _call(self, call: dict[str, Any]) -> list[str]:
        """A whole tool call (the gateway sends each once parsed) as a function_call item."""
        out = self._close()
        self.calls.append({key: call[key] for key in ("id", "type", "function") if key in call})
        item_id, index = new_id("fc"), len(self.output)
        arguments = (call.get("function") or {}).get("arguments", "")
        added = call_item(item_id, call, "in_progress", arguments="", spaces=self.spaces)
        done = call_item(item_id, call, spaces=self.spaces)
        out += [self.event("response.output_item.added", output_index=index, item=added),
                self.event("response.function_call_arguments.delta", item_id=item_id,
                           output_index=index, delta=arguments),
                self.event("response.function_call_arguments.done", item_id=item_id,
                           output_index=index, arguments=arguments, name=done["name"]),
                self.event("response.output_item.done", output_index=index, item=done)]  # fmt: skip
        self.output.append(done)
        return out

    def done(self) -> list[str]:
        """The last events: the open item closed (an empty message when nothing was said),
        then ``response.completed`` (``response.incomplete`` when cut at the token limit)."""
        if self.open is None and not any(i["type"] == "message" for i in self.output) \
                and not self.calls:  # fmt: skip
            out = self._text("content", "")
        else:
            out = []
        out += self._close()
        status = "incomplete" if self.finish == "length" else "completed"
        name = "response.incomplete" if status == "incomplete" else "response.completed"
        return [*out, self.event(name, response=self.response(status, self.usage or {}))]

    def message(self) -> dict[str, Any]:
        """The assistant message the stream said, as chat completions would give it."""
        content = self.texts["content"]
        message: dict[str, Any] = {
            "role": "assistant",
            "content": content if content or not self.calls else None,
        }
        if self.texts["reasoning_content"]:
            message["reasoning_content"] = self.texts["reasoning_content"]
        if self.calls:
            message["tool_calls"] = list(self.calls)
        return message
