"""The gateway over HTTP with the official ``openai`` SDK: a tool-using agent loop through a
session URL, streaming, errors in OpenAI's format, and the tiny model's real sampling captured
token-exactly."""

from __future__ import annotations

import json

import httpx
import pytest

from agentfly_cli.chat.parsers import get_parser
from agentfly_cli.chat.templates import ChatTemplate
from agentfly_cli.serve.app import build_app
from agentfly_cli.serve.gateway import Gateway
from agentfly_cli.serve.server import serving_in_thread
from tests.serve.test_serve_capture import TOOLS, Replies, call

openai = pytest.importorskip("openai", reason="the openai SDK is a dev dependency")


@pytest.fixture(scope="module")
def tiny_chat(tiny_model):
    return ChatTemplate.load(str(tiny_model))


def calculator_agent(client, question: str) -> str:
    """An ordinary OpenAI-SDK agent: call tools until the model answers in text."""
    messages = [{"role": "user", "content": question}]
    for _ in range(4):
        reply = client.chat.completions.create(model="m", messages=messages, tools=TOOLS)
        message = reply.choices[0].message
        messages.append(message.model_dump(exclude_none=True))
        if not message.tool_calls:
            return message.content
        for tool_call in message.tool_calls:
            expression = json.loads(tool_call.function.arguments)["expression"]
            result = str(eval(expression, {"__builtins__": {}}))  # test input only
            messages.append({"role": "tool", "tool_call_id": tool_call.id, "content": result})
    raise AssertionError("the agent never answered")


def test_an_openai_sdk_agent_is_captured_as_one_token_exact_segment(tiny_chat):
    backend = Replies(tiny_chat, [call("calculator", expression="17 * 23"), "It is 391."])
    gateway = Gateway(backend, tiny_chat, get_parser("hermes"), "tiny")
    ended = []
    with serving_in_thread(build_app(gateway, on_episode=ended.append)) as url:
        client = openai.OpenAI(base_url=f"{url}/s/episode-7/v1", api_key="none")
        assert [m.id for m in client.models.list().data] == ["tiny"]
        assert calculator_agent(client, "What is 17 * 23?") == "It is 391."
        listed = httpx.get(f"{url}/sessions").json()
        assert listed == [{"session": "episode-7", "requests": 2, "segments": 1}]
        done = httpx.post(f"{url}/sessions/episode-7/end", json={"reward": 1.0}).json()
    [trajectory] = ended[0].trajectories()
    trajectory.check()
    assert trajectory.reward == 1.0 and done["reward"] == 1.0
    assert done["trajectories"][0]["ids"] == trajectory.ids
    first, second = backend.prompts
    assert trajectory.ids[: len(second)] == second and second[: len(first)] == first


def test_streaming_and_errors_follow_the_openai_format(tiny_chat):
    backend = Replies(tiny_chat, [call("calculator", expression="1 + 1")])
    gateway = Gateway(backend, tiny_chat, get_parser("hermes"), "tiny")
    with serving_in_thread(build_app(gateway)) as url:
        client = openai.OpenAI(base_url=f"{url}/v1", api_key="none")
        chunks = list(
            client.chat.completions.create(
                model="m", messages=[{"role": "user", "content": "1 + 1?"}], tools=TOOLS,
                stream=True,
            )
        )  # fmt: skip
        calls = [c for chunk in chunks for c in (chunk.choices[0].delta.tool_calls or [])]
        assert [(c.function.name, json.loads(c.function.arguments)) for c in calls] == [
            ("calculator", {"expression": "1 + 1"})
        ]
        assert chunks[-1].choices[0].finish_reason == "tool_calls"
        with pytest.raises(openai.BadRequestError) as info:
            client.chat.completions.create(model="m", messages=[], n=1)
        assert info.value.body["param"] == "messages"
        bad = httpx.post(f"{url}/v1/chat/completions", content=b"{not json")
        assert bad.status_code == 400 and "not JSON" in bad.json()["error"]["message"]
        missing = httpx.post(f"{url}/sessions/nobody/end")
        assert missing.status_code == 404


def test_the_tiny_models_own_samples_are_captured_token_exactly(tiny_model, tiny_chat):
    from agentfly_cli.backends.hf import HFBackend
    from agentfly_cli.settings.rollout import BackendSettings

    backend = HFBackend(BackendSettings(model=str(tiny_model), device="cpu"), tiny_chat)
    gateway = Gateway(backend, tiny_chat, get_parser("hermes"), "tiny", max_tokens=12)
    with serving_in_thread(build_app(gateway)) as url:
        client = openai.OpenAI(base_url=f"{url}/s/a/v1", api_key="none")
        messages = [{"role": "user", "content": "Say something."}]
        for turn in range(3):
            reply = client.chat.completions.create(model="m", messages=messages, seed=turn,
                                                   temperature=1.0)  # fmt: skip
            messages.append(reply.choices[0].message.model_dump(exclude_none=True))
            messages.append({"role": "user", "content": f"And then {turn}?"})
        episode = gateway.episodes["a"]
    for segment in episode.segments:
        segment.trajectory.check()
        sampled = [t for t in segment.trajectory.turns if t.sampled_ids is not None]
        assert all(t.policy_version == 0 for t in sampled)
        assert all(
            lp is not None for t in sampled for lp in segment.trajectory.logprobs[t.start : t.end]
        )
    [segment] = episode.segments  # each request extended the one before
    assert segment.trajectory.num_turns == 3


def test_agentfly_serve_runs_records_and_refuses_bad_input(tiny_model, tmp_path):
    """The command as a user runs it: a free port, the openai SDK against a session URL,
    the episode ended with a reward and written to --record; bad flags are one line, exit 2."""
    import os
    import re
    import signal
    import subprocess
    import sys
    import time

    from agentfly_cli.trajectory import Trajectory, TrajectoryWriter, read_trajectories

    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    record = tmp_path / "episodes.jsonl"
    with TrajectoryWriter(record) as earlier:  # a run's record from before: appended to, kept
        earlier.write(Trajectory(meta={"episode": "yesterday"}))
    command = [sys.executable, "-m", "agentfly_cli", "serve", "--model", str(tiny_model),
               "--port", "0", "--max-tokens", "8", "--record", str(record)]  # fmt: skip
    server = subprocess.Popen(command, stderr=subprocess.PIPE, text=True, env=env)
    try:
        seen = []
        while not (
            found := re.search(r"at (http://127\.0\.0\.1:\d+)/v1", seen[-1] if seen else "")
        ):
            seen.append(server.stderr.readline())
            assert seen[-1], f"the server ended before serving: {seen}"
        url = found.group(1)
        client = openai.OpenAI(base_url=f"{url}/s/run-1/v1", api_key="none")
        deadline = time.monotonic() + 60
        while True:
            try:
                reply = client.chat.completions.create(
                    model="m", messages=[{"role": "user", "content": "hi"}]
                )
                break
            except openai.APIConnectionError:
                assert time.monotonic() < deadline, "the server never answered"
                time.sleep(0.2)
        assert reply.usage.completion_tokens <= 8
        plain = openai.OpenAI(base_url=f"{url}/v1", api_key="none")  # no session: one request
        plain.chat.completions.create(model="m", messages=[{"role": "user", "content": "yo"}])
        ended = httpx.post(f"{url}/sessions/run-1/end", json={"reward": 0.25}).json()
        assert ended["reward"] == 0.25
        taken = httpx.post(f"{url}/v1/chat/completions", json={"messages": [], "stream": True})
        assert taken.status_code == 400
        again = subprocess.run([*command[:6], "--port", url.rsplit(":", 1)[1]],
                               capture_output=True, text=True, env=env, timeout=120)  # fmt: skip
        assert again.returncode == 2 and "cannot listen" in again.stderr
        assert len(again.stderr.strip().splitlines()) == 1, again.stderr
    finally:
        server.send_signal(signal.SIGINT)
        server.wait(30)
    kept, anonymous, trajectory = read_trajectories(record)  # written as each episode ended
    assert kept.meta["episode"] == "yesterday"
    trajectory.check()
    assert trajectory.reward == 0.25 and trajectory.meta["episode"] == "run-1"
    assert anonymous.meta["episode"].startswith("anon-") and anonymous.num_turns == 1
    bad_port = subprocess.run([*command[:6], "--port", "70000"], capture_output=True, text=True,
                              env=env, timeout=120)  # fmt: skip
    assert bad_port.returncode == 2 and "--port must be" in bad_port.stderr
