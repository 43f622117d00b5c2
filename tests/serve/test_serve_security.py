"""Who may use the gateway: API keys on every route, loopback Host names, browser origins and
content types, session ids that cannot be forged or guessed, agents that cannot reach each
other's episodes, and ``agentfly serve``'s refusals of bad flags (one line, exit 2, before
the model loads; an existing --record file is kept)."""

from __future__ import annotations

import asyncio
import json

import httpx
import pytest
from typer.testing import CliRunner

from agentfly_cli.chat.parsers import get_parser
from agentfly_cli.chat.templates import ChatTemplate
from agentfly_cli.cli.app import build_app as build_cli
from agentfly_cli.serve.app import build_app
from agentfly_cli.serve.auth import Access
from agentfly_cli.serve.gateway import Gateway
from agentfly_cli.serve.server import serving_in_thread
from tests.cli.test_cli_bad_input import one_line_error
from tests.serve.test_serve_capture import Replies

openai = pytest.importorskip("openai", reason="the openai SDK is a dev dependency")
KEY = "k-" + "s3cret" * 4
HI = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}


@pytest.fixture(scope="module")
def tiny_chat(tiny_model):
    return ChatTemplate.load(str(tiny_model))


def served(chat, texts=(), access=None, **gateway_options):
    backend = Replies(chat, list(texts))
    gateway = Gateway(backend, chat, get_parser("hermes"), "tiny", **gateway_options)
    return backend, gateway, serving_in_thread(build_app(gateway, access=access))


def test_with_an_api_key_every_route_needs_it_as_bearer_or_x_api_key(tiny_chat):
    backend, gateway, serving = served(tiny_chat, ["one", "two"], Access(api_key=KEY))
    with serving as url:
        wrong = openai.OpenAI(base_url=f"{url}/s/e1/v1", api_key="not-the-key", max_retries=0)
        with pytest.raises(openai.AuthenticationError) as info:
            wrong.chat.completions.create(**HI)
        assert info.value.body["code"] == "invalid_api_key"
        with pytest.raises(openai.AuthenticationError):
            wrong.models.list()
        for route, method in (("/sessions", "GET"), ("/sessions/e1/end", "POST"),
                              ("/v1/models", "GET")):  # fmt: skip
            assert httpx.request(method, f"{url}{route}").status_code == 401, route
        assert backend.prompts == [] and gateway.episodes == {}  # nothing sampled or opened
        right = openai.OpenAI(base_url=f"{url}/s/e1/v1", api_key=KEY)  # Authorization: Bearer
        assert right.chat.completions.create(**HI).choices[0].message.content == "one"
        anthropic_style = {"x-api-key": KEY}
        listed = httpx.get(f"{url}/sessions", headers=anthropic_style)
        assert listed.json() == [{"session": "e1", "requests": 1, "segments": 1}]
        ended = httpx.post(f"{url}/sessions/e1/end", headers=anthropic_style, json={"reward": 1})
        assert ended.status_code == 200 and ended.json()["reward"] == 1


def test_a_host_that_is_not_a_loopback_name_is_refused_dns_rebinding(tiny_chat):
    backend, gateway, serving = served(tiny_chat, ["ok", "ok"])
    with serving as url:
        port = url.rsplit(":", 1)[1]
        evil = httpx.post(f"{url}/s/e/v1/chat/completions", json=HI,
                          headers={"Host": f"attacker.example:{port}"})  # fmt: skip
        assert evil.status_code == 403 and "loopback" in evil.json()["error"]["message"]
        assert httpx.get(f"{url}/sessions", headers={"Host": "rebind.example"}).status_code == 403
        assert backend.prompts == []
        for host in (f"localhost:{port}", f"127.0.0.1:{port}"):
            ok = httpx.post(f"{url}/s/e/v1/chat/completions", json=HI, headers={"Host": host})
            assert ok.status_code == 200, host


def test_a_cross_origin_browser_request_and_a_text_plain_post_are_refused(tiny_chat):
    backend, gateway, serving = served(tiny_chat, ["ok"])
    with serving as url:
        page = {"Origin": "http://attacker.example"}
        assert httpx.post(f"{url}/s/e/v1/chat/completions", json=HI,
                          headers=page).status_code == 403  # fmt: skip
        assert httpx.post(f"{url}/sessions/e/end", headers=page).status_code == 403
        assert httpx.get(f"{url}/sessions", headers={"Origin": "null"}).status_code == 403
        simple = httpx.post(
            f"{url}/s/e/v1/chat/completions",
            content=json.dumps(HI),
            headers={"Content-Type": "text/plain"},
        )  # a "simple" CORS POST
        assert simple.status_code == 400 and "Content-Type" in simple.json()["error"]["message"]
        assert backend.prompts == [] and gateway.episodes == {}
        own_page = {"Origin": url}  # a page the gateway's own origin serves
        same = httpx.post(f"{url}/s/e/v1/chat/completions", json=HI, headers=own_page)
        assert same.status_code == 200


def test_session_ids_outside_the_safe_characters_are_refused(tiny_chat):
    backend, gateway, serving = served(tiny_chat, ["a", "b"])
    with serving as url:
        for raw in ("%FF", "%FE", "a%20b", "x" * 129):
            bad = httpx.post(f"{url}/s/{raw}/v1/chat/completions", json=HI)
            assert bad.status_code == 400, raw
            assert bad.json()["error"]["param"] == "session"
        assert httpx.post(f"{url}/sessions/%FF/end").status_code == 400
        assert backend.prompts == [] and gateway.episodes == {}
        assert httpx.post(f"{url}/s/Ok-1._~/v1/chat/completions", json=HI).status_code == 200


def test_ending_an_unknown_session_does_not_lock_its_id_out(tiny_chat):
    backend, gateway, serving = served(tiny_chat, ["first"])
    with serving as url:
        assert httpx.post(f"{url}/sessions/early/end").status_code == 404
        later = httpx.post(f"{url}/s/early/v1/chat/completions", json=HI)
        assert later.status_code == 200 and later.json()["choices"][0]["message"]["content"]
        assert httpx.post(f"{url}/sessions/early/end").status_code == 200
        again = httpx.post(f"{url}/s/early/v1/chat/completions", json=HI)
        assert again.status_code == 409  # an ended session stays ended


def test_a_request_without_a_session_gets_an_unguessable_episode_id(tiny_chat):
    backend, gateway, serving = served(tiny_chat, ["a", "b"])
    ended = []
    gateway.on_close = ended.append
    with serving as url:
        for _ in range(2):
            assert httpx.post(f"{url}/v1/chat/completions", json=HI).status_code == 200
    ids = [episode.id for episode in ended]
    assert len(set(ids)) == 2 and all(i.startswith("anon-") and len(i) >= 5 + 22 for i in ids)
    assert gateway.episodes == {}  # never listed, never left open


AGENT_PROBES = '''
import httpx
from openai import OpenAI


def probe(task, base_url):
    """Tries to reach the other episodes, then does its own work."""
    root = base_url.split("/s/")[0]
    mine = base_url.split("/s/")[1].split("/")[0]
    seen = {
        "list": httpx.get(f"{root}/sessions").status_code,
        "list_with_key": httpx.get(f"{root}/sessions",
                                   headers={"Authorization": "Bearer x"}).status_code,
        "end_mine": httpx.post(f"{root}/sessions/{mine}/end").status_code,
        "invent": httpx.post(f"{root}/s/made-up-1/v1/chat/completions",
                             json={"messages": [{"role": "user", "content": "x"}]}).status_code,
        "anonymous": httpx.post(f"{root}/v1/chat/completions",
                                json={"messages": [{"role": "user", "content": "x"}]}).status_code,
    }
    client = OpenAI(base_url=base_url, api_key="x")
    client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])
    task["seen"].append((mine, seen))
    return 1.0
'''


def test_an_agent_cannot_list_end_or_invent_episodes_during_an_agent_run(tmp_path, tiny_chat):
    from agentfly_cli.rollout.agent_engine import AgentEngine, load_agent
    from agentfly_cli.settings.agent import AgentSettings
    from agentfly_cli.settings.rollout import RolloutSettings

    (tmp_path / "probe_agent.py").write_text(AGENT_PROBES)
    agent = load_agent(f"{tmp_path / 'probe_agent.py'}:probe")
    backend = Replies(tiny_chat, ["fine"] * 4)
    engine = AgentEngine(
        backend, tiny_chat, get_parser("hermes"), agent, None,
        RolloutSettings(n=2), AgentSettings(entry="x:y", concurrency=2), env_manager=None,
    )  # fmt: skip
    seen: list = []
    segments = asyncio.run(engine.run([{"question": "q", "seen": seen}]))
    assert len(seen) == 2 and len(backend.prompts) == 2  # each agent's own request, no other
    for session, codes in seen:
        assert codes == {"list": 401, "list_with_key": 401, "end_mine": 401, "invent": 404,
                         "anonymous": 404}, codes  # fmt: skip
        assert len(session.split("-", 3)[3]) >= 22  # b0-TASK-SAMPLE-16 random bytes
    assert [t.reward for t in segments] == [1.0, 1.0]
    assert all(t.num_turns == 1 for t in segments)


# ---- agentfly serve's flags ------------------------------------------------------------------
runner = CliRunner()


def serve(*arguments, env=None):
    return runner.invoke(build_cli(), ["serve", *[str(a) for a in arguments]], env=env)


def test_serve_refuses_to_listen_beyond_loopback_without_an_api_key(tiny_model, weights_loads):
    line = one_line_error(serve("--model", tiny_model, "--host", "0.0.0.0", "--port", "0"),
                          "--api-key")  # fmt: skip
    assert "0.0.0.0" in line and weights_loads == []


@pytest.mark.parametrize(
    "flags, fragment",
    [
        (["--model", "/no/such/model"], "/no/such/model"),
        (["--backend", "nope"], "nope"),
        (["--parser", "nope"], "nope"),
        (["--template", "/no/such.jinja"], "/no/such.jinja"),
        (["--max-tokens", "0"], "--max-tokens"),
        (["--max-tokens", "-1"], "--max-tokens"),
        (["--port", "70000"], "--port"),
        (["--port", "-5"], "--port"),
        (["--api-key", ""], "--api-key"),
        (["--api-key", "has a space"], "--api-key"),
        (["--max-body-bytes", "0"], "--max-body-bytes"),
        (["--max-stops", "0"], "--max-stops"),
        (["--max-sessions", "0"], "--max-sessions"),
        (["--session-idle-s", "-1"], "--session-idle-s"),
        (["--ended-kept", "0"], "--ended-kept"),
        (["--host", "no-such-host.invalid"], "--host"),
    ],
)
def test_a_bad_serve_flag_is_one_line_before_the_model_loads(
    tiny_model, tmp_path, weights_loads, flags, fragment
):
    record = tmp_path / "episodes.jsonl"
    record.write_text('{"earlier": "episodes"}\n')
    arguments = ["--model", tiny_model, "--port", "0", "--record", record, *flags]
    one_line_error(serve(*arguments), fragment)
    assert weights_loads == []
    assert record.read_text() == '{"earlier": "episodes"}\n'  # never emptied


@pytest.mark.parametrize("where", ["folder", "under_a_file", "unwritable"])
def test_a_record_path_serve_cannot_write_is_one_line_before_the_model_loads(
    tiny_model, tmp_path, weights_loads, where
):
    (tmp_path / "a_file").write_text("x")
    path = {"folder": tmp_path, "under_a_file": tmp_path / "a_file" / "e.jsonl",
            "unwritable": "/proc/agentfly-test/e.jsonl"}[where]  # fmt: skip
    one_line_error(serve("--model", tiny_model, "--port", "0", "--record", path), "--record")
    assert weights_loads == []


def test_a_bad_api_key_in_the_environment_is_one_line(tiny_model, weights_loads):
    result = serve("--model", tiny_model, "--port", "0",
                   env={"AGENTFLY_SERVE_API_KEY": "tab\there"})  # fmt: skip
    one_line_error(result, "AGENTFLY_SERVE_API_KEY")
    assert weights_loads == []


class ServedOnce:
    """Stands in for uvicorn: ``run`` asks the app a few questions instead of serving."""

    def __init__(self, app, host, port):
        self.app, self.answers = app, {}

    def run(self, sockets):
        from starlette.testclient import TestClient

        with TestClient(self.app, base_url="http://127.0.0.1:1") as client:
            self.answers["no_key"] = client.get("/v1/models").status_code
            self.answers["key"] = client.get(
                "/v1/models", headers={"Authorization": f"Bearer {KEY}"}
            ).status_code
            self.answers["proxy_host"] = client.get(
                "/v1/models", headers={"x-api-key": KEY, "Host": "gateway.example"}
            ).status_code


@pytest.fixture
def served_once(monkeypatch, tiny_chat):
    """``agentfly serve`` with the scripted backend for the model and ServedOnce for uvicorn."""
    import agentfly_cli.serve as serve_package
    import agentfly_cli.serve.server as server

    made = []

    def fake_gateway(model, **options):
        return Gateway(Replies(tiny_chat, []), tiny_chat, get_parser("hermes"), "tiny")

    def fake_server(app, host, port):
        made.append(ServedOnce(app, host, port))
        return made[-1]

    monkeypatch.setattr(serve_package, "build_gateway", fake_gateway)
    monkeypatch.setattr(server, "uvicorn_server", fake_server)
    return made


def test_serve_takes_its_key_from_the_environment_and_needs_it_on_every_route(
    tiny_model, served_once
):
    result = serve("--model", tiny_model, "--port", "0", env={"AGENTFLY_SERVE_API_KEY": KEY})
    assert result.exit_code == 0, result.output
    assert served_once[0].answers == {"no_key": 401, "key": 200, "proxy_host": 200}


def test_serve_beyond_loopback_with_a_key_says_every_request_needs_it(tiny_model, served_once):
    result = serve("--model", tiny_model, "--port", "0", "--host", "0.0.0.0", "--api-key", KEY)
    assert result.exit_code == 0, result.output
    assert "every request needs the API key" in result.output
    assert served_once[0].answers["no_key"] == 401
