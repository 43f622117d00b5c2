"""The Anthropic Messages dialect over HTTP with the official ``anthropic`` SDK: a tool-using
agent loop through a session URL (plain and streamed), stop sequences, count_tokens,
Anthropic-shaped errors (context length included), the gateway's guarantees on these routes,
and ``agentfly serve --model tiny`` answering the SDK; every trajectory token-exact."""

from __future__ import annotations

import json
import threading

import httpx
import pytest

from agentfly_cli.chat.parsers import get_parser
from agentfly_cli.chat.templates import ChatTemplate
from agentfly_cli.serve.app import build_app
from agentfly_cli.serve.auth import Access
from agentfly_cli.serve.gateway import Gateway
from agentfly_cli.serve.limits import ServeLimits
from agentfly_cli.serve.server import serving_in_thread
from tests.serve.test_serve_capture import TOOLS, Replies, call
from tests.serve.test_serve_streaming import Dribble

anthropic = pytest.importorskip("anthropic", reason="the anthropic SDK is a dev dependency")
KEY = "k-" + "s3cret" * 4
CALCULATOR = [{"name": t["function"]["name"], "description": t["function"]["description"],
               "input_schema": t["function"]["parameters"]} for t in TOOLS]  # fmt: skip
HI = {"model": "m", "max_tokens": 16, "messages": [{"role": "user", "content": "hi"}]}


@pytest.fixture(scope="module")
def tiny_chat(tiny_model):
    return ChatTemplate.load(str(tiny_model))


def served(chat, texts=(), backend=Replies, access=None, **options):
    gateway = Gateway(backend(chat, list(texts)), chat, get_parser("hermes"), "tiny", **options)
    ended = []
    return gateway, ended, serving_in_thread(build_app(gateway, ended.append, access))


def calculator_agent(client, question: str, stream: bool = False):
    """An ordinary Anthropic-SDK agent: run the tools until the model answers in text; the
    replies it got."""
    messages, replies = [{"role": "user", "content": question}], []
    for _ in range(4):
        request = {"model": "claude-x", "max_tokens": 64, "system": "You can calculate.",
                   "messages": messages, "tools": CALCULATOR}  # fmt: skip
        if stream:
            with client.messages.stream(**request) as events:
                reply = events.get_final_message()
        else:
            reply = client.messages.create(**request)
        replies.append(reply)
        messages.append({"role": "assistant", "content": reply.content})
        uses = [block for block in reply.content if block.type == "tool_use"]
        if not uses:
            return replies
        results = [{"type": "tool_result", "tool_use_id": use.id,
                    "content": str(eval(use.input["expression"], {"__builtins__": {}}))}
                   for use in uses]  # fmt: skip
        messages.append({"role": "user", "content": results})
    raise AssertionError("the agent never answered")


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "streamed"])
def test_an_anthropic_sdk_agent_is_captured_as_one_token_exact_segment(tiny_chat, stream):
    texts = ["Let me compute. " + call("calculator", expression="17 * 23"), "It is 391."]
    gateway, ended, serving = served(tiny_chat, texts, Dribble)
    with serving as url:
        client = anthropic.Anthropic(base_url=f"{url}/s/episode-7", api_key="none")
        first, second = calculator_agent(client, "What is 17 * 23?", stream)
        done = httpx.post(f"{url}/sessions/episode-7/end", json={"reward": 1.0}).json()
    assert first.stop_reason == "tool_use" and second.stop_reason == "end_turn"
    assert [b.type for b in first.content] == ["text", "tool_use"]
    assert first.content[0].text == "Let me compute."
    assert (first.content[1].name, first.content[1].input) == (
        "calculator",
        {"expression": "17 * 23"},
    )
    assert second.content[0].text == "It is 391." and second.id.startswith("msg_")
    sent_first, sent_second = gateway.backend.prompts
    assert first.usage.input_tokens == len(sent_first)
    assert second.usage.output_tokens == len(tiny_chat.encode_response("It is 391."))
    [trajectory] = ended[0].trajectories()  # the echoed blocks extended the one segment
    trajectory.check()
    assert trajectory.reward == 1.0 and done["trajectories"][0]["ids"] == trajectory.ids
    assert trajectory.ids[: len(sent_second)] == sent_second
    assert sent_second[: len(sent_first)] == sent_first
    assert "391" in tiny_chat.decode(trajectory.ids[trajectory.turns[2].start :])
    assert [c.name for c in trajectory.tool_calls] == ["calculator"]


def test_the_stream_is_the_messages_event_sequence(tiny_chat):
    texts = ["Sure. " + call("calculator", expression="1 + 1")]
    gateway, _, serving = served(tiny_chat, texts, Dribble)
    with serving as url:
        body = {**HI, "tools": CALCULATOR, "stream": True}
        with httpx.stream("POST", f"{url}/v1/messages", json=body) as reply:
            assert reply.headers["content-type"].startswith("text/event-stream")
            lines = [line for line in reply.iter_lines() if line]
    names = [line.split(": ", 1)[1] for line in lines if line.startswith("event: ")]
    data = [json.loads(line.split(": ", 1)[1]) for line in lines if line.startswith("data: ")]
    assert [d["type"] for d in data] == names
    assert names[:3] == ["message_start", "ping", "content_block_start"]
    assert names[-2:] == ["message_delta", "message_stop"]
    starts = [d["content_block"]["type"] for d in data if d["type"] == "content_block_start"]
    assert starts == ["text", "tool_use"] and names.count("content_block_stop") == 2
    texts = [
        d["delta"]["text"]
        for d in data
        if d["type"] == "content_block_delta" and d["delta"]["type"] == "text_delta"
    ]
    assert len(texts) > 1 and "".join(texts) == "Sure."  # streamed as sampled, in pieces
    [arguments] = [d["delta"]["partial_json"] for d in data
                   if d["type"] == "content_block_delta"
                   and d["delta"]["type"] == "input_json_delta"]  # fmt: skip
    assert json.loads(arguments) == {"expression": "1 + 1"}
    assert data[0]["message"]["usage"]["input_tokens"] == len(gateway.backend.prompts[0])
    assert data[-2]["delta"] == {"stop_reason": "tool_use", "stop_sequence": None}


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "streamed"])
def test_a_stop_sequence_ends_the_text_and_is_named(tiny_chat, stream):
    gateway, _, serving = served(tiny_chat, ["Hello there. END and more"], Dribble)
    with serving as url:
        client = anthropic.Anthropic(base_url=url, api_key="none")
        request = {**HI, "stop_sequences": ["END", "never"]}
        if stream:
            with client.messages.stream(**request) as events:
                reply = events.get_final_message()
        else:
            reply = client.messages.create(**request)
    assert (reply.stop_reason, reply.stop_sequence) == ("stop_sequence", "END")
    assert reply.content[0].text == "Hello there."


def test_count_tokens_is_the_rendered_prompt_and_records_nothing(tiny_chat):
    gateway, ended, serving = served(tiny_chat, ["ok"])
    with serving as url:
        client = anthropic.Anthropic(base_url=f"{url}/s/counted", api_key="none")
        request = {"model": "m", "system": "Be brief.", "tools": CALCULATOR,
                   "messages": [{"role": "user", "content": "What is 2 + 2?"}]}  # fmt: skip
        counted = client.messages.count_tokens(**request)
        assert gateway.episodes == {} and gateway.backend.prompts == []  # nothing opened
        client.messages.create(**request, max_tokens=8)
    assert counted.input_tokens == len(gateway.backend.prompts[0]) > 10


def errors_of(url: str, body, path="/v1/messages", **options):
    reply = httpx.post(f"{url}{path}", json=body, **options)
    payload = reply.json()
    assert payload["type"] == "error" and set(payload["error"]) == {"type", "message"}, payload
    return reply.status_code, payload["error"]["type"], payload["error"]["message"]


def test_bad_requests_are_anthropic_shaped_400s_naming_the_field(tiny_chat):
    gateway, _, serving = served(tiny_chat)
    image = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": ""}}
    cases = {
        "max_tokens: Field required": {k: v for k, v in HI.items() if k != "max_tokens"},
        "max_tokens: must be an integer": {**HI, "max_tokens": 0},
        "temperature: must be a number from 0 to 1": {**HI, "temperature": 1.5},
        "messages.0.content.0: image blocks are not supported": {
            **HI, "messages": [{"role": "user", "content": [image]}]},
        "messages.0.role: must be 'user', 'assistant' or 'system'": {
            **HI, "messages": [{"role": "tool", "content": "x"}]},
        "messages.1.content.0: must be a text block": {
            **HI, "messages": [HI["messages"][0], {"role": "system", "content": [image]}]},
        "tools.0.input_schema: Field required": {**HI, "tools": [{"name": "f"}]},
        "tools.0: 'web_search_20250305' is a tool Anthropic's servers run": {
            **HI, "tools": [{"type": "web_search_20250305", "name": "web_search"}]},
        "tool_choice: must be": {**HI, "tool_choice": {"type": "some"}},
        "stop_sequences: must be a list": {**HI, "stop_sequences": "END"},
        "model: Field required": {k: v for k, v in HI.items() if k != "model"},
    }  # fmt: skip
    with serving as url:
        for expected, body in cases.items():
            for stream in (False, True):
                status, kind, message = errors_of(url, {**body, "stream": stream})
                assert (status, kind) == (400, "invalid_request_error") and expected in message
        status, kind, message = errors_of(url, [1, 2], "/v1/messages/count_tokens")
        assert (status, kind) == (400, "invalid_request_error") and "JSON object" in message
        reply = httpx.post(f"{url}/v1/messages", content=b"{not json",
                           headers={"Content-Type": "application/json"})  # fmt: skip
        assert reply.status_code == 400 and "not JSON" in reply.json()["error"]["message"]
        client = anthropic.Anthropic(base_url=url, api_key="none", max_retries=0)
        with pytest.raises(anthropic.BadRequestError) as info:
            client.messages.create(model="m", max_tokens=-1, messages=HI["messages"])
        assert info.value.body["error"]["type"] == "invalid_request_error"
    assert gateway.backend.prompts == [] and gateway.episodes == {}


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "streamed"])
def test_a_prompt_over_the_context_says_it_is_too_long_as_anthropic_does(tiny_chat, stream):
    gateway, _, serving = served(tiny_chat, max_prompt_tokens=40)
    with serving as url:
        client = anthropic.Anthropic(base_url=f"{url}/s/long", api_key="none", max_retries=0)
        with pytest.raises(anthropic.BadRequestError) as info:
            long = [{"role": "user", "content": "word " * 100}]
            client.messages.create(model="m", max_tokens=8, messages=long, stream=stream)
        chat = httpx.post(f"{url}/s/long/v1/chat/completions", json={"messages": long})
        assert (chat.status_code, chat.json()["error"]["code"]) == (400, "context_length_exceeded")
    error = info.value.body["error"]
    assert error["type"] == "invalid_request_error", error
    prompt, maximum = map(int, error["message"].removeprefix("prompt is too long: ")
                          .removesuffix(" maximum").split(" tokens > "))  # fmt: skip
    assert prompt > maximum == 39
    assert gateway.episodes["long"].segments == [] and gateway.backend.prompts == []


def test_the_api_key_is_needed_on_the_messages_routes_as_x_api_key_or_bearer(tiny_chat):
    gateway, _, serving = served(tiny_chat, ["one", "two"], access=Access(api_key=KEY))
    with serving as url:
        wrong = anthropic.Anthropic(base_url=f"{url}/s/e1", api_key="nope", max_retries=0)
        with pytest.raises(anthropic.AuthenticationError) as info:
            wrong.messages.create(**HI)
        assert info.value.body["error"]["type"] == "authentication_error"
        for path in ("/v1/messages", "/s/e1/v1/messages/count_tokens"):
            assert errors_of(url, HI, path)[:2] == (401, "authentication_error")
        assert gateway.backend.prompts == [] and gateway.episodes == {}
        as_x_api_key = httpx.post(
            f"{url}/s/e1/v1/messages",
            json=HI,
            headers={"x-api-key": KEY, "anthropic-version": "2023-06-01"},
        )
        assert as_x_api_key.json()["content"] == [{"type": "text", "text": "one"}]
        bearer = anthropic.Anthropic(base_url=f"{url}/s/e1", auth_token=KEY)
        assert bearer.messages.create(**HI).content[0].text == "two"


def test_a_body_over_the_limit_is_an_anthropic_shaped_413(tiny_chat):
    gateway, _, serving = served(tiny_chat, ["ok"], limits=ServeLimits(max_body_bytes=4096))
    big = {**HI, "messages": [{"role": "user", "content": "x" * 100_000}]}
    with serving as url:
        for path in ("/s/e/v1/messages", "/v1/messages/count_tokens"):
            assert errors_of(url, big, path)[:2] == (413, "request_too_large")
        assert gateway.backend.prompts == []
        assert httpx.post(f"{url}/s/e/v1/messages", json=HI).status_code == 200


class Gate(Replies):
    """Each session's own scripted replies (by the request's group: its session), given once
    ``open`` is set (the sessions' requests are under way together)."""

    def __init__(self, chat, texts) -> None:
        super().__init__(chat, [])
        self.by_session, self.open = dict(texts), threading.Event()

    async def generate(self, prompt_ids, params, context=None):
        import asyncio

        while not self.open.is_set():
            await asyncio.sleep(0.005)
        self.texts = [self.by_session[context.group_id].pop(0)]
        return await super().generate(prompt_ids, params, context)


def test_sessions_stay_apart_and_a_malformed_request_hurts_no_other(tiny_chat):
    texts = {"a": [call("calculator", expression="1 + 2"), "Three."],
             "b": [call("calculator", expression="2 + 2"), "Four."]}  # fmt: skip
    gateway, ended, serving = served(tiny_chat, texts.items(), Gate)
    answers: dict[str, list] = {}
    with serving as url:

        def agent(session, question):
            client = anthropic.Anthropic(base_url=f"{url}/s/{session}", api_key="none")
            answers[session] = calculator_agent(client, question)

        workers = [threading.Thread(target=agent, args=(s, q))
                   for s, q in (("a", "1 + 2?"), ("b", "2 + 2?"))]  # fmt: skip
        for worker in workers:
            worker.start()
        bad = {**HI, "messages": [{"role": "user", "content": [{"type": "image"}]}]}
        assert errors_of(url, bad, "/s/c/v1/messages")[0] == 400  # while a and b wait
        assert (
            httpx.post(
                f"{url}/s/c/v1/messages",
                content=b'{"model": ',
                headers={"Content-Type": "application/json"},
            ).status_code
            == 400
        )
        gateway.backend.open.set()
        for worker in workers:
            worker.join(30)
        for session in ("a", "b"):
            httpx.post(f"{url}/sessions/{session}/end", json={"reward": 1.0})
    assert {s: a[-1].content[0].text for s, a in answers.items()} == {"a": "Three.", "b": "Four."}
    assert sorted(e.id for e in ended) == ["a", "b"] and "c" not in gateway.episodes
    for episode in ended:
        [trajectory] = episode.trajectories()
        trajectory.check()
        text = tiny_chat.decode(trajectory.ids)
        mine, other = ("1 + 2", "2 + 2") if episode.id == "a" else ("2 + 2", "1 + 2")
        assert mine in text and other not in text  # each session saw only its own requests


def test_agentfly_serve_tiny_answers_the_anthropic_sdk_and_records_it(tiny_model, tmp_path):
    """The command as a user runs it: the SDK plain, streamed and counting against a
    session URL of ``agentfly serve --model tiny``; the episode recorded token-exactly."""
    import os
    import re
    import signal
    import subprocess
    import sys

    from agentfly_cli.trajectory import read_trajectories

    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    record = tmp_path / "episodes.jsonl"
    command = [sys.executable, "-m", "agentfly_cli", "serve", "--model", str(tiny_model),
               "--port", "0", "--record", str(record)]  # fmt: skip
    server = subprocess.Popen(command, stderr=subprocess.PIPE, text=True, env=env)
    try:
        seen = []
        while not (found := re.search(r"at (http://127\.0\.0\.1:\d+)/v1", seen[-1] if seen
                                      else "")):  # fmt: skip
            seen.append(server.stderr.readline())
            assert seen[-1], f"the server ended before serving: {seen}"
        url = found.group(1)
        client = anthropic.Anthropic(base_url=f"{url}/s/run-1", api_key="none")
        messages = [{"role": "user", "content": "hi"}]
        counted = client.messages.count_tokens(model="m", messages=messages)
        reply = client.messages.create(model="m", max_tokens=8, messages=messages)
        assert reply.usage.input_tokens == counted.input_tokens
        assert reply.usage.output_tokens <= 8 and reply.stop_reason in ("end_turn", "max_tokens")
        messages += [{"role": "assistant", "content": reply.content},
                     {"role": "user", "content": "more"}]  # fmt: skip
        with client.messages.stream(model="m", max_tokens=8, messages=messages) as events:
            streamed = events.get_final_message()
        assert streamed.usage.output_tokens <= 8
        ended = httpx.post(f"{url}/sessions/run-1/end", json={"reward": 0.5}).json()
        assert ended["reward"] == 0.5
    finally:
        server.send_signal(signal.SIGINT)
        server.wait(30)
    trajectories = read_trajectories(record)
    assert trajectories and all(t.meta["episode"] == "run-1" for t in trajectories)
    for trajectory in trajectories:
        trajectory.check()
    assert sum(t.num_turns for t in trajectories) == 2
