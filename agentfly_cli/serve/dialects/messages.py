"""Anthropic Messages (``POST /v1/messages``, ``/v1/messages/count_tokens``) as chat completions.

A request's ``system`` and content blocks become chat messages: text blocks join (with a
newline) into one message's text, ``tool_use`` blocks become the assistant's ``tool_calls``,
each ``tool_result`` block a ``tool`` message (``is_error`` prefixes its text with
``Error: ``), ``thinking`` blocks the assistant's ``reasoning_content``. ``tools`` become
function tools, ``tool_choice`` auto/any/tool/none become auto/required/the tool/none,
``stop_sequences`` the stop strings. A ``system`` message among ``messages`` (Claude Code
sends one after the first user turn) is a system message where it stands; a tool with
``defer_loading: true`` is left out of the prompt (it is not in the model's context until a
tool search loads it). ``thinking``, ``context_management``, ``output_config`` and ``metadata``
are accepted and have no effect. Images, documents and server tools are refused.
"""

from __future__ import annotations

import json
import math
from collections.abc import AsyncIterator
from typing import Any

from agentfly_cli.serve.dialects import chat_events
from agentfly_cli.serve.errors import ContextTooLong, RequestError
from agentfly_cli.serve.gateway import count_tokens as count_prompt

ERROR_TYPES = {400: "invalid_request_error", 401: "authentication_error",
               403: "permission_error", 404: "not_found_error", 413: "request_too_large",
               429: "rate_limit_error", 500: "api_error", 503: "overloaded_error"}  # fmt: skip
STOP_REASONS = {"tool_calls": "tool_use", "length": "max_tokens", "stop": "end_turn"}
CHOICES = {"auto": "auto", "any": "required", "none": "none"}
PARAMS = {"stop": "stop_sequences"}  # chat's names, in the gateway's errors -> ours


# ---- requests -------------------------------------------------------------------------------
def to_chat(body: Any, *, counting: bool = False) -> dict[str, Any]:
    """A Messages request as a chat-completions body; ``counting``: a ``count_tokens`` body
    (no ``max_tokens``)."""
    if not isinstance(body, dict):
        raise RequestError("the request body must be a JSON object")
    if not isinstance(body.get("model"), str):
        raise RequestError("model: Field required (a string)", "model")
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise RequestError("messages: must be a non-empty list of messages", "messages")
    chat: dict[str, Any] = {"model": body["model"], "messages": []}
    system = _system(body.get("system"))
    if system:
        chat["messages"].append({"role": "system", "content": system})
    for i, message in enumerate(messages):
        chat["messages"] += _message(i, message)
    if not counting:
        if "max_tokens" not in body:
            raise RequestError("max_tokens: Field required", "max_tokens")
        chat["max_tokens"] = _bounded(body, "max_tokens", 1, math.inf, integer=True)
    for name, low in (("temperature", 0.0), ("top_p", 0.0)):
        if body.get(name) is not None:
            chat[name] = _bounded(body, name, low, 1.0)
    stops = body.get("stop_sequences")
    if stops is not None:
        if not isinstance(stops, list) or not all(isinstance(s, str) and s for s in stops):
            raise RequestError("stop_sequences: must be a list of non-empty strings",
                               "stop_sequences")  # fmt: skip
        chat["stop"] = stops
    tools = _tools(body.get("tools"))
    if tools:
        chat["tools"] = tools
    if body.get("tool_choice") is not None:
        chat["tool_choice"] = _tool_choice(body["tool_choice"])
    chat["stream"] = bool(body.get("stream", False)) and not counting
    if chat["stream"]:  # usage on every chunk: message_start tells the input tokens
        chat["stream_options"] = {"include_usage": True, "continuous_usage_stats": True}
    return chat


def _bounded(body: dict, name: str, low: float, high: float, integer: bool = False) -> Any:
    value = body[name]
    kinds = int if integer else (int, float)
    if (
        not isinstance(value, kinds)
        or isinstance(value, bool)
        or not low <= value <= high
        or (not integer and not math.isfinite(value))
    ):
        bound = f"an integer of at least {low}" if integer else f"a number from {low:g} to {high:g}"
        raise RequestError(f"{name}: must be {bound}", name)
    return value


def _system(system: Any) -> str:
    if system is None or isinstance(system, str):
        return system or ""
    if isinstance(system, list):
        return "\n".join(_text(f"system.{j}", block) for j, block in enumerate(system))
    raise RequestError("system: must be a string or a list of text blocks", "system")


def _text(where: str, block: Any) -> str:
    if not isinstance(block, dict) or block.get("type") != "text":
        raise RequestError(f"{where}: must be a text block ({{'type': 'text', 'text': ...}})",
                           "messages")  # fmt: skip
    if not isinstance(block.get("text"), str):
        raise RequestError(f"{where}.text: must be a string", "messages")
    return block["text"]


def _blocks(i: int, content: Any) -> list[dict[str, Any]]:
    """A message's content as blocks (a string is one text block)."""
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    if not isinstance(content, list):
        raise RequestError(f"messages.{i}.content: must be a string or a list of content "
                           "blocks", "messages")  # fmt: skip
    for j, block in enumerate(content):
        if not isinstance(block, dict) or not isinstance(block.get("type"), str):
            raise RequestError(f"messages.{i}.content.{j}: must be an object with a 'type'",
                               "messages")  # fmt: skip
    return content


def _message(i: int, message: Any) -> list[dict[str, Any]]:
    """One Messages message as chat messages (a user turn's tool results are each one)."""
    role = message.get("role") if isinstance(message, dict) else None
    if role not in ("user", "assistant", "system"):
        raise RequestError(f"messages.{i}.role: must be 'user', 'assistant' or 'system'",
                           "messages")  # fmt: skip
    blocks = _blocks(i, message.get("content"))
    if role == "system":  # an instruction mid-conversation (Claude Code sends them)
        where = f"messages.{i}.content"
        text = "\n".join(_text(f"{where}.{j}", block) for j, block in enumerate(blocks))
        return [{"role": "system", "content": text}]
    return [_assistant(i, blocks)] if role == "assistant" else _user(i, blocks)


def _refused(where: str, kind: str, role: str) -> RequestError:
    return RequestError(
        f"{where}: {kind} blocks are not supported in {role} content by this gateway (it "
        "serves text models: text, tool_use in assistant turns, tool_result in user turns)",
        "messages",
    )


def _user(i: int, blocks: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    texts: list[str] = []
    for j, block in enumerate(blocks):
        where = f"messages.{i}.content.{j}"
        if block["type"] == "text":
            texts.append(_text(where, block))
            continue
        if block["type"] != "tool_result":
            raise _refused(where, block["type"], "user")
        if texts:
            out.append({"role": "user", "content": "\n".join(texts)})
            texts = []
        if not isinstance(block.get("tool_use_id"), str):
            raise RequestError(f"{where}.tool_use_id: must be a string", "messages")
        text = _result_text(where, block.get("content"))
        if block.get("is_error"):
            text = f"Error: {text}"
        out.append({"role": "tool", "tool_call_id": block["tool_use_id"], "content": text})
    if texts or not out:
        out.append({"role": "user", "content": "\n".join(texts)})
    return out


def _result_text(where: str, content: Any) -> str:
    if content is None or isinstance(content, str):
        return content or ""
    if not isinstance(content, list):
        raise RequestError(f"{where}.content: must be a string or a list of text blocks",
                           "messages")  # fmt: skip
    parts = []
    for k, block in enumerate(content):
        if isinstance(block, dict) and block.get("type") not in ("text", None):
            raise _refused(f"{where}.content.{k}", str(block.get("type")), "tool_result")
        parts.append(_text(f"{where}.content.{k}", block))
    return "\n".join(parts)


def _assistant(i: int, blocks: list[dict[str, Any]]) -> dict[str, Any]:
    texts, reasoning, calls = [], [], []
    for j, block in enumerate(blocks):
        where, kind = f"messages.{i}.content.{j}", block["type"]
        if kind == "text":
            texts.append(_text(where, block))
        elif kind == "thinking":
            if not isinstance(block.get("thinking"), str):
                raise RequestError(f"{where}.thinking: must be a string", "messages")
            reasoning.append(block["thinking"])
        elif kind == "redacted_thinking":
            continue  # another model's encrypted reasoning: nothing this model can read
        elif kind == "tool_use":
            if not isinstance(block.get("id"), str) or not isinstance(block.get("name"), str):
                raise RequestError(f"{where}: a tool_use block needs an 'id' and a 'name'",
                                   "messages")  # fmt: skip
            arguments = block.get("input", {})
            if not isinstance(arguments, dict):
                raise RequestError(f"{where}.input: must be an object", "messages")
            function = {"name": block["name"], "arguments": json.dumps(arguments)}
            calls.append({"id": block["id"], "type": "function", "function": function})
        else:
            raise _refused(where, kind, "assistant")
    message: dict[str, Any] = {"role": "assistant", "content": "\n".join(texts)}
    if reasoning:
        message["reasoning_content"] = "\n".join(reasoning)
    if calls:
        message["tool_calls"] = calls
    return message


def _tools(tools: Any) -> list[dict[str, Any]]:
    if tools is None:
        return []
    if not isinstance(tools, list):
        raise RequestError("tools: must be a list of tools", "tools")
    out = []
    for i, tool in enumerate(tools):
        if not isinstance(tool, dict) or not isinstance(tool.get("name"), str):
            raise RequestError(f"tools.{i}: must be an object with a 'name'", "tools")
        if tool.get("type") not in (None, "custom"):
            raise RequestError(
                f"tools.{i}: {tool['type']!r} is a tool Anthropic's servers run; this gateway "
                "serves client tools only (name, description, input_schema)", "tools",
            )  # fmt: skip
        if not isinstance(tool.get("input_schema"), dict):
            raise RequestError(f"tools.{i}.input_schema: Field required (a JSON Schema "
                               "object)", "tools")  # fmt: skip
        if tool.get("defer_loading") is True:
            continue  # not in the model's context until a tool search loads it
        function = {"name": tool["name"], "parameters": tool["input_schema"]}
        if isinstance(tool.get("description"), str):
            function["description"] = tool["description"]
        out.append({"type": "function", "function": function})
    return out


def _tool_choice(choice: Any) -> Any:
    kind = choice.get("type") if isinstance(choice, dict) else None
    if kind in CHOICES:
        return CHOICES[kind]
    if kind == "tool" and isinstance(choice.get("name"), str):
        return {"type": "function", "function": {"name": choice["name"]}}
    raise RequestError("tool_choice: must be {'type': 'auto' | 'any' | 'none'} or "
                       "{'type': 'tool', 'name': ...}", "tool_choice")  # fmt: skip


# ---- replies --------------------------------------------------------------------------------
def from_chat(chat_response: dict[str, Any], request: dict[str, Any]) -> dict[str, Any]:
    """A chat completion (one choice) as a Messages reply."""
    choice = chat_response["choices"][0]
    usage = chat_response.get("usage") or {}
    reason, sequence = stop_reason(choice)
    return {
        "id": message_id(chat_response["id"]),
        "type": "message",
        "role": "assistant",
        "model": chat_response.get("model") or request.get("model"),
        "content": content_blocks(choice["message"]),
        "stop_reason": reason,
        "stop_sequence": sequence,
        "usage": _usage(usage.get("prompt_tokens", 0), usage.get("completion_tokens", 0)),
    }


def content_blocks(message: dict[str, Any]) -> list[dict[str, Any]]:
    """An assistant chat message as content blocks: thinking, text, then tool_use."""
    blocks: list[dict[str, Any]] = []
    if message.get("reasoning_content"):
        blocks.append({"type": "thinking", "thinking": message["reasoning_content"],
                       "signature": ""})  # fmt: skip
    if message.get("content"):
        blocks.append({"type": "text", "text": message["content"]})
    for call in message.get("tool_calls") or []:
        blocks.append({"type": "tool_use", "id": call["id"], "name": call["function"]["name"],
                       "input": tool_input(call["function"].get("arguments"))})  # fmt: skip
    return blocks


def tool_input(arguments: Any) -> dict[str, Any]:
    """A chat tool call's arguments (a JSON string) as a tool_use block's ``input`` object
    (arguments that are not a JSON object come as ``{"arguments": ...}``)."""
    value = arguments
    if isinstance(arguments, str):
        try:
            value = json.loads(arguments)
        except json.JSONDecodeError:
            pass
    return value if isinstance(value, dict) else {"arguments": value}


def stop_reason(choice: dict[str, Any]) -> tuple[str, str | None]:
    """A chat choice's finish as Messages' ``stop_reason`` and ``stop_sequence``."""
    stop = choice.get("stop_reason")
    if isinstance(stop, str) and choice.get("finish_reason") == "stop":
        return "stop_sequence", stop
    return STOP_REASONS.get(choice.get("finish_reason") or "stop", "end_turn"), None


def message_id(chat_id: str) -> str:
    return "msg_" + chat_id.removeprefix("chatcmpl-")


def _usage(prompt: int, sampled: int) -> dict[str, int]:
    return {"input_tokens": prompt, "output_tokens": sampled,
            "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0}  # fmt: skip


def error_body(
    status: int, message: str, param: str | None = None, code: str | None = None
) -> dict[str, Any]:
    """Anthropic's error shape; its type follows the status (``param`` and ``code`` are not in
    it: the context-length error is an ``invalid_request_error`` that says the prompt is too
    long). A chat field the message quotes is named as Messages names it."""
    if param in PARAMS:
        message = message.replace(f"'{param}'", f"'{PARAMS[param]}'")
    default = "api_error" if status >= 500 else "invalid_request_error"
    return {"type": "error", "error": {"type": ERROR_TYPES.get(status, default),
                                       "message": message}}  # fmt: skip


# ---- streaming ------------------------------------------------------------------------------
def sse(kind: str, data: dict[str, Any]) -> str:
    return f"event: {kind}\ndata: {json.dumps({'type': kind, **data})}\n\n"


class MessagesStream:
    """The gateway's chat-completions events (one choice) as Messages events: message_start
    and a ping, each content block's start, deltas and stop, then message_delta (the stop
    reason and usage) and message_stop; a failure midway ends with an ``error`` event."""

    def __init__(self, request: dict[str, Any]) -> None:
        self.model = request.get("model")
        self.started = False
        self.block: str | None = None  # the open block's type
        self.index = -1
        self.finish: dict[str, Any] = {}
        self.usage = {"prompt_tokens": 0, "completion_tokens": 0}

    def feed(self, event: str) -> list[str]:
        """The Messages events for one chat-completions event."""
        data = event.strip().removeprefix("data:").strip()
        if data == "[DONE]":
            return self._close() + self._end()
        chunk = json.loads(data)
        if "error" in chunk:
            self.block = None
            message = chunk["error"].get("message", "the request failed")
            return [sse("error", {"error": {"type": "api_error", "message": message}})]
        self.usage.update(chunk.get("usage") or {})
        out = [] if self.started else self._start(chunk)
        for choice in chunk.get("choices") or []:
            delta = choice.get("delta") or {}
            if delta.get("reasoning_content"):
                out += self._open("thinking", {"thinking": "", "signature": ""})
                out.append(self._delta({"type": "thinking_delta",
                                        "thinking": delta["reasoning_content"]}))  # fmt: skip
            if delta.get("content"):
                out += self._open("text", {"text": ""})
                out.append(self._delta({"type": "text_delta", "text": delta["content"]}))
            for call in delta.get("tool_calls") or []:
                out += self._close()
                arguments = json.dumps(tool_input(call["function"].get("arguments")))
                out += self._open("tool_use", {"id": call["id"], "input": {},
                                               "name": call["function"]["name"]})  # fmt: skip
                out.append(self._delta({"type": "input_json_delta", "partial_json": arguments}))
            if choice.get("finish_reason"):
                out += self._close()
                self.finish = choice
        return out

    def _start(self, chunk: dict[str, Any]) -> list[str]:
        self.started = True
        message = {"id": message_id(chunk["id"]), "type": "message", "role": "assistant",
                   "model": chunk.get("model") or self.model, "content": [],
                   "stop_reason": None, "stop_sequence": None,
                   "usage": _usage(self.usage["prompt_tokens"], 0)}  # fmt: skip
        return [sse("message_start", {"message": message}), sse("ping", {})]

    def _open(self, kind: str, fields: dict[str, Any]) -> list[str]:
        if self.block == kind and kind != "tool_use":
            return []
        out = self._close()
        self.block, self.index = kind, self.index + 1
        block = {"type": kind, **fields}
        return [*out, sse("content_block_start", {"index": self.index, "content_block": block})]

    def _delta(self, delta: dict[str, Any]) -> str:
        return sse("content_block_delta", {"index": self.index, "delta": delta})

    def _close(self) -> list[str]:
        if self.block is None:
            return []
        self.block = None
        return [sse("content_block_stop", {"index": self.index})]

    def _end(self) -> list[str]:
        reason, sequence = stop_reason(self.finish)
        usage = _usage(self.usage["prompt_tokens"], self.usage["completion_tokens"])
        delta = {"delta": {"stop_reason": reason, "stop_sequence": sequence}, "usage": usage}
        return [sse("message_delta", delta), sse("message_stop", {})]


async def stream(events: Any, request: dict[str, Any]) -> AsyncIterator[str]:
    """The gateway's started chat-completions ``events`` as Messages events (``events`` is
    closed when the client leaves)."""
    adapter = MessagesStream(request)
    try:
        async for event in events:
            for out in adapter.feed(event):
                yield out
    finally:
        await events.aclose()


# ---- routes ---------------------------------------------------------------------------------
async def create(gateway: Any, session: str | None, body: Any) -> Any:
    """``POST /v1/messages``: a reply, or its events with ``stream: true``."""
    chat = to_chat(body)
    try:
        if chat["stream"]:
            return stream(await chat_events(gateway, session, chat), body)
        return from_chat(await gateway.complete(session, chat), body)
    except ContextTooLong as exc:  # worded as Anthropic's is
        raise ContextTooLong(exc.tokens, exc.limit, f"prompt is too long: {exc.tokens} tokens "
                             f"> {exc.limit - 1} maximum") from None  # fmt: skip


async def count_tokens(gateway: Any, session: str | None, body: Any) -> dict[str, int]:
    """``POST /v1/messages/count_tokens``: the rendered prompt's length (nothing sampled or
    recorded; the session is not opened, but refused as a request to it would be)."""
    return {"input_tokens": await count_prompt(gateway, to_chat(body, counting=True), session)}


ROUTES = (("/v1/messages", create), ("/v1/messages/count_tokens", count_tokens))
