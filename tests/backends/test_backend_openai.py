"""The openai backend against an in-process fake server: exact ids, text fallback, errors."""

from __future__ import annotations

import asyncio
import json
import logging
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

pytest.importorskip("httpx")

from agentfly_cli.backends.base import SamplingParams
from agentfly_cli.backends.openai import OpenAIBackend, ServerError  # noqa: E402
from agentfly_cli.errors import UserError  # noqa: E402
from agentfly_cli.settings.rollout import BackendSettings

VLLM_EXTRAS = {
    "return_tokens_as_token_ids",
    "return_token_ids",
    "stop_token_ids",
    "skip_special_tokens",
    "top_k",
}


class FakeServer(ThreadingHTTPServer):
    """Answers /v1/completions like vLLM (mode "vllm"), like a text-only server ("plain"),
    like a server that takes token prompts but returns text tokens ("textids"), or fails."""

    daemon_threads = True
    request_queue_size = 128

    def __init__(self):
        super().__init__(("127.0.0.1", 0), Handler)
        self.mode = "vllm"
        self.requests: list[dict] = []
        self.delay = 0.0
        self.api_key: str | None = None

    def handle_error(self, request, client_address):  # a client that timed out hung up
        pass

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/v1"


class Handler(BaseHTTPRequestHandler):
    server: FakeServer
    protocol_version = "HTTP/1.1"  # keep-alive, as real servers do

    def log_message(self, *args):  # keep test output quiet
        pass

    def _reply(self, status: int, payload: dict) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        if self.path == "/v1/models":
            self._reply(200, {"object": "list", "data": [{"id": "served-by-fake"}]})
        else:
            self._reply(404, {"error": {"message": "not found"}})

    def do_POST(self):
        srv = self.server
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        srv.requests.append({"body": body, "auth": self.headers.get("Authorization")})
        if srv.delay:
            time.sleep(srv.delay)
        if srv.api_key and self.headers.get("Authorization") != f"Bearer {srv.api_key}":
            return self._reply(401, {"error": {"message": "Invalid API key"}})
        if self.path != "/v1/completions":
            return self._reply(404, {"error": {"message": f"no route {self.path}"}})
        if srv.mode == "broken":
            return self._reply(500, {"error": {"message": "CUDA out of memory"}})
        if srv.mode == "plain":
            return self._plain(body)
        prompt = body["prompt"]
        if not isinstance(prompt, list):
            return self._reply(400, {"error": {"message": "fake vllm wants token ids"}})
        # Deterministic "model": count up from the last prompt id; stop ids end the turn.
        ids, reason = [], "length"
        for step in range(body["max_tokens"]):
            token = prompt[-1] + 1 + step
            ids.append(token)
            if token in body.get("stop_token_ids", []):
                reason = "stop"
                break
        if srv.mode == "textids":
            tokens = [f"tok{t}" for t in ids]
        else:
            tokens = [f"token_id:{t}" for t in ids]
        logprobs = {"tokens": tokens, "token_logprobs": [-0.25 * (i + 1) for i in range(len(ids))]}
        choice = {
            "index": 0,
            "text": "".join(f"<{t}>" for t in ids),
            "logprobs": logprobs,
            "finish_reason": reason,
        }
        self._reply(200, {"id": "cmpl-1", "object": "text_completion", "choices": [choice]})

    def _plain(self, body):
        extras = VLLM_EXTRAS & set(body)
        if extras or not isinstance(body["prompt"], str):
            return self._reply(400, {"error": {"message": f"Unrecognized arguments: {extras}"}})
        choice = {
            "index": 0,
            "text": "The answer is 42. ANSWER: 42",
            "finish_reason": "stop",
            "logprobs": {"tokens": ["The", " answer"], "token_logprobs": [-0.1, -0.2]},
        }
        self._reply(200, {"id": "cmpl-2", "object": "text_completion", "choices": [choice]})


@pytest.fixture
def server():
    srv = FakeServer()
    thread = threading.Thread(target=srv.serve_forever, args=(0.02,), daemon=True)
    thread.start()
    yield srv
    srv.shutdown()
    srv.server_close()


@pytest.fixture(scope="module")
def tokenizer(tiny_model):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tiny_model)


def make(server, tokenizer=None, **overrides):
    config = BackendSettings(name="openai", base_url=server.base_url, served_model="m", **overrides)
    return OpenAIBackend(config, tokenizer)


def generate(backend, prompt, params=SamplingParams(max_tokens=5)):
    async def go():
        async with backend:
            return await backend.generate(prompt, params)

    return asyncio.run(go())


def test_vllm_style_server_gives_exact_ids_and_logprobs(server):
    backend = make(server)
    params = SamplingParams(
        max_tokens=6, temperature=0.5, top_p=0.9, top_k=4, seed=3, stop_token_ids=(14,)
    )
    gen = generate(backend, [10, 11], params)
    assert gen.token_exact and backend.returns_tokens
    assert gen.token_ids == [12, 13, 14] and gen.finish_reason == "stop"  # stop id included
    assert gen.logprobs == [-0.25, -0.5, -0.75]
    body = server.requests[0]["body"]
    assert body["prompt"] == [10, 11] and body["model"] == "m" and body["logprobs"] == 1
    assert body["return_tokens_as_token_ids"] and body["skip_special_tokens"] is False
    assert body["stop_token_ids"] == [14] and body["top_k"] == 4 and body["seed"] == 3
    assert body["temperature"] == 0.5 and body["top_p"] == 0.9 and body["max_tokens"] == 6
    length = generate(make(server), [10], SamplingParams(max_tokens=2))
    assert length.token_ids == [11, 12] and length.finish_reason == "length"


def test_concurrent_requests(server):
    backend = make(server)

    async def go():
        async with backend:
            params = SamplingParams(max_tokens=3)
            return await asyncio.gather(*(backend.generate([i], params) for i in range(32)))

    gens = asyncio.run(go())
    assert [g.token_ids for g in gens] == [[i + 1, i + 2, i + 3] for i in range(32)]


def test_text_only_server_falls_back_and_warns_once(server, tokenizer, caplog):
    server.mode = "plain"
    backend = make(server, tokenizer)
    prompt = tokenizer.encode("What is 12 + 30?")
    im_end = tokenizer.convert_tokens_to_ids("<|im_end|>")
    params = SamplingParams(max_tokens=8, stop_token_ids=(im_end,))

    async def go():
        async with backend:
            return [await backend.generate(prompt, params) for _ in range(2)]

    with caplog.at_level(logging.WARNING, logger="agentfly_cli.backends.openai"):
        first, second = asyncio.run(go())
    assert not first.token_exact and not backend.returns_tokens and not backend.token_prompts
    assert first.text == "The answer is 42. ANSWER: 42" and first.logprobs is None
    assert first.token_ids[:-1] == tokenizer.encode(first.text, add_special_tokens=False)
    assert first.token_ids[-1] == im_end and first.finish_reason == "stop"
    warnings = [r for r in caplog.records if "training needs a backend" in r.getMessage()]
    assert len(warnings) == 1
    bodies = [r["body"] for r in server.requests]
    assert isinstance(bodies[0]["prompt"], list)  # tried tokens first, then text from then on
    assert [b["prompt"] for b in bodies[1:]] == [tokenizer.decode(prompt)] * 2
    assert bodies[1]["stop"] == ["<|im_end|>"] and "stop_token_ids" not in bodies[1]
    assert second.token_ids == first.token_ids


def test_server_without_token_ids_is_re_encoded(server, tokenizer):
    server.mode = "textids"
    backend = make(server, tokenizer)
    gen = generate(backend, [10, 11], SamplingParams(max_tokens=2))
    assert not gen.token_exact and not backend.returns_tokens and backend.token_prompts
    assert gen.text == "<12><13>" and gen.finish_reason == "length"
    assert gen.token_ids == tokenizer.encode("<12><13>", add_special_tokens=False)


def test_text_fallback_without_a_tokenizer_says_what_to_set(server):
    server.mode = "plain"
    with pytest.raises(UserError, match="backend.tokenizer"):
        generate(make(server), [1, 2, 3])


def test_api_key_from_env(server, monkeypatch):
    server.api_key = "sekrit"
    monkeypatch.setenv("MY_KEY", "sekrit")
    gen = generate(make(server, api_key_env="MY_KEY"), [1])
    assert gen.token_ids and server.requests[-1]["auth"] == "Bearer sekrit"
    monkeypatch.delenv("MY_KEY")
    with pytest.raises(ServerError, match=r"HTTP 401: Invalid API key; set .* in \$MY_KEY"):
        generate(make(server, api_key_env="MY_KEY"), [1])
    assert server.requests[-1]["auth"] is None


def test_http_errors_name_the_url_and_status(server):
    server.mode = "broken"
    url = r"http://127\.0\.0\.1:\d+/v1/completions"
    with pytest.raises(ServerError, match=rf"POST {url} -> HTTP 500: CUDA out of memory"):
        generate(make(server), [1])
    server.mode = "vllm"
    config = BackendSettings(base_url=server.base_url.removesuffix("/v1"), served_model="m")
    with pytest.raises(ServerError, match="HTTP 404.*ends in /v1") as info:
        generate(OpenAIBackend(config), [1])
    assert info.value.status == 404


def test_timeout_and_unreachable_server(server):
    server.delay = 0.5
    with pytest.raises(ServerError, match=r"timed out after 0.1s.*backend.request_timeout"):
        generate(make(server, request_timeout=0.1), [1])
    port = server.server_address[1]
    server.shutdown()
    server.server_close()
    config = BackendSettings(base_url=f"http://127.0.0.1:{port}/v1", served_model="m")
    with pytest.raises(ServerError, match="cannot reach .*backend.base_url"):
        generate(OpenAIBackend(config), [1])


def test_served_model_defaults(server, tmp_path):
    folder = tmp_path / "my-model"
    config = BackendSettings(base_url=server.base_url, model=str(folder))
    assert OpenAIBackend(config).served_model == "my-model"
    backend = OpenAIBackend(BackendSettings(base_url=server.base_url))
    generate(backend, [1])
    assert backend.served_model == "served-by-fake"
    assert server.requests[-1]["body"]["model"] == "served-by-fake"


def test_missing_base_url_is_a_user_error():
    with pytest.raises(UserError, match="backend.base_url"):
        OpenAIBackend(BackendSettings(name="openai"))


@pytest.mark.parametrize(("mode", "exact"), [("vllm", True), ("plain", False)])
def test_agentfly_rollout_against_a_server(server, tiny_model, tmp_path, mode, exact):
    """`agentfly rollout --backend openai` end to end; text-only servers are marked inexact."""
    from typer.testing import CliRunner

    from agentfly_cli.cli.app import build_app
    from agentfly_cli.trajectory import read_trajectories

    server.mode = mode
    data = tmp_path / "data.jsonl"
    data.write_text('{"question": "What is 6 * 7?", "answer": "42"}\n')
    out = tmp_path / "out.jsonl"
    arguments = [
        "rollout",
        "calculator",
        "--model",
        str(tiny_model),
        "--backend",
        "openai",
        "--base-url",
        server.base_url,
        "--data",
        str(data),
        "--n",
        "2",
        "--out",
        str(out),
        "--set",
        "backend.served_model=m",
        "--set",
        "rollout.max_tokens_per_turn=8",
        "--reward",
        "math_equal",  # reads the number out of the plain server's sentence
    ]
    result = CliRunner().invoke(build_app(), arguments)
    assert result.exit_code == 0, result.output
    trajectories = read_trajectories(out)
    assert len(trajectories) == 2
    for trajectory in trajectories:
        trajectory.check()
        assert trajectory.token_exact is exact
    if exact:
        assert all(
            lp is not None
            for t in trajectories
            for lp, m in zip(t.logprobs, t.loss_mask, strict=True)
            if m
        )
    else:
        assert trajectories[0].reward == 1.0  # the server's "ANSWER: 42" was parsed and scored
        assert "serve evaluation, not training" in " ".join(result.stdout.split())
