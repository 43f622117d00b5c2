"""The gateway's bounds: one request must not exhaust the server or hurt the others.

Request bodies, stop strings, the stop-id cache, open sessions and idle sessions are bounded
(each by a ``ServeLimits`` field with a documented default); a failed anonymous request leaves
nothing open; a bad seed fails its own request only, in the gateway and in the hf batch; a
conversation over the hf model's context is refused; rendering a huge message runs off the
event loop while other clients are answered."""

from __future__ import annotations

import asyncio
import re
import threading
import time
import tracemalloc
from pathlib import Path

import httpx
import pytest

from agentfly_cli.backends.base import SamplingParams
from agentfly_cli.chat.parsers import get_parser
from agentfly_cli.chat.templates import ChatTemplate
from agentfly_cli.serve.app import build_app
from agentfly_cli.serve.gateway import Gateway, RequestError
from agentfly_cli.serve.limits import ServeLimits
from agentfly_cli.serve.server import serving_in_thread
from agentfly_cli.serve.streaming import ReplyStream
from tests.serve.test_serve_capture import Replies

openai = pytest.importorskip("openai", reason="the openai SDK is a dev dependency")
HI = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
DOCS = Path(__file__).resolve().parents[2] / "docs" / "serve.md"


@pytest.fixture(scope="module")
def tiny_chat(tiny_model):
    return ChatTemplate.load(str(tiny_model))


def gateway_for(chat, texts=(), **options) -> Gateway:
    return Gateway(Replies(chat, list(texts)), chat, get_parser("hermes"), "tiny", **options)


def test_a_body_over_the_limit_is_a_413_even_when_it_is_sent_in_chunks(tiny_chat):
    gateway = gateway_for(tiny_chat, ["ok"], limits=ServeLimits(max_body_bytes=4096))
    big = b'{"messages": [{"role": "user", "content": "' + b"x" * 100_000 + b'"}]}'

    def chunked():  # no Content-Length: the server must count what it reads
        for i in range(0, len(big), 1000):
            yield big[i : i + 1000]

    with serving_in_thread(build_app(gateway)) as url:
        headers = {"Content-Type": "application/json"}
        for content in (big, chunked()):
            reply = httpx.post(f"{url}/s/e/v1/chat/completions", content=content, headers=headers)
            assert reply.status_code == 413
            assert "4096 bytes" in reply.json()["error"]["message"]
        assert gateway.backend.prompts == []
        assert httpx.post(f"{url}/s/e/v1/chat/completions", json=HI).status_code == 200


def test_too_many_or_too_long_stop_strings_are_refused(tiny_chat):
    gateway = gateway_for(tiny_chat, limits=ServeLimits(max_stops=3, max_stop_chars=10))
    for stop in (["a", "b", "c", "d"], "x" * 11):
        with pytest.raises(RequestError) as info:
            gateway.check({**HI, "stop": stop})
        assert info.value.param == "stop"
    gateway.check({**HI, "stop": ["a", "b", "x" * 10]})


def test_a_long_stop_string_costs_memory_linear_in_its_length(tiny_chat):
    stop = "ab" * 2500  # 5,000 characters (the gateway refuses it; the streamer must not care)
    tracemalloc.start()
    try:
        ReplyStream(tiny_chat, get_parser("hermes"), eot_ids={0}, stops=(stop,))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 1_000_000, peak  # every prefix kept would be 12.5 M characters


def test_the_stop_id_cache_is_bounded_and_filled_off_the_event_loop(tiny_chat, monkeypatch):
    gateway = gateway_for(tiny_chat, ["a", "b", "c", "d"], limits=ServeLimits(stop_cache_size=2))
    threads = []
    real = type(tiny_chat).stop_token_ids

    def recording(self, stops):
        threads.append(threading.current_thread())
        return real(self, stops)

    monkeypatch.setattr(type(tiny_chat), "stop_token_ids", recording)

    async def run():
        for stop in ("x", "y", "z", "x"):
            await gateway.complete("s", {**HI, "stop": stop})
        return threading.current_thread()

    loop_thread = asyncio.run(run())
    assert len(gateway._stop_cache) == 2
    assert len(threads) == 4 and loop_thread not in threads  # "x" had been dropped: scanned again


def test_open_sessions_are_bounded_and_ending_one_makes_room(tiny_chat):
    gateway = gateway_for(tiny_chat, ["a"] * 4, limits=ServeLimits(max_sessions=2))
    with serving_in_thread(build_app(gateway)) as url:
        client = openai.OpenAI(base_url=f"{url}/s/one/v1", api_key="x", max_retries=0)
        client.chat.completions.create(**HI)
        openai.OpenAI(base_url=f"{url}/s/two/v1", api_key="x").chat.completions.create(**HI)
        third = openai.OpenAI(base_url=f"{url}/s/three/v1", api_key="x", max_retries=0)
        with pytest.raises(openai.RateLimitError) as info:
            third.chat.completions.create(**HI)
        assert "--max-sessions" in info.value.body["message"]
        assert httpx.post(f"{url}/sessions/one/end").status_code == 200
        assert third.chat.completions.create(**HI).choices[0].message.content == "a"


class Held(Replies):
    """Replies that wait for ``release`` (a request in flight)."""

    def __init__(self, chat, texts):
        super().__init__(chat, texts)
        self.release = asyncio.Event()

    async def generate(self, prompt_ids, params, context=None):
        await self.release.wait()
        return await super().generate(prompt_ids, params, context)


def test_an_idle_session_is_ended_and_recorded_but_not_one_with_a_request_under_way(tiny_chat):
    backend = Held(tiny_chat, ["a", "b", "c"])
    gateway = Gateway(backend, tiny_chat, get_parser("hermes"), "tiny",
                      limits=ServeLimits(session_idle_s=0.05))  # fmt: skip
    ended = []
    gateway.on_close = ended.append

    async def run():
        backend.release.set()
        await gateway.complete("idle", HI)
        backend.release.clear()
        busy = asyncio.ensure_future(gateway.complete("busy", HI))
        await asyncio.sleep(0.2)  # both past the idle time; "busy" waits for its reply
        assert gateway.expire_idle(force=True) == 1
        backend.release.set()
        await busy
        with pytest.raises(RequestError) as info:
            await gateway.complete("idle", HI)
        return info.value

    refused = asyncio.run(run())
    assert refused.status == 409 and "idle for over 0.05 s" in str(refused)
    assert [e.id for e in ended] == ["idle"] and ended[0].requests == 1  # recorded, not lost
    assert list(gateway.episodes) == ["busy"]


class Failing(Replies):
    async def generate(self, prompt_ids, params, context=None):
        raise RuntimeError("the model crashed")


def test_a_failed_request_without_a_session_leaves_no_session_open(tiny_chat):
    gateway = Gateway(Failing(tiny_chat, []), tiny_chat, get_parser("hermes"), "tiny")
    with serving_in_thread(build_app(gateway)) as url:
        for body in (HI, {**HI, "stream": True}):
            httpx.post(f"{url}/v1/chat/completions", json=body)
        too_long = {"messages": [{"role": "user", "content": "x " * 5000}]}
        gateway.max_prompt_tokens = 100
        assert httpx.post(f"{url}/v1/chat/completions", json=too_long).status_code == 400
        assert httpx.get(f"{url}/sessions").json() == []
    assert gateway.episodes == {}


def test_a_seed_out_of_range_is_a_400_for_that_request_only(tiny_chat):
    gateway = gateway_for(tiny_chat, ["fine"])
    with serving_in_thread(build_app(gateway)) as url:
        client = openai.OpenAI(base_url=f"{url}/s/e/v1", api_key="x", max_retries=0)
        for seed in (2**64, -(2**63) - 1):
            with pytest.raises(openai.BadRequestError) as info:
                client.chat.completions.create(seed=seed, **HI)
            assert info.value.body["param"] == "seed"
        assert client.chat.completions.create(seed=2**63 - 1, **HI).choices[0].message.content
    checked = gateway.check({**HI, "seed": 2**63 - 1, "n": 3})[1]
    seeds = [gateway.request_args(checked, gateway.open_episode("n3"), i)[0].seed
             for i in range(3)]  # fmt: skip
    assert seeds == [2**63 - 1, -(2**63), -(2**63) + 1]  # each choice's own, still 64-bit


@pytest.fixture(scope="module")
def hf_backend(tiny_model, tiny_chat):
    from agentfly_cli.backends.hf import HFBackend
    from agentfly_cli.settings.rollout import BackendSettings

    return HFBackend(BackendSettings(model=str(tiny_model), device="cpu", batch_wait_ms=50),
                     tiny_chat)  # fmt: skip


def test_a_request_the_hf_batch_cannot_take_fails_alone(hf_backend, tiny_chat):
    prompt = tiny_chat.render_prompt([{"role": "user", "content": "Say something."}], None)

    async def together():
        good = SamplingParams(max_tokens=6, seed=1)
        results = await asyncio.gather(
            hf_backend.generate(prompt, good),
            hf_backend.generate(prompt, SamplingParams(max_tokens=6, seed=2**64)),
            hf_backend.generate([10**9], good),
            hf_backend.generate(prompt, good),
            return_exceptions=True,
        )
        return results

    first, bad_seed, bad_id, last = asyncio.run(together())
    assert isinstance(bad_seed, ValueError) and "seed" in str(bad_seed)
    assert isinstance(bad_id, ValueError) and "vocabulary" in str(bad_id)
    assert len(first.token_ids) == len(last.token_ids) == 6  # the others were answered


def test_a_conversation_over_the_hf_models_context_is_refused(hf_backend, tiny_chat):
    gateway = Gateway(hf_backend, tiny_chat, get_parser("hermes"), "tiny", max_tokens=4)
    limit = hf_backend.max_context
    body = {"messages": [{"role": "user", "content": "word " * (limit + 10)}]}
    with serving_in_thread(build_app(gateway)) as url:
        refused = httpx.post(f"{url}/s/long/v1/chat/completions", json=body)
        assert refused.status_code == 400
        message = refused.json()["error"]["message"]
        assert f"context ({limit} tokens)" in message
        assert int(re.search(r"\((\d+) tokens\) does not fit", message).group(1)) > limit
        streamed = httpx.post(f"{url}/s/long/v1/chat/completions", json={**body, "stream": True})
        assert streamed.status_code == 400 and "does not fit" in streamed.json()["error"]["message"]
        assert gateway.episodes["long"].segments == [] and gateway.sampled_tokens == 0


class SlowToRender:
    """The tiny chat template, but rendering a message that holds ``BIG`` waits for
    ``release`` (as a huge message takes seconds to render and tokenize)."""

    def __init__(self, chat):
        self.chat, self.release, self.started = chat, threading.Event(), threading.Event()

    def __getattr__(self, name):
        return getattr(self.chat, name)

    def render_prompt(self, messages, tools=None):
        if any("BIG" in str(m.get("content")) for m in messages):
            self.started.set()
            assert self.release.wait(30)
        return self.chat.render_prompt(messages, tools)


def test_another_clients_request_is_answered_while_a_huge_message_renders(tiny_chat):
    slow = SlowToRender(tiny_chat)
    gateway = Gateway(Replies(tiny_chat, ["small", "big"]), slow, get_parser("hermes"), "tiny")
    answered = {}
    with serving_in_thread(build_app(gateway)) as url:

        def big():
            body = {"messages": [{"role": "user", "content": "BIG " * 250_000}]}  # 1 MB
            answered["big"] = httpx.post(f"{url}/s/big/v1/chat/completions", json=body,
                                         timeout=60).status_code  # fmt: skip

        worker = threading.Thread(target=big)
        worker.start()
        try:
            assert slow.started.wait(30)
            small = httpx.post(f"{url}/s/small/v1/chat/completions", json=HI, timeout=10)
            answered["small"] = small.json()["choices"][0]["message"]["content"]
        finally:
            slow.release.set()
            worker.join(60)
    assert answered == {"small": "small", "big": 200}


def test_a_long_text_is_tokenized_without_holding_the_gil(tiny_chat):
    text = "word " * 200_000  # 1 MB
    gaps, done = [], threading.Event()

    def tick():
        while not done.is_set():
            start = time.perf_counter()
            time.sleep(0.005)
            gaps.append(time.perf_counter() - start)

    ticker = threading.Thread(target=tick)
    ticker.start()
    try:
        start = time.perf_counter()
        ids = tiny_chat.encode_text(text)
        took = time.perf_counter() - start
    finally:
        done.set()
        ticker.join()
    plain = tiny_chat.tokenizer.backend_tokenizer.encode(text, add_special_tokens=False).ids
    assert ids == plain and len(ids) >= 200_000  # the same ids as the plain encode
    assert max(gaps) < max(0.5 * took, 0.05), (max(gaps), took)


def test_a_deeply_nested_body_is_an_openai_shaped_400(tiny_chat):
    gateway = gateway_for(tiny_chat)
    with serving_in_thread(build_app(gateway)) as url:
        deep = b'{"messages": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"
        reply = httpx.post(f"{url}/v1/chat/completions", content=deep,
                           headers={"Content-Type": "application/json"})  # fmt: skip
        assert reply.status_code == 400 and "nested" in reply.json()["error"]["message"]


def test_every_bound_is_documented_with_its_default():
    from dataclasses import fields

    text = DOCS.read_text()
    defaults = ServeLimits()
    flags = {"max_body_bytes": "--max-body-bytes", "max_stops": "--max-stops",
             "max_stop_chars": "--max-stop-chars", "stop_cache_size": "--stop-cache",
             "max_sessions": "--max-sessions", "session_idle_s": "--session-idle-s",
             "ended_kept": "--ended-kept"}  # fmt: skip
    assert set(flags) == {f.name for f in fields(ServeLimits)}
    for name, flag in flags.items():
        value = getattr(defaults, name)
        shown = f"{value:g}" if isinstance(value, float) else str(value)
        row = next((line for line in text.splitlines() if line.startswith(f"| `{flag}`")), "")
        assert shown in row.replace(",", ""), (flag, row)


def test_an_integer_too_large_for_a_float_is_a_400_not_a_500(tiny_chat):
    gateway = gateway_for(tiny_chat, ["ok"])
    huge = "1" + "0" * 400  # JSON reads it as an int that no float holds
    with serving_in_thread(build_app(gateway)) as url:
        headers = {"Content-Type": "application/json"}
        for field in ("temperature", "top_p"):
            for stream in ("false", "true"):
                body = (f'{{"messages": [{{"role": "user", "content": "hi"}}], '
                        f'"{field}": {huge}, "stream": {stream}}}')  # fmt: skip
                reply = httpx.post(f"{url}/s/e/v1/chat/completions", content=body, headers=headers)
                assert reply.status_code == 400, (field, stream, reply.text)
                assert reply.json()["error"]["param"] == field
        assert httpx.post(f"{url}/s/e/v1/chat/completions", json=HI).status_code == 200
        ended = httpx.post(f"{url}/sessions/e/end", content=f'{{"reward": {huge}}}',
                           headers=headers)  # fmt: skip
        assert ended.status_code == 400, ended.text
        assert ended.json()["error"]["param"] == "reward"
        assert list(gateway.episodes) == ["e"]  # still open: the bad end changed nothing


def test_the_hf_backend_takes_a_model_without_get_input_embeddings(tiny_model, tiny_chat):
    """A remote-code model whose ``get_input_embeddings`` is not implemented still serves
    (its prompt ids are then not checked against the vocabulary)."""
    import transformers

    from agentfly_cli.backends.hf import HFBackend
    from agentfly_cli.settings.rollout import BackendSettings

    model = transformers.AutoModelForCausalLM.from_pretrained(str(tiny_model))

    def not_implemented():
        raise NotImplementedError("`get_input_embeddings` not auto-handled; please override")

    model.get_input_embeddings = not_implemented
    backend = HFBackend(BackendSettings(model="in-memory", device="cpu"), tiny_chat, model=model)
    assert backend.vocab_size is None
    prompt = tiny_chat.render_prompt([{"role": "user", "content": "Say something."}], None)

    async def one():
        try:
            return await backend.generate(prompt, SamplingParams(max_tokens=3, seed=1))
        finally:
            await backend.close()

    assert len(asyncio.run(one()).token_ids) == 3


def test_ended_session_ids_are_remembered_up_to_ended_kept_and_the_oldest_forgotten():
    from agentfly_cli.serve.errors import SessionEnded
    from agentfly_cli.serve.sessions import Sessions

    sessions = Sessions(ServeLimits(ended_kept=2))
    for name in ("first", "second", "third"):
        sessions.get(name)
        assert sessions.close(name) is not None
    for name in ("second", "third"):  # remembered: a late request is refused
        with pytest.raises(SessionEnded):
            sessions.get(name)
    assert sessions.get("first") is not None  # forgotten: it may open again
    with pytest.raises(ValueError, match="ended_kept"):
        ServeLimits(ended_kept=0)
