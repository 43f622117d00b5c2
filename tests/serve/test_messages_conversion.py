"""The Anthropic Messages dialect's pure conversions: requests to chat bodies on many shapes,
chat replies to Messages replies, replies echoed back as the same chat message (so a session
grows one segment), and the streamed events, accumulated by the ``anthropic`` SDK, giving the
reply a plain request gets."""

from __future__ import annotations

import asyncio
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentfly_cli.chat.parsers import get_parser
from agentfly_cli.chat.templates import ChatTemplate
from agentfly_cli.serve.capture import message_key
from agentfly_cli.serve.dialects import messages as dialect
from agentfly_cli.serve.errors import RequestError
from agentfly_cli.serve.gateway import Gateway
from tests.serve.test_serve_capture import Replies, call
from tests.serve.test_serve_streaming import Dribble

BASE = {"model": "claude-x", "max_tokens": 32}
SCHEMA = {"type": "object", "properties": {"x": {"type": "integer"}}}


def chat_of(messages, **fields):
    return dialect.to_chat({**BASE, "messages": messages, **fields})


def test_system_text_and_blocks_become_one_system_message():
    blocks = [{"type": "text", "text": "One.", "cache_control": {"type": "ephemeral"}},
              {"type": "text", "text": "Two."}]  # fmt: skip
    for system, expected in (("Be brief.", "Be brief."), (blocks, "One.\nTwo.")):
        chat = chat_of([{"role": "user", "content": "hi"}], system=system)
        assert chat["messages"] == [{"role": "system", "content": expected},
                                    {"role": "user", "content": "hi"}]  # fmt: skip
    assert chat_of([{"role": "user", "content": "hi"}], system="")["messages"] == [
        {"role": "user", "content": "hi"}
    ]


def test_a_system_message_among_the_messages_stays_where_it_stands():
    """Claude Code 2.1 sends its environment notes as a ``system`` message after the first
    user turn."""
    messages = [{"role": "user", "content": [{"type": "text", "text": "Make hello.txt"}]},
                {"role": "system", "content": [{"type": "text", "text": "# Environment"},
                                               {"type": "text", "text": "cwd: /tmp"}]},
                {"role": "system", "content": "Be brief."}]  # fmt: skip
    chat = chat_of(messages, system="You code.")
    assert chat["messages"] == [{"role": "system", "content": "You code."},
                                {"role": "user", "content": "Make hello.txt"},
                                {"role": "system", "content": "# Environment\ncwd: /tmp"},
                                {"role": "system", "content": "Be brief."}]  # fmt: skip


def test_deferred_tools_stay_out_of_the_prompt_and_extra_fields_are_accepted():
    tools = [{"name": "Write", "input_schema": SCHEMA},
             {"name": "Later", "input_schema": SCHEMA, "defer_loading": True},
             {"name": "Also", "input_schema": SCHEMA, "defer_loading": False}]  # fmt: skip
    chat = chat_of([{"role": "user", "content": "hi"}], tools=tools,
                   thinking={"type": "adaptive", "display": "omitted"},
                   context_management={"edits": [{"type": "clear_thinking_20251015"}]},
                   output_config={"effort": "high"}, metadata={"user_id": "u"})  # fmt: skip
    assert [tool["function"]["name"] for tool in chat["tools"]] == ["Write", "Also"]
    assert set(chat) == {"model", "messages", "max_tokens", "tools", "stream"}


def test_a_tool_using_conversation_becomes_chat_messages_in_order():
    messages = [
        {"role": "user", "content": [{"type": "text", "text": "<reminder>"},
                                     {"type": "text", "text": "Add 1 and 2."}]},
        {"role": "assistant", "content": [
            {"type": "thinking", "thinking": "Use the tool.", "signature": "abc"},
            {"type": "text", "text": "Adding."},
            {"type": "tool_use", "id": "toolu_1", "name": "add", "input": {"x": 1}},
            {"type": "tool_use", "id": "toolu_2", "name": "add", "input": {}},
            {"type": "redacted_thinking", "data": "opaque"}]},
        {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "toolu_1", "content": "3"},
            {"type": "tool_result", "tool_use_id": "toolu_2", "is_error": True,
             "content": [{"type": "text", "text": "bad"}, {"type": "text", "text": "input"}]},
            {"type": "text", "text": "Go on."}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t3"}]},
    ]  # fmt: skip
    assert chat_of(messages)["messages"] == [
        {"role": "user", "content": "<reminder>\nAdd 1 and 2."},
        {"role": "assistant", "content": "Adding.", "reasoning_content": "Use the tool.",
         "tool_calls": [
             {"id": "toolu_1", "type": "function",
              "function": {"name": "add", "arguments": '{"x": 1}'}},
             {"id": "toolu_2", "type": "function", "function": {"name": "add", "arguments": "{}"}},
         ]},
        {"role": "tool", "tool_call_id": "toolu_1", "content": "3"},
        {"role": "tool", "tool_call_id": "toolu_2", "content": "Error: bad\ninput"},
        {"role": "user", "content": "Go on."},
        {"role": "tool", "tool_call_id": "t3", "content": ""},
    ]  # fmt: skip


def test_tools_choices_stops_and_sampling_become_the_chat_fields():
    tools = [{"name": "add", "description": "Adds.", "input_schema": SCHEMA,
              "cache_control": {"type": "ephemeral"}},
             {"type": "custom", "name": "plain", "input_schema": SCHEMA}]  # fmt: skip
    chat = chat_of([{"role": "user", "content": "hi"}], tools=tools, stop_sequences=["END"],
                   temperature=0.5, top_p=0.9, top_k=5, metadata={"user_id": "u"},
                   stream=True, thinking={"type": "enabled", "budget_tokens": 1024})  # fmt: skip
    assert chat["tools"] == [
        {"type": "function", "function": {"name": "add", "parameters": SCHEMA,
                                          "description": "Adds."}},
        {"type": "function", "function": {"name": "plain", "parameters": SCHEMA}},
    ]  # fmt: skip
    assert (chat["stop"], chat["temperature"], chat["top_p"], chat["max_tokens"]) == (
        ["END"], 0.5, 0.9, 32,
    )  # fmt: skip
    assert chat["stream"] is True and chat["stream_options"]["include_usage"] is True
    assert "top_k" not in chat and "metadata" not in chat
    choices = {"auto": "auto", "any": "required", "none": "none"}
    for kind, expected in choices.items():
        chosen = chat_of([{"role": "user", "content": "hi"}], tool_choice={"type": kind})
        assert chosen["tool_choice"] == expected
    named = chat_of(
        [{"role": "user", "content": "x"}],
        tool_choice={"type": "tool", "name": "add", "disable_parallel_tool_use": True},
    )
    assert named["tool_choice"] == {"type": "function", "function": {"name": "add"}}
    counted = dialect.to_chat({"model": "m", "messages": [{"role": "user", "content": "x"}],
                               "stream": True}, counting=True)  # fmt: skip
    assert "max_tokens" not in counted and counted["stream"] is False


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        ({"messages": []}, "messages: must be a non-empty list"),
        ({"messages": [{"role": "user", "content": 5}]}, "messages.0.content: must be a string"),
        ({"messages": [{"role": "user", "content": [{"text": "x"}]}]}, "must be an object with"),
        ({"messages": [{"role": "assistant", "content": [{"type": "tool_result",
          "tool_use_id": "t"}]}]}, "tool_result blocks are not supported in assistant content"),
        ({"messages": [{"role": "user", "content": [{"type": "tool_use", "id": "t",
          "name": "f", "input": {}}]}]}, "tool_use blocks are not supported in user content"),
        ({"messages": [{"role": "assistant", "content": [{"type": "tool_use", "id": "t",
          "name": "f", "input": [1]}]}]}, "messages.0.content.0.input: must be an object"),
        ({"messages": [{"role": "user", "content": [{"type": "tool_result"}]}]},
         "tool_use_id: must be a string"),
        ({"messages": [{"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t",
          "content": [{"type": "image"}]}]}]}, "image blocks are not supported in tool_result"),
        ({"system": 3}, "system: must be a string or a list of text blocks"),
        ({"system": [{"type": "image"}]}, "system.0: must be a text block"),
        ({"top_p": float("nan")}, "top_p: must be a number from 0 to 1"),
        ({"max_tokens": True}, "max_tokens: must be an integer"),
        ({"tools": {"name": "f"}}, "tools: must be a list"),
        ({"tool_choice": {"type": "tool"}}, "tool_choice: must be"),
        ({"stop_sequences": [""]}, "stop_sequences: must be a list of non-empty strings"),
    ],
)  # fmt: skip
def test_bad_requests_name_the_field_as_anthropic_does(body, expected):
    full = {**BASE, "messages": [{"role": "user", "content": "hi"}], **body}
    with pytest.raises(RequestError, match=expected.replace("(", r"\(")):
        dialect.to_chat(full)


def reply(message, finish="stop", **choice):
    return {"id": "chatcmpl-abc", "model": "tiny", "usage": {"prompt_tokens": 7,
            "completion_tokens": 3}, "choices": [{"index": 0, "message": message,
                                                  "finish_reason": finish, **choice}]}  # fmt: skip


def test_chat_replies_become_messages_replies():
    text = dialect.from_chat(reply({"role": "assistant", "content": "Hi."}), BASE)
    assert text == {"id": "msg_abc", "type": "message", "role": "assistant", "model": "tiny",
                    "content": [{"type": "text", "text": "Hi."}], "stop_reason": "end_turn",
                    "stop_sequence": None, "usage": {"input_tokens": 7, "output_tokens": 3,
                    "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0}}  # fmt: skip
    calls = [
        {"id": "call_1", "type": "function", "function": {"name": "add", "arguments": '{"x": 1}'}},
        {"id": "call_2", "type": "function", "function": {"name": "f", "arguments": "[1]"}},
    ]
    message = {"role": "assistant", "content": None, "reasoning_content": "Think.",
               "tool_calls": calls}  # fmt: skip
    used = dialect.from_chat(reply(message, "tool_calls"), BASE)
    assert used["content"] == [
        {"type": "thinking", "thinking": "Think.", "signature": ""},
        {"type": "tool_use", "id": "call_1", "name": "add", "input": {"x": 1}},
        {"type": "tool_use", "id": "call_2", "name": "f", "input": {"arguments": [1]}},
    ] and used["stop_reason"] == "tool_use"  # fmt: skip
    cut = reply({"role": "assistant", "content": "a"}, "length")
    assert dialect.from_chat(cut, BASE)["stop_reason"] == "max_tokens"
    stopped = dialect.from_chat(reply({"role": "assistant", "content": ""}, stop_reason="END"),
                                BASE)  # fmt: skip
    assert (stopped["stop_reason"], stopped["stop_sequence"], stopped["content"]) == (
        "stop_sequence", "END", [],
    )  # fmt: skip


def test_error_bodies_follow_anthropics_types():
    kinds = {400: "invalid_request_error", 401: "authentication_error", 403: "permission_error",
             404: "not_found_error", 409: "invalid_request_error", 413: "request_too_large",
             429: "rate_limit_error", 500: "api_error", 503: "overloaded_error"}  # fmt: skip
    for status, kind in kinds.items():
        assert dialect.error_body(status, "why") == {
            "type": "error", "error": {"type": kind, "message": "why"}
        }  # fmt: skip


text = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=40)
arguments = st.dictionaries(st.text(max_size=8), st.one_of(st.integers(), text, st.booleans()),
                            max_size=4)  # fmt: skip


@settings(max_examples=200, deadline=None)
@given(content=st.one_of(st.none(), text), calls=st.lists(st.tuples(text, arguments),
                                                           max_size=3))  # fmt: skip
def test_a_reply_echoed_back_is_the_same_chat_message(content, calls):
    """What the gateway replied, as the Anthropic SDK echoes it (the content blocks), is the
    same message to the session's matching: the request extends the segment."""
    message = {"role": "assistant", "content": content}
    if calls:
        message["tool_calls"] = [
            {"id": f"call_{i}", "type": "function",
             "function": {"name": name or "f", "arguments": json.dumps(args)}}
            for i, (name, args) in enumerate(calls)
        ]  # fmt: skip
    blocks = dialect.content_blocks(message)
    [echoed] = chat_of([{"role": "assistant", "content": blocks}])["messages"]
    assert message_key(echoed) == message_key(message)


@pytest.fixture(scope="module")
def tiny_chat(tiny_model):
    return ChatTemplate.load(str(tiny_model))


async def streamed_and_plain(chat, text, body):
    streaming = Gateway(Dribble(chat, [text]), chat, get_parser("hermes"), "m")
    events = [event async for event in streaming.stream("s", body)]
    plain = Gateway(Replies(chat, [text]), chat, get_parser("hermes"), "m")
    return events, await plain.complete("s", body)


def accumulated(events):
    """The Anthropic SDK's own accumulation of our Messages events: its final message."""
    from anthropic.lib.streaming._messages import accumulate_event

    snapshot, buffers = None, {}
    for event in events:
        kind, data = event.split("\n", 1)
        payload = json.loads(data.removeprefix("data: "))
        assert kind == f"event: {payload['type']}"
        if payload["type"] != "ping":
            snapshot = accumulate_event(event=payload, current_snapshot=snapshot,
                                        json_bufs=buffers)  # fmt: skip
    return snapshot


STREAMED = {
    "text": "A plain answer, streamed in pieces.",
    "text then call": "Let me compute that. " + call("calculator", expression="17 * 23"),
    "think, text, call": "<think>\nUse the tool.\n</think>\n\nSure. " + call("c", x="2"),
    "two calls": call("a", x=1) + call("b", y=2),
    "a stop sequence": "Hello there. END never shown",
}


@pytest.mark.parametrize("case", list(STREAMED))
def test_streamed_events_accumulate_to_the_plain_reply(tiny_chat, case):
    pytest.importorskip("anthropic", reason="the anthropic SDK is a dev dependency")
    request = {**BASE, "messages": [{"role": "user", "content": "Go."}],
               "stop_sequences": ["END"]}  # fmt: skip
    chat_events, chat_reply = asyncio.run(
        streamed_and_plain(tiny_chat, STREAMED[case], dialect.to_chat({**request, "stream": True}))
    )
    adapter = dialect.MessagesStream(request)
    events = [out for event in chat_events for out in adapter.feed(event)]
    final = accumulated(events).to_dict()
    plain = dialect.from_chat(chat_reply, request)
    for key in ("stop_reason", "stop_sequence", "usage", "role", "type"):
        assert final[key] == plain[key], key
    assert without_ids(final["content"]) == without_ids(plain["content"])  # ids: new per call
    assert all(b["id"].startswith("call_") for b in final["content"] if b["type"] == "tool_use")


def without_ids(blocks):
    return [{k: v for k, v in block.items() if k != "id"} for block in blocks]


def test_a_failure_midway_ends_the_stream_with_an_anthropic_error_event():
    adapter = dialect.MessagesStream(BASE)
    start = {"id": "chatcmpl-1", "choices": [{"index": 0, "delta": {"content": "Hi"}}]}
    failed = {"error": {"message": "the request failed (RuntimeError: gone)"}}
    events = adapter.feed(f"data: {json.dumps(start)}\n\n") + adapter.feed(
        f"data: {json.dumps(failed)}\n\n"
    )
    assert [e.split("\n", 1)[0] for e in events] == [
        "event: message_start", "event: ping", "event: content_block_start",
        "event: content_block_delta", "event: error",
    ]  # fmt: skip
    assert json.loads(events[-1].split("data: ", 1)[1])["error"] == {
        "type": "api_error", "message": "the request failed (RuntimeError: gone)"
    }  # fmt: skip


def test_the_chat_side_names_the_stop_string_and_streams_usage_when_asked(tiny_chat):
    """What the dialect reads from chat completions: the stop string as the choice's
    ``stop_reason`` (vLLM's), usage on every chunk and at the end (``stream_options``)."""
    text, body = "Hi there. END more", {"messages": [{"role": "user", "content": "Go."}]}
    stopped = {**body, "stop": ["END"]}
    events, plain = asyncio.run(streamed_and_plain(tiny_chat, text, stopped))
    assert plain["choices"][0]["stop_reason"] == "END"
    chunks = [json.loads(e[len("data: ") :]) for e in events[:-1]]
    assert "usage" not in json.dumps(chunks) and chunks[-1]["choices"][0]["stop_reason"] == "END"
    _, unstopped = asyncio.run(streamed_and_plain(tiny_chat, text, body))
    assert "stop_reason" not in unstopped["choices"][0]  # nothing new for a plain request
    for options, each in (
        ({"include_usage": True}, False),
        ({"include_usage": True, "continuous_usage_stats": True}, True),
    ):
        events, plain = asyncio.run(
            streamed_and_plain(tiny_chat, text, {**body, "stream_options": options})
        )  # fmt: skip
        chunks = [json.loads(e[len("data: ") :]) for e in events[:-1]]
        assert chunks[-1]["choices"] == [] and chunks[-1]["usage"] == plain["usage"]
        sofar = [c["usage"]["completion_tokens"] for c in chunks[:-1] if "usage" in c]
        assert len(sofar) == (len(chunks) - 1 if each else 0)
        assert sofar == sorted(sofar) and (not each or sofar[0] == 0)
    with pytest.raises(RequestError, match="'stream_options' must be an object"):
        Gateway(Replies(tiny_chat, []), tiny_chat, get_parser("hermes"), "m").check(
            {**body, "stream_options": "yes"}
        )


def test_a_client_that_leaves_a_messages_stream_stops_the_sampling_and_records_nothing(
    tiny_chat,
):
    from agentfly_cli.serve.dialects import chat_events

    backend = Dribble(tiny_chat, ["word " * 50])
    gateway = Gateway(backend, tiny_chat, get_parser("hermes"), "m")
    request = {**BASE, "messages": [{"role": "user", "content": "Talk."}], "stream": True}

    async def leave_early():
        chat = await chat_events(gateway, "s", dialect.to_chat(request))  # held: no GC closes it
        events = dialect.stream(chat, request)
        seen = [await events.__anext__() for _ in range(4)]
        await events.aclose()  # what Starlette does when the client leaves
        await asyncio.sleep(0.2)  # time enough to sample the rest, were it not stopped
        return seen, chat

    seen, _ = asyncio.run(leave_early())
    assert [e.split("\n", 1)[0] for e in seen][:2] == ["event: message_start", "event: ping"]
    assert backend.cancelled == 1 and gateway.episodes["s"].segments == []
