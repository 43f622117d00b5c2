"""examples/gateway_clients: the documented `anthropic` SDK and Responses API loops, run as
their scripts are against a served gateway, plain and streamed: the model's call is run, its
result sent back, the text answer ends the loop, and the session's record printed from
``/sessions/ID/end`` is one token-exact segment of two turns."""

from __future__ import annotations

import importlib

import pytest

from agentfly_cli.chat.templates import ChatTemplate
from agentfly_cli.serve.app import build_app
from agentfly_cli.serve.server import serving_in_thread
from tests.helpers.paths import REPO_ROOT
from tests.serve.test_serve_capture import call, gateway_for


@pytest.fixture(scope="module")
def chat(tiny_model):
    return ChatTemplate.load(str(tiny_model))


@pytest.fixture
def clients(monkeypatch):
    monkeypatch.syspath_prepend(str(REPO_ROOT / "examples" / "gateway_clients"))
    return importlib.import_module("anthropic_client"), importlib.import_module("responses_client")


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "streamed"])
@pytest.mark.parametrize("which", ["anthropic", "responses"])
def test_the_client_loop_runs_the_tool_and_prints_one_exact_segment(
    clients, chat, capsys, which, stream
):
    module = clients[0] if which == "anthropic" else clients[1]
    gateway = gateway_for(chat, [call("calculator", expression="17 * 23"), "It is 391."])
    with serving_in_thread(build_app(gateway)) as url:
        module.main(["--base-url", url, *(["--stream"] if stream else [])])
    printed = capsys.readouterr().out.splitlines()
    replies = [line for line in printed if line.startswith(("reply", "response"))]
    assert len(replies) == 2
    assert ("tool_use" if which == "anthropic" else "function_call") in replies[0]
    [segment] = [line for line in printed if line.startswith("segment")]
    assert segment.startswith("segment 0: 4 turns") and segment.endswith("token_exact=True")
    second = chat.decode(gateway.backend.prompts[1])
    assert "391" in second  # the calculator's result reached the model


def test_the_calculator_refuses_what_is_not_arithmetic(clients):
    calculate = clients[0].calculate
    assert calculate({"expression": "17 * 23"}) == "391"
    assert calculate({"expression": "__import__('os')"}).startswith("error")
    assert calculate({"expression": "1/0"}).startswith("error")
