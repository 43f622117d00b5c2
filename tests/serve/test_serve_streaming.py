"""Streaming replies (``stream: true``): text deltas as the backend samples, never more than
the parsed reply holds, the tool calls at the end, the same recording as without streaming; a
client that leaves records nothing; the hf backend's per-step ids; the openai SDK's stream."""

from __future__ import annotations

import asyncio
import json
import logging

import pytest

from agentfly_cli.backends.base import Generation
from agentfly_cli.chat.parsers import get_parser
from agentfly_cli.chat.templates import ChatTemplate
from agentfly_cli.serve.gateway import Gateway
from agentfly_cli.serve.streaming import ReplyStream, opens_in_think
from tests.serve.test_serve_capture import TOOLS, Replies, call


class Dribble(Replies):
    """Scripted replies, streamed one id at a time; counts streams cancelled midway."""

    name = "dribble"

    def __init__(self, chat, texts, fail_after: int | None = None) -> None:
        super().__init__(chat, texts)
        self.fail_after, self.cancelled = fail_after, 0

    async def stream(self, prompt_ids, params, context=None):
        generation = await self.generate(prompt_ids, params, context)
        try:
            for i, token in enumerate(generation.token_ids):
                if self.fail_after is not None and i == self.fail_after:
                    raise RuntimeError("the model server went away")
                await asyncio.sleep(0)
                yield [token]
        except (asyncio.CancelledError, GeneratorExit):
            self.cancelled += 1
            raise
        yield generation


@pytest.fixture(scope="module")
def tiny_chat(tiny_model):
    return ChatTemplate.load(str(tiny_model))


def streamed(chat, parser_name: str, text: str, stops=(), think=False, options=None):
    """Feed ``text``'s ids one by one; the deltas, the last delta and the parsed message."""
    ids = chat.encode_response(text)
    gateway = Gateway(Replies(chat, []), chat, get_parser(parser_name, options), "m")
    stream = ReplyStream(chat, gateway.parser, eot_ids=gateway.eot_ids, stops=stops,
                         opens_in_think=think)  # fmt: skip
    deltas = [stream.feed([token]) for token in ids]
    message, _ = gateway.reply(Generation(ids, None, "stop"), True, stops)
    last = stream.finish(message)
    return [d for d in deltas if d], last, message


def joined(deltas, last, key: str) -> str:
    return "".join(d.get(key, "") for d in deltas) + last.get(key, "")


TEXTS = {
    "call after text": "Let me compute that. " + call("calculator", expression="17 * 23"),
    "think, text, call": "<think>\nUse the tool.\n</think>\n\nSure. " + call("c", x="2"),
    "trailing blanks": "A plain answer   \n\n",
    "non-ascii": "Emoji 🎉 split, 中文, café, ü.",
    "partial marker at the end": "I will write <tool",
    "stray close": "a </tool_call> stray",
    "unclosed call": "text with <tool_call> never closed",
    "two calls and text between": call("a", x=1) + " between " + call("b", y=2),
    "only a call": call("calculator", expression="1 + 1"),
    "long plain text": "word " * 3000,
    "blank runs": " \n" * 20000 + "text" + " " * 20000 + "more" + "\n" * 20000,
}  # fmt: skip


@pytest.mark.parametrize("case", list(TEXTS))
def test_joined_deltas_are_the_parsed_reply(tiny_chat, case, caplog):
    caplog.set_level(logging.WARNING, logger="agentfly_cli.serve.streaming")
    deltas, last, message = streamed(tiny_chat, "hermes", TEXTS[case])
    assert joined(deltas, last, "content") == (message["content"] or "")
    assert joined(deltas, last, "reasoning_content") == (message.get("reasoning_content") or "")
    assert not any("<tool_call>" in d.get("content", "") for d in deltas)
    assert [c["function"] for c in last.get("tool_calls", [])] == [
        c["function"] for c in message.get("tool_calls", [])
    ]
    assert "not the start" not in caplog.text  # nothing was shown that the reply then lacked


def test_text_streams_in_many_deltas_and_calls_come_whole_at_the_end(tiny_chat):
    deltas, last, _ = streamed(tiny_chat, "hermes", TEXTS["call after text"])
    assert len(deltas) >= 4 and joined(deltas, {}, "content") == "Let me compute that."
    assert set(last) == {"tool_calls"} and last["tool_calls"][0]["index"] == 0
    deltas, last, message = streamed(tiny_chat, "hermes", TEXTS["think, text, call"])
    assert joined(deltas, {}, "reasoning_content") == "Use the tool."
    assert joined(deltas, {}, "content") == "Sure." == message["content"]


def test_a_stop_string_ends_the_streamed_text_as_it_ends_the_reply(tiny_chat):
    deltas, last, message = streamed(tiny_chat, "hermes", "CALC: 2+2\nrest", stops=("\n",))
    assert message["content"] == "CALC: 2+2" == joined(deltas, last, "content")
    assert "rest" not in joined(deltas, {}, "content")


def test_without_tool_parsing_the_text_streams_as_sampled(tiny_chat, caplog):
    """tool_choice: none: the reply's text is not parsed nor stripped, and neither is the
    stream (a leading blank was once held back for good)."""
    caplog.set_level(logging.WARNING, logger="agentfly_cli.serve.streaming")
    text = "  spaced out <tool_call> text  "
    ids = tiny_chat.encode_response(text)
    gateway = Gateway(Replies(tiny_chat, []), tiny_chat, get_parser("hermes"), "m")
    stream = ReplyStream(tiny_chat, gateway.parser, eot_ids=gateway.eot_ids, parse_calls=False)
    deltas = [d for d in (stream.feed([token]) for token in ids) if d]
    message, _ = gateway.reply(Generation(ids, None, "stop"), False)
    assert joined(deltas, stream.finish(message), "content") == message["content"] == text
    assert len(deltas) >= 3 and "not the start" not in caplog.text


def test_a_stray_think_close_is_logged_and_the_rest_still_arrives(tiny_chat, caplog):
    """Known limit: text streamed as content before a ``</think>`` that no ``<think>`` opened
    (neither in the prompt nor the reply) is reasoning to the parser; it cannot be unsent."""
    caplog.set_level(logging.WARNING, logger="agentfly_cli.serve.streaming")
    text = "musing </think> Answer. " + call("calculator", expression="1")
    deltas, last, message = streamed(tiny_chat, "hermes", text)
    assert message["reasoning_content"] == "musing" and message["content"] == "Answer."
    assert joined(deltas, {}, "content") == "musing"  # sent before the tag came
    assert last["reasoning_content"] == "musing" and last["tool_calls"]
    assert "not the start" in caplog.text


def test_a_format_without_markers_sends_its_text_whole_at_the_end(tiny_chat):
    options = {"commands": {"CALC": {"tool": "calculator", "argument": "expression"}}}
    deltas, last, message = streamed(tiny_chat, "line", "CALC: 2 + 2", options=options)
    assert deltas == [] and last["tool_calls"][0]["function"]["name"] == "calculator"
    assert joined(deltas, last, "content") == (message["content"] or "")


def test_real_tokenizers_stream_the_parsed_reply(realdata, caplog):
    from tests.rollout.test_rollout_realdata import load

    caplog.set_level(logging.WARNING, logger="agentfly_cli.serve.streaming")
    for case in ("qwen2.5", "qwen3-thinking", "smollm2-hermes"):
        chat = load(realdata, case)
        for name, text in TEXTS.items():
            deltas, last, message = streamed(chat, "hermes", text)
            assert joined(deltas, last, "content") == (message["content"] or ""), (case, name)
            reasoning = joined(deltas, last, "reasoning_content")
            assert reasoning == (message.get("reasoning_content") or ""), (case, name)
    assert "not the start" not in caplog.text


def test_a_prompt_that_opens_a_think_block_streams_reasoning_first(realdata):
    from tests.rollout.test_rollout_realdata import load

    chat = load(realdata, "qwen3-thinking")
    prompt = chat.encode_text("<|im_start|>assistant\n<think>\n")
    assert opens_in_think(chat, prompt)
    assert not opens_in_think(chat, chat.encode_text("<think>\nx\n</think>\n\n"))
    deltas, last, message = streamed(chat, "hermes", "Plan it.\n</think>\n\nIt is 4.", think=True)
    assert message["reasoning_content"] == "Plan it." == joined(deltas, {}, "reasoning_content")
    assert joined(deltas, last, "content") == "It is 4."


# ---- the gateway ----------------------------------------------------------------------------
def events_of(gateway: Gateway, session, body) -> list[str]:
    async def collect():
        return [event async for event in gateway.stream(session, body)]

    return asyncio.run(collect())


def chunks(events: list[str]) -> list[dict]:
    return [json.loads(e[len("data: ") :]) for e in events if e != "data: [DONE]\n\n"]


def test_a_streamed_request_records_what_a_plain_one_records(tiny_chat):
    texts = ["Sure. " + call("calculator", expression="17 * 23"), "It is 391."]
    body = {"messages": [{"role": "user", "content": "17 * 23?"}], "tools": TOOLS, "n": 2}
    plain = Gateway(Replies(tiny_chat, texts), tiny_chat, get_parser("hermes"), "m")
    reply = asyncio.run(plain.complete("s", body))
    streaming = Gateway(Dribble(tiny_chat, texts), tiny_chat, get_parser("hermes"), "m")
    events = events_of(streaming, "s", body)
    assert events[-1] == "data: [DONE]\n\n"
    for index, choice in enumerate(reply["choices"]):
        mine = [c["choices"][0] for c in chunks(events) if c["choices"][0]["index"] == index]
        assert mine[0]["delta"] == {"role": "assistant", "content": ""}
        text = "".join(c["delta"].get("content") or "" for c in mine)
        assert text == (choice["message"]["content"] or "")
        calls = [c for m in mine for c in m["delta"].get("tool_calls", [])]
        assert [c["function"]["name"] for c in calls] == [
            c["function"]["name"] for c in choice["message"].get("tool_calls", [])
        ]
        assert mine[-1]["finish_reason"] == choice["finish_reason"]
    ours = [s.trajectory.ids for s in streaming.episodes["s"].segments]
    assert ours == [s.trajectory.ids for s in plain.episodes["s"].segments] and len(ours) == 2
    for segment in streaming.episodes["s"].segments:
        segment.trajectory.check()


def test_a_client_that_leaves_records_nothing_and_stops_the_sampling(tiny_chat):
    backend = Dribble(tiny_chat, ["word " * 50])
    gateway = Gateway(backend, tiny_chat, get_parser("hermes"), "m")
    body = {"messages": [{"role": "user", "content": "Talk."}]}

    async def leave_early():
        events = gateway.stream("s", body)
        seen = [await events.__anext__() for _ in range(3)]
        await events.aclose()
        await asyncio.sleep(0.2)  # time enough to sample the rest, were it not stopped
        return seen, backend.cancelled

    seen, cancelled = asyncio.run(leave_early())
    assert len(seen) == 3 and cancelled == 1
    assert gateway.episodes["s"].segments == [] and gateway.sampled_tokens == 0
    backend.texts = ["word " * 50]  # without a session: the one-request episode is dropped
    body_only = {"messages": [{"role": "user", "content": "Talk."}]}

    async def leave_anonymous():
        events = gateway.stream(None, body_only)
        await events.__anext__()
        await events.aclose()

    asyncio.run(leave_anonymous())
    assert list(gateway.episodes) == ["s"]


def test_a_backend_that_fails_midway_ends_the_stream_with_an_error(tiny_chat):
    gateway = Gateway(Dribble(tiny_chat, ["word " * 20], fail_after=5), tiny_chat,
                      get_parser("hermes"), "m")  # fmt: skip
    events = events_of(gateway, "s", {"messages": [{"role": "user", "content": "Talk."}]})
    error = json.loads(events[-1][len("data: ") :])["error"]
    assert "the model server went away" in error["message"] and "[DONE]" not in "".join(events)
    assert gateway.episodes["s"].segments == []


def test_a_bad_request_is_refused_before_any_event(tiny_chat):
    from agentfly_cli.serve.gateway import RequestError

    gateway = Gateway(Dribble(tiny_chat, []), tiny_chat, get_parser("hermes"), "m")
    with pytest.raises(RequestError):
        gateway.stream("s", {"messages": [], "stream": True})


def test_the_hf_backend_streams_each_decode_step(tiny_model, tiny_chat):
    from agentfly_cli.backends.base import SamplingParams
    from agentfly_cli.backends.hf import HFBackend
    from agentfly_cli.settings.rollout import BackendSettings

    backend = HFBackend(BackendSettings(model=str(tiny_model), device="cpu"), tiny_chat)
    prompt = tiny_chat.render_prompt([{"role": "user", "content": "Say something."}], None)
    params = SamplingParams(max_tokens=12, seed=1)

    async def stream():
        items = [item async for item in backend.stream(prompt, params)]
        await backend.close()
        return items

    items = asyncio.run(stream())
    steps, final = items[:-1], items[-1]
    assert isinstance(final, Generation) and len(final.token_ids) == 12
    streamed_ids = [token for step in steps for token in step]
    assert len(steps) >= 10 and all(len(step) == 1 for step in steps)
    assert streamed_ids == final.token_ids[: len(streamed_ids)]
    assert len(final.token_ids) - len(streamed_ids) <= 1  # a finishing step's id comes whole


def test_the_openai_sdk_reads_a_token_stream_from_the_tiny_model(tiny_model, tiny_chat):
    openai = pytest.importorskip("openai", reason="the openai SDK is a dev dependency")
    from agentfly_cli.backends.hf import HFBackend
    from agentfly_cli.serve.app import build_app
    from agentfly_cli.serve.server import serving_in_thread
    from agentfly_cli.settings.rollout import BackendSettings

    backend = HFBackend(BackendSettings(model=str(tiny_model), device="cpu"), tiny_chat)
    gateway = Gateway(backend, tiny_chat, get_parser("hermes"), "tiny", max_tokens=16)
    with serving_in_thread(build_app(gateway)) as url:
        client = openai.OpenAI(base_url=f"{url}/s/a/v1", api_key="none")
        kwargs = {"model": "m", "messages": [{"role": "user", "content": "Say something."}],
                  "seed": 1, "tool_choice": "none"}  # fmt: skip
        pieces = [
            chunk.choices[0].delta.content or ""
            for chunk in client.chat.completions.create(stream=True, **kwargs)
        ]
    [segment] = gateway.episodes["a"].segments
    segment.trajectory.check()
    [turn] = [t for t in segment.trajectory.turns if t.sampled_ids is not None]
    generation = Generation(list(turn.sampled_ids), None, "length")
    whole, _ = gateway.reply(generation, parse_calls=False)  # the text a plain reply carries
    assert "".join(pieces) == whole["content"] and sum(1 for p in pieces if p) >= 3
