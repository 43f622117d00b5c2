"""The Responses dialect's pure conversions: requests to chat bodies (text, content parts,
instructions, developer messages, tools, function calls and their outputs, reasoning), chat
completions to Response objects, chat-completions events to Responses events, and the
bounded store behind ``previous_response_id``."""

from __future__ import annotations

import asyncio
import json

import pytest

from agentfly_cli.serve.dialects.response_output import namespaces, output_items
from agentfly_cli.serve.dialects.response_store import ResponseStore
from agentfly_cli.serve.dialects.responses import (
    chat_tool_choice,
    error_body,
    from_chat,
    input_messages,
    stream,
    to_chat,
)
from agentfly_cli.serve.errors import RequestError

FUNCTION = {"type": "function", "name": "calculator", "description": "Evaluate.",
            "parameters": {"type": "object", "properties": {"expression": {"type": "string"}}},
            "strict": True}  # fmt: skip
CALL = {"id": "call_1", "type": "function",
        "function": {"name": "calculator", "arguments": '{"expression": "1 + 1"}'}}  # fmt: skip


def test_a_string_input_with_instructions_and_sampling_settings():
    chat = to_chat({"model": "m", "input": "hi", "instructions": "Be brief.",
                    "max_output_tokens": 7, "temperature": 0.5, "top_p": 0.9})  # fmt: skip
    assert chat == {
        "messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hi"}],
        "max_tokens": 7, "temperature": 0.5, "top_p": 0.9,
    }  # fmt: skip
    assert to_chat({"input": "x", "stream": True})["stream_options"] == {"include_usage": True}


def test_messages_of_every_role_and_content_parts():
    items = [
        {"role": "developer", "content": "Rules."},
        {"type": "message", "role": "system", "content": [{"type": "input_text", "text": "S"}]},
        {"type": "message", "role": "user",
         "content": [{"type": "input_text", "text": "a"}, {"type": "input_text", "text": "b"}]},
        {"type": "message", "role": "assistant", "id": "msg_1", "status": "completed",
         "content": [{"type": "output_text", "text": "Hello.", "annotations": []}]},
    ]  # fmt: skip
    assert input_messages(items) == [
        {"role": "system", "content": "Rules."},
        {"role": "system", "content": "S"},
        {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]},
        {"role": "assistant", "content": "Hello."},
    ]


def test_function_calls_join_the_assistant_message_before_them_and_outputs_are_tool_messages():
    items = [
        {"role": "user", "content": "1 + 1? and 2 + 2?"},
        {"type": "reasoning", "id": "rs_1", "summary": [],
         "content": [{"type": "reasoning_text", "text": "Two sums."}]},
        {"type": "message", "role": "assistant",
         "content": [{"type": "output_text", "text": "Computing."}]},
        {"type": "function_call", "id": "fc_1", "call_id": "call_1", "name": "calculator",
         "arguments": '{"expression": "1 + 1"}', "status": "completed"},
        {"type": "function_call", "call_id": "call_2", "name": "calculator",
         "arguments": {"expression": "2 + 2"}},
        {"type": "function_call_output", "call_id": "call_1", "output": "2"},
        {"type": "function_call_output", "call_id": "call_2",
         "output": [{"type": "input_text", "text": "4"}]},
        {"type": "function_call", "call_id": "call_3", "name": "calculator", "arguments": "{}"},
    ]  # fmt: skip
    user, assistant, first, second, alone = input_messages(items)
    assert assistant["content"] == "Computing." and assistant["reasoning_content"] == "Two sums."
    assert [c["id"] for c in assistant["tool_calls"]] == ["call_1", "call_2"]
    assert json.loads(assistant["tool_calls"][1]["function"]["arguments"]) == {
        "expression": "2 + 2"
    }
    assert first == {"role": "tool", "tool_call_id": "call_1", "content": "2"}
    assert second["content"] == "4"
    assert alone["content"] is None and alone["tool_calls"][0]["id"] == "call_3"


def test_function_tools_and_tool_choice_convert_and_client_run_kinds_are_refused():
    chat = to_chat({"input": "x", "tools": [FUNCTION],
                    "tool_choice": {"type": "function", "name": "calculator"}})  # fmt: skip
    assert chat["tools"] == [
        {
            "type": "function",
            "function": {
                key: FUNCTION[key] for key in ("name", "description", "parameters", "strict")
            },
        }
    ]
    assert chat["tool_choice"] == {"type": "function", "function": {"name": "calculator"}}
    assert chat_tool_choice("required") == "required"
    assert chat_tool_choice({"type": "allowed_tools", "mode": "auto", "tools": []}) == "auto"
    for kind in ("custom", "local_shell", "computer_use_preview", None):
        with pytest.raises(RequestError, match="function tools only") as info:
            to_chat({"input": "x", "tools": [FUNCTION, {"type": kind, "name": "t"}]})
        assert info.value.param == "tools"
    with pytest.raises(RequestError, match="tool_choice"):
        to_chat({"input": "x", "tool_choice": {"type": "file_search"}})


def test_codex_tools_server_tools_and_deferred_ones_stay_out_namespaces_flatten():
    """Codex 0.171 offers ``web_search`` (OpenAI's servers run it) and a ``namespace`` of
    sub-agent tools beside its function tools."""
    spawn = {"type": "function", "name": "spawn_agent", "parameters": {"type": "object"}}
    later = {**FUNCTION, "name": "later", "defer_loading": True}
    tools = [FUNCTION, {"type": "web_search", "external_web_access": False}, later,
             {"type": "namespace", "name": "multi_agent_v1", "description": "Sub-agents.",
              "tools": [spawn]}]  # fmt: skip
    chat = to_chat({"input": "x", "tools": tools})
    assert [tool["function"]["name"] for tool in chat["tools"]] == ["calculator", "spawn_agent"]
    assert namespaces({"tools": tools}) == {"spawn_agent": "multi_agent_v1"}
    clash = {"type": "namespace", "name": "n", "tools": [FUNCTION]}
    with pytest.raises(RequestError, match="two tools named 'calculator'"):
        to_chat({"input": "x", "tools": [FUNCTION, clash]})
    with pytest.raises(RequestError, match="needs a list of 'tools'"):
        to_chat({"input": "x", "tools": [{"type": "namespace", "name": "n"}]})
    message = {"role": "assistant", "content": None, "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "spawn_agent", "arguments": "{}"}},
        {"id": "c2", "type": "function", "function": {"name": "calculator", "arguments": "{}"}},
    ]}  # fmt: skip
    spawned, plain = output_items(message, namespaces({"tools": tools}))
    assert spawned["namespace"] == "multi_agent_v1" and "namespace" not in plain
    back = to_chat({"input": [{"type": "message", "role": "user", "content": "x"},
                              {**spawned, "type": "function_call"}]})  # fmt: skip
    assert back["messages"][-1]["tool_calls"][0]["function"]["name"] == "spawn_agent"


@pytest.mark.parametrize(
    "body, fragment",
    [
        ({"input": []}, "non-empty"),
        ({}, "non-empty"),
        ({"input": 5}, "string or a list"),
        ({"input": [5]}, "must be an object"),
        ({"input": [{"type": "item_reference", "id": "x"}]}, "'item_reference' item"),
        ({"input": [{"role": "tool", "content": "x"}]}, "role must be one of"),
        ({"input": [{"role": "user", "content": [{"type": "input_image"}]}]}, "text parts"),
        ({"input": [{"type": "function_call", "name": "f"}]}, "call_id and a name"),
        ({"input": [{"type": "function_call_output", "output": "x"}]}, "call_id must be"),
        ({"input": "x", "instructions": 3}, "'instructions' must be a string"),
        ({"input": "x", "store": "yes"}, "'store' must be"),
        ({"input": "x", "background": True}, "'background' is not served"),
    ],
)
def test_bad_requests_are_one_clear_error_naming_the_field(body, fragment):
    with pytest.raises(RequestError, match=fragment):
        to_chat(body)


def test_history_continues_and_the_error_shape_names_our_parameters():
    history = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}]
    chat = to_chat({"input": "again", "instructions": "I."}, history)
    assert [m["content"] for m in chat["messages"]] == ["I.", "hi", "yo", "again"]
    assert error_body(400, "too long", "messages", "context_length_exceeded") == {
        "error": {"message": "too long", "type": "invalid_request_error", "param": "input",
                  "code": "context_length_exceeded"}}  # fmt: skip
    assert error_body(500, "bug")["error"]["type"] == "server_error"
    assert error_body(400, "x", "max_tokens")["error"]["param"] == "max_output_tokens"


def completion(message, finish="stop"):
    return {"id": "chatcmpl-1", "model": "tiny", "choices": [
        {"index": 0, "message": message, "finish_reason": finish}],
        "usage": {"prompt_tokens": 10, "completion_tokens": 3, "total_tokens": 13}}  # fmt: skip


def test_a_chat_completion_becomes_a_response_with_its_items_and_usage():
    message = {"role": "assistant", "content": "Let me see.", "reasoning_content": "Hm.",
               "tool_calls": [CALL]}  # fmt: skip
    response = from_chat(completion(message, "tool_calls"), {"input": "x", "tools": [FUNCTION]})
    assert response["id"].startswith("resp_") and response["object"] == "response"
    assert response["status"] == "completed" and response["tools"] == [FUNCTION]
    reasoning, text, call = response["output"]
    assert reasoning["type"] == "reasoning" and reasoning["content"][0]["text"] == "Hm."
    assert text["type"] == "message" and text["content"][0]["text"] == "Let me see."
    assert call["type"] == "function_call" and call["id"].startswith("fc_")
    assert (call["call_id"], call["name"], call["arguments"]) == (
        "call_1", "calculator", '{"expression": "1 + 1"}')  # fmt: skip
    assert response["usage"]["input_tokens"] == 10 and response["usage"]["total_tokens"] == 13
    only_call = from_chat(completion({"role": "assistant", "content": None, "tool_calls": [CALL]}),
                          {})["output"]  # fmt: skip
    assert [item["type"] for item in only_call] == ["function_call"]
    cut = from_chat(completion({"role": "assistant", "content": ""}, "length"), {})
    assert cut["status"] == "incomplete" and cut["output"][0]["content"][0]["text"] == ""
    assert cut["incomplete_details"] == {"reason": "max_output_tokens"}
    echoed = input_messages(response["output"])  # what a client sends back: the same message
    assert echoed == [{"role": "assistant", "content": "Let me see.", "reasoning_content": "Hm.",
                       "tool_calls": [CALL]}]  # fmt: skip


def chunks(*deltas, finish="stop", usage=True):
    base = {"id": "chatcmpl-1", "object": "chat.completion.chunk", "model": "tiny"}
    out = [{**base, "choices": [{"index": 0, "delta": d, "finish_reason": None}]} for d in deltas]
    out.append({**base, "choices": [{"index": 0, "delta": {}, "finish_reason": finish}]})
    if usage:
        out.append({**base, "choices": [], "usage": {"prompt_tokens": 4, "completion_tokens": 2}})
    return [f"data: {json.dumps(c)}\n\n" for c in out] + ["data: [DONE]\n\n"]


async def _events(items):
    for item in items:
        yield item


def responses_events(raw_chunks, request=None):
    replies = []

    async def collect():
        out = []
        async for event in stream(_events(raw_chunks), request or {}, "tiny",
                                  lambda rid, m: replies.append((rid, m))):  # fmt: skip
            name, data = event.split("\n")[:2]
            parsed = json.loads(data.removeprefix("data: "))
            assert name == f"event: {parsed['type']}"
            out.append(parsed)
        return out

    return asyncio.run(collect()), replies


def test_streamed_text_then_a_call_becomes_the_responses_event_sequence():
    events, replies = responses_events(chunks(
        {"role": "assistant", "content": ""}, {"reasoning_content": "Think."},
        {"content": "Let "}, {"content": "me."}, {"tool_calls": [{"index": 0, **CALL}]},
        finish="tool_calls"))  # fmt: skip
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    assert [e["type"] for e in events] == [
        "response.created", "response.in_progress",
        "response.output_item.added", "response.content_part.added",
        "response.reasoning_text.delta", "response.reasoning_text.done",
        "response.content_part.done", "response.output_item.done",
        "response.output_item.added", "response.content_part.added",
        "response.output_text.delta", "response.output_text.delta", "response.output_text.done",
        "response.content_part.done", "response.output_item.done",
        "response.output_item.added", "response.function_call_arguments.delta",
        "response.function_call_arguments.done", "response.output_item.done",
        "response.completed",
    ]  # fmt: skip
    done = events[-1]["response"]
    assert [i["type"] for i in done["output"]] == ["reasoning", "message", "function_call"]
    assert done["output"][1]["content"][0]["text"] == "Let me."
    assert done["usage"]["input_tokens"] == 4 and done["usage"]["output_tokens"] == 2
    assert [e["output_index"] for e in events if e["type"].endswith("item.added")] == [0, 1, 2]
    [(response_id, message)] = replies
    assert response_id == done["id"] == events[0]["response"]["id"]
    assert message == {"role": "assistant", "content": "Let me.", "reasoning_content": "Think.",
                       "tool_calls": [CALL]}  # fmt: skip
    plain = from_chat(completion(message, "tool_calls"), {})["output"]
    assert [strip_ids(i) for i in plain] == [strip_ids(i) for i in done["output"]]


def strip_ids(item):
    return {k: v for k, v in item.items() if k != "id"}


def test_an_empty_reply_a_cut_reply_and_a_failure_midway():
    events, _ = responses_events(chunks({"role": "assistant", "content": ""}))
    assert events[-1]["type"] == "response.completed"
    assert events[-1]["response"]["output"][0]["content"][0]["text"] == ""
    events, _ = responses_events(chunks({"content": "abc"}, finish="length"))
    assert events[-1]["type"] == "response.incomplete"
    assert events[-1]["response"]["status"] == "incomplete"
    failing = chunks({"content": "ab"})[:1] + ['data: {"error": {"message": "boom"}}\n\n']
    events, replies = responses_events(failing)
    assert events[-1]["type"] == "response.failed" and replies == []
    assert events[-1]["response"]["error"] == {"code": "server_error", "message": "boom"}


def test_an_error_before_the_first_event_raises_before_anything_is_sent():
    async def failing():
        raise RequestError("too long", "messages")
        yield  # pragma: no cover

    async def first():
        return await stream(failing(), {}, "tiny").__anext__()

    with pytest.raises(RequestError, match="too long"):
        asyncio.run(first())


def test_the_store_keeps_per_session_and_is_bounded():
    store = ResponseStore(per_session=2, sessions=2)
    conversation = [{"role": "user", "content": "hi"}]
    store.put("a", "r1", conversation)
    conversation.append({"role": "user", "content": "changed later"})
    assert store.get("a", "r1") == [{"role": "user", "content": "hi"}]  # a copy was kept
    assert store.get("b", "r1") is None and store.get(None, "r1") is None
    store.put("a", "r2", [])
    store.put("a", "r3", [])
    assert store.get("a", "r1") is None and store.get("a", "r3") == []
    store.put("b", "x", [])
    store.put(None, "y", [])
    assert len(store) == 2 and store.get("a", "r3") is None  # the least recent session went
    with pytest.raises(ValueError):
        ResponseStore(per_session=0)


def test_an_ended_sessions_responses_are_dropped_when_a_new_session_stores():
    store = ResponseStore()
    store.put("a", "r1", [], open_sessions={"a"})
    store.put(None, "r2", [], open_sessions={"a"})  # without a session: kept by its own key
    store._swept = 0.0  # the sweep runs at most once a second: let the next one run
    store.put("b", "r3", [], open_sessions={"b"})  # "a" has ended meanwhile
    assert store.get("a", "r1") is None and store.get("b", "r3") == []
    assert store.get(None, "r2") == [] and len(store) == 2
