"""OpenAI's Responses API (``POST /v1/responses``) as chat completions, and back.

:func:`to_chat` turns a Responses request (``input`` items, ``instructions``, function
``tools``...) into a chat-completions body; :func:`from_chat` turns the gateway's chat
completion into a Response object; :func:`stream` turns the gateway's chat-completions
server-sent events into Responses events (``response.created`` ... ``response.completed``,
each with its ``type`` and ``sequence_number``). :class:`ResponsesDialect` adds what is not
pure: the conversations of stored responses, so that ``previous_response_id`` continues one
(:mod:`.response_store`). The request is then served and recorded as any chat completion is.
"""

from __future__ import annotations

import json
import weakref
from typing import Any

from agentfly_cli.serve.dialects import chat_events
from agentfly_cli.serve.dialects.response_output import (
    namespaces,
    new_id,
    output_items,
    response_object,
    stream,
)
from agentfly_cli.serve.dialects.response_store import ResponseStore
from agentfly_cli.serve.errors import RequestError
from agentfly_cli.serve.errors import error_body as _openai_error

ROLES = {"user": "user", "assistant": "assistant", "system": "system", "developer": "system"}
TEXT_PARTS = {"input_text": "text", "output_text": "text", "text": "text", "refusal": "refusal"}
CHOICES = ("auto", "none", "required")
PARAMS = {"messages": "input", "max_tokens": "max_output_tokens"}  # chat's names -> ours
ITEMS = "message, function_call, function_call_output and reasoning items"


def error_body(status: int, message: str, param: str | None = None, code: str | None = None):
    """An error in the Responses API's shape (OpenAI's), the chat parameter named as ours
    (in ``param`` and where the message quotes it)."""
    ours = PARAMS.get(param, param)
    if ours != param:
        message = message.replace(f"'{param}'", f"'{ours}'")
    return _openai_error(status, message, ours, code)


# ---- request ----------------------------------------------------------------------------------
def to_chat(body: Any, history: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """The chat-completions body of a Responses request; ``history``: the conversation of its
    ``previous_response_id`` (chat messages), continued by its ``input``."""
    if not isinstance(body, dict):
        raise RequestError("the request body must be a JSON object")
    for name in ("background", "conversation", "prompt"):
        if body.get(name):
            raise RequestError(f"'{name}' is not served by this gateway; send the input "
                               "itself (and previous_response_id to continue)", name)  # fmt: skip
    if not isinstance(body.get("store", True), bool):
        raise RequestError("'store' must be true or false", "store")
    messages = [{"role": "system", "content": text} for text in _instructions(body)]
    messages += history or []
    messages += input_messages(body.get("input"))
    if not messages or not (body.get("input") or history):
        raise RequestError("'input' must be a string or a non-empty list of items", "input")
    chat: dict[str, Any] = {"messages": messages}
    tools = chat_tools(body.get("tools"))
    if tools:
        chat["tools"] = tools
    if body.get("tool_choice") is not None:
        chat["tool_choice"] = chat_tool_choice(body["tool_choice"])
    for ours, theirs in (("max_tokens", "max_output_tokens"), ("temperature", "temperature"),
                         ("top_p", "top_p")):  # fmt: skip
        if body.get(theirs) is not None:
            chat[ours] = body[theirs]
    if body.get("stream"):
        chat["stream"] = True
        chat["stream_options"] = {"include_usage": True}
    return chat


def _instructions(body: dict) -> list[str]:
    """The request's ``instructions`` (a system message), as a list of none or one."""
    text = body.get("instructions")
    if text is not None and not isinstance(text, str):
        raise RequestError("'instructions' must be a string", "instructions")
    return [text] if text else []


def input_messages(items: Any) -> list[dict[str, Any]]:
    """``input`` (a string, or a list of items) as chat messages: an assistant message and the
    function calls after it are one message with ``tool_calls``; a reasoning item's text is
    the next assistant message's ``reasoning_content``."""
    if items is None:
        return []
    if isinstance(items, str):
        return [{"role": "user", "content": items}]
    if not isinstance(items, list):
        raise RequestError("'input' must be a string or a list of items", "input")
    out: list[dict[str, Any]] = []
    reasoning: str | None = None
    for i, item in enumerate(items):
        if not isinstance(item, dict):
            raise RequestError(f"input[{i}] must be an object ({ITEMS})", "input")
        kind = item.get("type", "message" if "role" in item else None)
        if kind == "reasoning":
            reasoning = (reasoning or "") + _parts_text(i, item.get("content") or [])
            continue
        if kind == "message":
            role = item.get("role")
            if role not in ROLES:
                raise RequestError(f"input[{i}].role must be one of {', '.join(ROLES)}", "input")
            out.append({"role": ROLES[role], "content": _content(i, item.get("content"))})
        elif kind == "function_call":
            call = _call(i, item)
            if not out or out[-1]["role"] != "assistant":
                out.append({"role": "assistant", "content": None})
            out[-1].setdefault("tool_calls", []).append(call)
        elif kind == "function_call_output":
            call_id, output = item.get("call_id"), item.get("output")
            if not isinstance(call_id, str):
                raise RequestError(f"input[{i}].call_id must be a string", "input")
            text = output if isinstance(output, str) else _parts_text(i, output)
            out.append({"role": "tool", "tool_call_id": call_id, "content": text})
        else:
            raise RequestError(f"input[{i}] is a {kind!r} item, which this gateway does not "
                               f"serve; it takes {ITEMS}", "input")  # fmt: skip
        if reasoning is not None and out[-1]["role"] == "assistant":
            out[-1]["reasoning_content"], reasoning = reasoning, None
    return out


def _content(i: int, content: Any) -> Any:
    """A message's content: a string, or its text parts (one part: its text)."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise RequestError(f"input[{i}].content must be a string or a list of parts", "input")
    texts = [_part_text(i, part) for part in content]
    return texts[0] if len(texts) == 1 else [{"type": "text", "text": t} for t in texts]


def _parts_text(i: int, parts: Any) -> str:
    if not isinstance(parts, list):
        raise RequestError(f"input[{i}] must hold a string or a list of text parts", "input")
    return "".join(_part_text(i, part) for part in parts)


def _part_text(i: int, part: Any) -> str:
    kind = part.get("type") if isinstance(part, dict) else None
    key = TEXT_PARTS.get(kind) or ("text" if kind in ("reasoning_text", "summary_text") else None)
    if key is None or not isinstance(part.get(key), str):
        raise RequestError(f"input[{i}] has a {kind!r} part; this gateway reads text parts "
                           "only (input_text, output_text, refusal)", "input")  # fmt: skip
    return part[key]


def _call(i: int, item: dict) -> dict[str, Any]:
    call_id, name, arguments = item.get("call_id"), item.get("name"), item.get("arguments", "{}")
    if not isinstance(call_id, str) or not isinstance(name, str):
        raise RequestError(f"input[{i}] (a function_call) needs a call_id and a name", "input")
    if not isinstance(arguments, str):
        arguments = json.dumps(arguments)
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


SERVER_TOOLS = (
    "web_search",
    "web_search_preview",
    "file_search",
    "code_interpreter",
    "image_generation",
    "mcp",
    "tool_search",
)  # run by OpenAI's servers


def chat_tools(tools: Any) -> list[dict[str, Any]] | None:
    """Responses function tools (``{"type": "function", "name", "parameters"...}``) as chat
    tools. A namespace's function tools are offered by their own names (a call to one comes
    back with its ``namespace``); tools that OpenAI's servers run (web_search...) and
    deferred tools (``defer_loading``) are left out of the prompt: no one here runs the first,
    and the second are not in the model's context until a tool search loads them. Any other
    kind (custom, computer, shell...) is refused."""
    if tools is None:
        return None
    if not isinstance(tools, list):
        raise RequestError("'tools' must be a list of tool definitions", "tools")
    out: list[dict[str, Any]] = []
    for i, tool in enumerate(tools):
        kind = tool.get("type") if isinstance(tool, dict) else None
        if kind in SERVER_TOOLS:
            continue
        inner = tool.get("tools") if kind == "namespace" else [tool]
        if not isinstance(inner, list):
            raise RequestError(f"tools[{i}] (a namespace) needs a list of 'tools'", "tools")
        for function in inner:
            out += _function_tool(f"tools[{i}]", function)
    names = [tool["function"]["name"] for tool in out]
    clash = next((name for name in names if names.count(name) > 1), None)
    if clash is not None:
        raise RequestError(f"'tools' offers two tools named {clash!r} (namespaces included); "
                           "give each tool its own name", "tools")  # fmt: skip
    return out


def _function_tool(where: str, tool: Any) -> list[dict[str, Any]]:
    """One function tool as a chat tool (none when it is deferred)."""
    kind = tool.get("type") if isinstance(tool, dict) else None
    if kind != "function" or not isinstance(tool.get("name"), str):
        raise RequestError(
            f"{where} is a {kind!r} tool; this gateway serves function tools only "
            '({"type": "function", "name": ..., "parameters": {...}})', "tools",
        )  # fmt: skip
    if tool.get("defer_loading") is True:
        return []
    function = {key: tool[key] for key in ("name", "description", "parameters", "strict")
                if tool.get(key) is not None}  # fmt: skip
    return [{"type": "function", "function": function}]


def chat_tool_choice(choice: Any) -> Any:
    """``tool_choice`` in chat's form: a mode, a function by name, or allowed tools' mode."""
    if choice in CHOICES:
        return choice
    if isinstance(choice, dict) and choice.get("type") == "function" and choice.get("name"):
        return {"type": "function", "function": {"name": choice["name"]}}
    if isinstance(choice, dict) and choice.get("type") == "allowed_tools":
        if choice.get("mode", "auto") in ("auto", "required"):
            return choice.get("mode", "auto")
    raise RequestError("'tool_choice' must be auto, none, required or "
                       '{"type": "function", "name": ...}', "tool_choice")  # fmt: skip


def from_chat(
    chat_response: dict[str, Any], request: dict[str, Any], response_id: str | None = None
) -> dict[str, Any]:
    """The Response object of a chat completion (its first choice: Responses has no ``n``)."""
    choice = chat_response["choices"][0]
    status = "incomplete" if choice.get("finish_reason") == "length" else "completed"
    output = output_items(choice["message"], namespaces(request))
    return response_object(
        request,
        response_id or new_id("resp"),
        status,
        output,
        chat_response.get("usage") or {},
        chat_response.get("model", ""),
    )


class ResponsesDialect:
    """``/v1/responses`` on a gateway: the conversions above, and the stored responses'
    conversations (``store``, default true) that ``previous_response_id`` continues."""

    path = "/v1/responses"
    error_body = staticmethod(error_body)

    def __init__(self, gateway: Any, store: ResponseStore | None = None) -> None:
        self.gateway, self.model = gateway, gateway.model_name
        self.store = store or ResponseStore()

    def to_chat(self, session: str | None, body: Any) -> dict[str, Any]:
        history = None
        previous = body.get("previous_response_id") if isinstance(body, dict) else None
        if previous is not None:
            history = self.store.get(session, previous) if isinstance(previous, str) else None
            if history is None:
                raise RequestError(
                    f"no stored response {str(previous)[:80]!r} in this session: a response "
                    "is kept (store: true) for the session that made it, its last "
                    f"{self.store.per_session}", "previous_response_id",
                )  # fmt: skip
        return to_chat(body, history)

    def from_chat(self, session: str | None, body: dict, chat: dict, reply: dict) -> dict:
        response = from_chat(reply, body)
        self.keep(session, body, chat, response["id"], reply["choices"][0]["message"])
        return response

    def events(self, session: str | None, body: dict, chat: dict, events: Any) -> Any:
        def keep(response_id: str, message: dict) -> None:
            self.keep(session, body, chat, response_id, message)

        return stream(events, body, self.model, keep)

    def keep(self, session: str | None, body: dict, chat: dict, response_id: str, message: dict):
        """Store the response's conversation (without the request's instructions: a
        follow-up sends its own) unless the request said ``store: false``."""
        if body.get("store", True):
            messages = chat["messages"][len(_instructions(body)) :]
            self.store.put(session, response_id, [*messages, message], self.gateway.episodes)


# ---- routes ---------------------------------------------------------------------------------
_SERVED: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # gateway -> its dialect


def dialect_of(gateway: Any) -> ResponsesDialect:
    """The gateway's Responses dialect: one store of responses per gateway."""
    dialect = _SERVED.get(gateway)
    if dialect is None:
        dialect = _SERVED[gateway] = ResponsesDialect(gateway)
    return dialect


async def create(gateway: Any, session: str | None, body: Any) -> Any:
    """``POST /v1/responses``: a Response, or its events with ``stream: true``."""
    dialect = dialect_of(gateway)
    chat = dialect.to_chat(session, body)
    if chat.get("stream"):
        return dialect.events(session, body, chat, await chat_events(gateway, session, chat))
    return dialect.from_chat(session, body, chat, await gateway.complete(session, chat))


ROUTES = (("/v1/responses", create),)
