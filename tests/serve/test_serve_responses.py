"""``POST /v1/responses`` over HTTP with the official ``openai`` SDK (``client.responses``):
a tool-using agent loop, plain and streamed, by full input and by ``previous_response_id``,
recorded token-exactly as chat completions are; the errors in the Responses shape; the same
guarantees as chat completions (API key, body bound, isolation, one bad request harms no
other); the Agents SDK in its default (Responses) mode; and ``agentfly serve --model tiny``
sampling for real."""

from __future__ import annotations

import asyncio
import json
import threading

import httpx
import pytest

from agentfly_cli.backends.base import Generation
from agentfly_cli.chat.parsers import get_parser
from agentfly_cli.chat.templates import ChatTemplate
from agentfly_cli.serve.app import build_app
from agentfly_cli.serve.auth import Access
from agentfly_cli.serve.gateway import Gateway
from agentfly_cli.serve.limits import ServeLimits
from agentfly_cli.serve.server import serving_in_thread
from tests.serve.test_serve_capture import Replies, call

openai = pytest.importorskip("openai", reason="the openai SDK is a dev dependency")
TOOL = {"type": "function", "name": "calculator", "description": "Evaluate an expression.",
        "parameters": {"type": "object", "properties": {"expression": {"type": "string"}},
                       "required": ["expression"]}}  # fmt: skip
KEY = "k-" + "r3sp" * 6


@pytest.fixture(scope="module")
def tiny_chat(tiny_model):
    return ChatTemplate.load(str(tiny_model))


def served(chat, texts, access=None, limits=None, **options):
    backend = Replies(chat, list(texts))
    gateway = Gateway(backend, chat, get_parser("hermes"), "tiny", limits=limits, **options)
    ended: list = []
    app = build_app(gateway, on_episode=ended.append, access=access)
    return backend, gateway, ended, serving_in_thread(app)


def evaluate(arguments: str) -> str:
    return str(eval(json.loads(arguments)["expression"], {"__builtins__": {}}))  # test input only


def one_segment(gateway, session, backend):
    """The session's one segment: checked token-exact, each prompt extending the one before."""
    episode = gateway.close_episode(session, reward=1.0)
    [trajectory] = episode.trajectories()
    trajectory.check()
    first, second = backend.prompts
    assert second[: len(first)] == first and trajectory.ids[: len(second)] == second
    return trajectory


def test_an_sdk_agent_sending_its_whole_input_is_one_token_exact_segment(tiny_chat):
    backend, gateway, _, serving = served(
        tiny_chat, [call("calculator", expression="17 * 23"), "It is 391."]
    )
    with serving as url:
        client = openai.OpenAI(base_url=f"{url}/s/r-1/v1", api_key="none")
        items: list = [{"role": "user", "content": "What is 17 * 23?"}]
        first = client.responses.create(model="tiny", instructions="Use the calculator.",
                                        input=items, tools=[TOOL], store=False)  # fmt: skip
        assert first.id.startswith("resp_") and first.status == "completed"
        [function_call] = [item for item in first.output if item.type == "function_call"]
        assert function_call.name == "calculator" and function_call.call_id
        items += [item.model_dump(exclude_none=True) for item in first.output]
        items.append({"type": "function_call_output", "call_id": function_call.call_id,
                      "output": evaluate(function_call.arguments)})  # fmt: skip
        second = client.responses.create(model="tiny", instructions="Use the calculator.",
                                         input=items, tools=[TOOL], store=False)  # fmt: skip
        assert second.output_text == "It is 391."
        assert second.usage.input_tokens == len(backend.prompts[1])
        unknown = client.responses.create  # store: false kept nothing to continue from
        with pytest.raises(openai.BadRequestError) as info:
            unknown(model="tiny", input="more", previous_response_id=second.id)
        assert info.value.body["param"] == "previous_response_id"
    trajectory = one_segment(gateway, "r-1", backend)
    assert "391" in tiny_chat.decode(trajectory.ids[len(backend.prompts[0]) :])
    assert "Use the calculator." in tiny_chat.decode(backend.prompts[0])


def test_previous_response_id_continues_a_streamed_conversation(tiny_chat):
    backend, gateway, _, serving = served(
        tiny_chat, [call("calculator", expression="2 + 3"), "Five."]
    )
    with serving as url:
        client = openai.OpenAI(base_url=f"{url}/s/r-2/v1", api_key="none")
        events = list(client.responses.create(model="tiny", input="2 + 3?", tools=[TOOL],
                                              instructions="Calculate.", stream=True))  # fmt: skip
        kinds = [event.type for event in events]
        assert kinds[:2] == ["response.created", "response.in_progress"]
        assert kinds[-1] == "response.completed"
        assert "response.function_call_arguments.done" in kinds
        assert [event.sequence_number for event in events] == list(range(len(events)))
        done = events[-1].response
        [function_call] = done.output
        assert json.loads(function_call.arguments) == {"expression": "2 + 3"}
        assert done.usage.input_tokens == len(backend.prompts[0])
        follow = client.responses.create(
            model="tiny", previous_response_id=done.id, instructions="Calculate.", tools=[TOOL],
            input=[{"type": "function_call_output", "call_id": function_call.call_id,
                    "output": evaluate(function_call.arguments)}],
            stream=True,
        )  # fmt: skip
        text = "".join(e.delta for e in follow if e.type == "response.output_text.delta")
        assert text == "Five."
        other = openai.OpenAI(base_url=f"{url}/s/r-other/v1", api_key="none", max_retries=0)
        with pytest.raises(openai.BadRequestError) as info:  # another session cannot use it
            other.responses.create(model="tiny", input="x", previous_response_id=done.id)
        assert info.value.body["param"] == "previous_response_id"
        assert "no stored response" in info.value.body["message"]
    trajectory = one_segment(gateway, "r-2", backend)
    assert "5" in tiny_chat.decode(trajectory.ids[len(backend.prompts[0]) :])


def test_errors_come_in_the_responses_shape_with_the_context_length_code(tiny_chat):
    backend, gateway, _, serving = served(tiny_chat, [], max_prompt_tokens=40)
    with serving as url:
        client = openai.OpenAI(base_url=f"{url}/v1", api_key="none", max_retries=0)
        for stream in (False, True):
            with pytest.raises(openai.BadRequestError) as info:
                client.responses.create(model="tiny", input="word " * 100, stream=stream)
            body = info.value.body
            assert body["code"] == "context_length_exceeded" and body["param"] == "input"
            assert body["type"] == "invalid_request_error" and "40 tokens" in body["message"]
        bad = httpx.post(f"{url}/v1/responses", json={"input": [{"type": "computer_call"}]})
        assert bad.status_code == 400
        assert bad.json()["error"]["param"] == "input" and "computer_call" in bad.text
        tokens = httpx.post(f"{url}/v1/responses", json={"input": "x", "max_output_tokens": 0})
        assert tokens.json()["error"]["param"] == "max_output_tokens"
        not_json = httpx.post(f"{url}/v1/responses", content=b"{nope",
                              headers={"Content-Type": "application/json"})  # fmt: skip
        assert not_json.status_code == 400 and "not JSON" in not_json.json()["error"]["message"]
        chat = httpx.post(f"{url}/v1/chat/completions", json={
            "messages": [{"role": "user", "content": "word " * 100}]})  # fmt: skip
        assert chat.json()["error"]["code"] == "context_length_exceeded"
    assert backend.prompts == [] and gateway.episodes == {}


def test_the_route_keeps_the_gateways_guarantees(tiny_chat):
    limits = ServeLimits(max_body_bytes=4096)
    backend, gateway, _, serving = served(tiny_chat, ["one", "two"], Access(api_key=KEY), limits)
    with serving as url:
        wrong = openai.OpenAI(base_url=f"{url}/s/g-1/v1", api_key="nope", max_retries=0)
        with pytest.raises(openai.AuthenticationError) as info:
            wrong.responses.create(model="tiny", input="hi")
        assert info.value.body["code"] == "invalid_api_key"
        headers = {"Authorization": f"Bearer {KEY}"}
        big = httpx.post(f"{url}/s/g-1/v1/responses", json={"input": "x" * 5000},
                         headers=headers)  # fmt: skip
        assert big.status_code == 413 and "--max-body-bytes" in big.json()["error"]["message"]
        evil = httpx.post(f"{url}/s/g-1/v1/responses", json={"input": "hi"},
                          headers={**headers, "Origin": "http://attacker.example"})  # fmt: skip
        assert evil.status_code == 403
        assert httpx.post(f"{url}/s/%FF/v1/responses", json={"input": "hi"},
                          headers=headers).json()["error"]["param"] == "session"  # fmt: skip
        assert backend.prompts == [] and gateway.episodes == {}
        right = openai.OpenAI(base_url=f"{url}/s/g-1/v1", api_key=KEY)
        assert right.responses.create(model="tiny", input="hi").output_text == "one"
        other = openai.OpenAI(base_url=f"{url}/s/g-2/v1", api_key=KEY)
        assert other.responses.create(model="tiny", input="hi").output_text == "two"
        for session in ("g-1", "g-2"):  # each session its own one request
            assert len(gateway.episodes[session].segments) == 1


class Slow(Replies):
    """Replies, each request held until ``release`` is set (a request under way)."""

    def __init__(self, chat, texts):
        super().__init__(chat, texts)
        self.started, self.release = threading.Event(), threading.Event()

    async def generate(self, prompt_ids, params, context=None):
        self.started.set()
        while not self.release.is_set():
            await asyncio.sleep(0.01)
        return await super().generate(prompt_ids, params, context)


def test_a_malformed_request_does_not_disturb_a_good_one_in_another_session(tiny_chat):
    backend = Slow(tiny_chat, ["fine"])
    gateway = Gateway(backend, tiny_chat, get_parser("hermes"), "tiny")
    results: dict = {}
    with serving_in_thread(build_app(gateway)) as url:
        client = openai.OpenAI(base_url=f"{url}/s/good/v1", api_key="none")

        def good():
            results["good"] = client.responses.create(model="tiny", input="hi").output_text

        worker = threading.Thread(target=good)
        worker.start()
        assert backend.started.wait(10)
        for body in ({"input": [{"type": "function_call"}]}, {"input": {"a": 1}}, [1, 2],
                     {"input": "x", "previous_response_id": "resp_forged"}):  # fmt: skip
            bad = httpx.post(f"{url}/s/bad/v1/responses", json=body)
            assert bad.status_code == 400, body
        backend.release.set()
        worker.join(10)
    assert results == {"good": "fine"} and len(backend.prompts) == 1
    assert list(gateway.episodes) == ["good"]  # the bad session opened nothing
    gateway.episodes["good"].segments[0].trajectory.check()


@pytest.mark.parametrize("streamed", [False, True])
def test_an_agents_sdk_agent_in_its_default_responses_mode(tiny_chat, streamed):
    """The Agents SDK's default model (the Responses API) runs its own loop and function
    tool; the reply's text and call (a message then a function_call item, echoed back as
    items) extend one token-exact segment."""
    agents = pytest.importorskip("agents", reason="the OpenAI Agents SDK is a dev dependency")
    first = "Let me compute. " + call("calculator", expression="17 * 23")
    backend, gateway, _, serving = served(tiny_chat, [first, "It is 391."])
    seen: list[str] = []

    @agents.function_tool
    def calculator(expression: str) -> str:
        """Evaluate an arithmetic expression."""
        seen.append(expression)
        return str(eval(expression, {"__builtins__": {}}))  # test input only

    agents.set_tracing_disabled(True)
    paths: list[str] = []

    async def sent(request):
        paths.append(request.url.path)

    async def run(config):
        if not streamed:
            return await agents.Runner.run(agent, "What is 17 * 23?", run_config=config)
        result = agents.Runner.run_streamed(agent, "What is 17 * 23?", run_config=config)
        async for _ in result.stream_events():
            pass
        return result

    with serving as url:
        http = httpx.AsyncClient(event_hooks={"request": [sent]})
        client = openai.AsyncOpenAI(base_url=f"{url}/s/sdk-r/v1", api_key="none", http_client=http)
        provider = agents.OpenAIProvider(openai_client=client)  # its default: the Responses API
        agent = agents.Agent(name="calc", instructions="Use the calculator.", tools=[calculator],
                             model="tiny")  # fmt: skip
        result = asyncio.run(run(agents.RunConfig(model_provider=provider)))
    assert result.final_output == "It is 391." and seen == ["17 * 23"]
    assert paths == ["/s/sdk-r/v1/responses"] * 2
    trajectory = one_segment(gateway, "sdk-r", backend)
    assert trajectory.num_turns == 2


def test_concurrent_sessions_continuing_by_previous_response_id_stay_apart(tiny_chat):
    """Twenty sessions at once, each continuing its own stored response: every reply goes to
    its own session, and each session is one segment holding only its own words."""

    class Echo(Replies):
        async def generate(self, prompt_ids, params, context=None):
            said = self.chat.decode(prompt_ids).rsplit("word-", 1)[1].split()[0]
            await asyncio.sleep(0.01)  # the others' requests meanwhile
            ids = self.chat.encode_response(f"echo-{said}")
            return Generation(ids, [-0.5] * len(ids), "stop")

    backend = Echo(tiny_chat, [])
    gateway = Gateway(backend, tiny_chat, get_parser("hermes"), "tiny")
    sessions = [f"c-{i}" for i in range(20)]

    async def converse(url, session):
        client = openai.AsyncOpenAI(base_url=f"{url}/s/{session}/v1", api_key="none")
        first = await client.responses.create(model="tiny", input=f"word-{session}a")
        second = await client.responses.create(model="tiny", input=f"word-{session}b",
                                               previous_response_id=first.id)  # fmt: skip
        return first.output_text, second.output_text

    async def everyone(url):
        return await asyncio.gather(*(converse(url, s) for s in sessions))

    with serving_in_thread(build_app(gateway)) as url:
        replies = asyncio.run(everyone(url))
    assert replies == [(f"echo-{s}a", f"echo-{s}b") for s in sessions]
    for session in sessions:
        [segment] = gateway.episodes[session].segments
        segment.trajectory.check()
        text = tiny_chat.decode(segment.trajectory.ids)
        assert f"word-{session}a" in text and f"echo-{session}b" in text
        assert all(f"word-{other}a" not in text for other in sessions if other != session)


def test_agentfly_serve_answers_the_responses_api_with_the_tiny_models_samples(
    tiny_model, tmp_path
):
    """The command as a user runs it: the tiny model samples for real (nonsense, but every
    token recorded), plain, streamed and continued by previous_response_id, in one session."""
    import os
    import re
    import signal
    import subprocess
    import sys
    import time

    from agentfly_cli.trajectory import read_trajectories

    record = tmp_path / "episodes.jsonl"
    command = [sys.executable, "-m", "agentfly_cli", "serve", "--model", str(tiny_model),
               "--port", "0", "--max-tokens", "8", "--record", str(record)]  # fmt: skip
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    server = subprocess.Popen(command, stderr=subprocess.PIPE, text=True, env=env)
    try:
        line = ""
        while not (found := re.search(r"at (http://127\.0\.0\.1:\d+)/v1", line)):
            line = server.stderr.readline()
            assert line, "the server ended before serving"
        url = found.group(1)
        client = openai.OpenAI(base_url=f"{url}/s/tiny-r/v1", api_key="none")
        deadline = time.monotonic() + 60
        while True:
            try:
                first = client.responses.create(model="tiny", input="hi", tools=[TOOL])
                break
            except openai.APIConnectionError:
                assert time.monotonic() < deadline, "the server never answered"
                time.sleep(0.2)
        assert first.usage.output_tokens <= 8 and first.output
        events = list(client.responses.create(model="tiny", input="and?", stream=True,
                                              previous_response_id=first.id))  # fmt: skip
        assert events[-1].type in ("response.completed", "response.incomplete")
        done = events[-1].response
        assert done.usage.output_tokens <= 8
        ended = httpx.post(f"{url}/sessions/tiny-r/end", json={"reward": 0.5}).json()
        assert ended["reward"] == 0.5 and ended["trajectories"]
    finally:
        server.send_signal(signal.SIGINT)
        server.wait(30)
    trajectories = read_trajectories(record)
    for trajectory in trajectories:
        trajectory.check()
        assert trajectory.meta["episode"] == "tiny-r" and trajectory.reward == 0.5
    assert sum(t.num_turns for t in trajectories) == 2  # both requests, each reply recorded


def test_chat_streams_end_with_the_usage_when_asked_as_responses_streams_need(tiny_chat):
    backend, gateway, _, serving = served(tiny_chat, ["one", "two"])
    with serving as url:
        client = openai.OpenAI(base_url=f"{url}/v1", api_key="none")
        hi = [{"role": "user", "content": "hi"}]
        chunks = list(
            client.chat.completions.create(
                model="tiny", messages=hi, stream=True, stream_options={"include_usage": True}
            )
        )
        assert chunks[-1].choices == [] and chunks[-1].usage.prompt_tokens == len(
            backend.prompts[0]
        )
        assert chunks[-1].usage.completion_tokens == len(tiny_chat.encode_response("one"))
        plain = list(client.chat.completions.create(model="tiny", messages=hi, stream=True))
        assert all(chunk.usage is None for chunk in plain)
        bad = httpx.post(
            f"{url}/v1/chat/completions", json={"messages": hi, "stream": True, "stream_options": 1}
        )
        assert bad.status_code == 400 and bad.json()["error"]["param"] == "stream_options"


def test_a_streamed_response_dribbles_its_text_and_a_client_that_leaves_records_nothing(
    tiny_chat,
):
    from agentfly_cli.serve.dialects.responses import ResponsesDialect
    from tests.serve.test_serve_streaming import Dribble

    backend = Dribble(tiny_chat, ["Some words here.", "word " * 50, "word " * 50])
    gateway = Gateway(backend, tiny_chat, get_parser("hermes"), "tiny")
    dialect = ResponsesDialect(gateway)
    body = {"input": "Talk.", "stream": True}

    def events(session):
        chat = dialect.to_chat(session, body)
        return dialect.events(session, body, chat, gateway.stream(session, chat))

    async def whole():
        return [json.loads(e.split("data: ", 1)[1]) async for e in events("s")]

    streamed = asyncio.run(whole())
    deltas = [e["delta"] for e in streamed if e["type"] == "response.output_text.delta"]
    assert len(deltas) > 3 and "".join(deltas) == "Some words here."
    assert streamed[-1]["response"]["output"][0]["content"][0]["text"] == "Some words here."

    async def leave_early():
        stream = events("s")
        seen = [await stream.__anext__() for _ in range(5)]
        await stream.aclose()
        await asyncio.sleep(0.2)  # time enough to sample the rest, were it not stopped
        return seen

    assert len(asyncio.run(leave_early())) == 5 and backend.cancelled == 1
    assert len(gateway.episodes["s"].segments) == 1  # the first request's only
    backend.fail_after = 3

    async def failing():
        return [json.loads(e.split("data: ", 1)[1]) async for e in events("s")]

    failed = asyncio.run(failing())
    assert failed[-1]["type"] == "response.failed"
    assert len(gateway.episodes["s"].segments) == 1 and len(dialect.store) == 1
