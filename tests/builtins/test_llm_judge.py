"""``llm_judge`` against a fake OpenAI-compatible server: verdicts, scores, failures, options."""

from __future__ import annotations

import asyncio
import json
import re
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from typer.testing import CliRunner

pytest.importorskip("httpx")

from agentfly_cli.cli.app import build_app  # noqa: E402
from agentfly_cli.errors import RewardError, UserError  # noqa: E402
from agentfly_cli.recipes.loader import load_config  # noqa: E402
from agentfly_cli.trajectory import read_trajectories  # noqa: E402
from rewards_builtin.judge import JudgeOutputError, llm_judge, parse_judgment  # noqa: E402
from rewards_builtin.text import exact_match  # noqa: E402

runner = CliRunner()


class FakeJudge(ThreadingHTTPServer):
    """/v1/chat/completions: 'VERDICT: YES' when the candidate equals the reference, else NO.

    ``script`` (a list) replaces the next replies: a string is the reply's content, an int an
    HTTP error status. Every request is recorded.
    """

    daemon_threads = True

    def __init__(self):
        super().__init__(("127.0.0.1", 0), JudgeHandler)
        self.requests: list[dict] = []
        self.script: list = []
        self.delay = 0.0
        self.lock = threading.Lock()

    def handle_error(self, request, client_address):  # a client that timed out hung up
        pass

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/v1"


class JudgeHandler(BaseHTTPRequestHandler):
    server: FakeJudge

    def log_message(self, *args):
        pass

    def _reply(self, status: int, payload) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        if self.path == "/v1/models":
            return self._reply(200, {"object": "list", "data": [{"id": "judge-7b"}]})
        self._reply(404, {"error": {"message": "not found"}})

    def do_POST(self):
        srv = self.server
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        with srv.lock:
            srv.requests.append({"body": body, "auth": self.headers.get("Authorization")})
            scripted = srv.script.pop(0) if srv.script else None
        if srv.delay:
            time.sleep(srv.delay)
        if self.path != "/v1/chat/completions":
            return self._reply(404, {"error": {"message": f"no route {self.path}"}})
        if isinstance(scripted, int):
            return self._reply(scripted, {"error": {"message": "judge overloaded"}})
        content = scripted if scripted is not None else self._verdict(body)
        message = {"role": "assistant", "content": content}
        self._reply(200, {"choices": [{"index": 0, "message": message, "finish_reason": "stop"}]})

    @staticmethod
    def _verdict(body) -> str:
        user = body["messages"][-1]["content"]
        reference = re.search(r"Reference answer:\n(.*?)\n\n", user, re.S).group(1)
        candidate = re.search(r"Candidate answer:\n(.*?)\n\n", user, re.S).group(1)
        if candidate == "ramble":
            return "Well, it depends on how you look at it."
        same = candidate.strip() == reference.strip()
        return f"The reference says {reference}.\nVERDICT: {'YES' if same else 'NO'}"


@pytest.fixture
def server():
    srv = FakeJudge()
    thread = threading.Thread(target=srv.serve_forever, args=(0.02,), daemon=True)
    thread.start()
    yield srv
    srv.shutdown()
    srv.server_close()


def judge(server, **options):
    return llm_judge.with_options({"base_url": server.base_url, "model": "judge", **options})


def score(reward, prediction, **row):
    row.setdefault("question", "What is 2 + 3?")
    return asyncio.run(reward.score(prediction, None, row))


# -- parsing --------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("reply", "expected"),
    [
        ("VERDICT: YES", (1.0, "YES")),
        ("Reasoning... the sum is 5.\n**Verdict:** no", (0.0, "NO")),
        ("Yes.", (1.0, "YES")),
        ("verdict = correct", (1.0, "CORRECT")),
        ("<think>VERDICT: NO, wait</think>VERDICT: YES", (1.0, "YES")),
        ("First I thought VERDICT: NO. On reflection, VERDICT: YES", (1.0, "YES")),
    ],
)
def test_yes_no_verdicts(reply, expected):
    assert parse_judgment(reply, "yes_no") == expected


@pytest.mark.parametrize(
    ("reply", "expected"),
    [
        ("SCORE: 7", (0.7, "7/10")),
        ("Score: 3/5", (0.6, "3/5")),
        ("score: 4 out of 4", (1.0, "4/4")),
        ("8", (0.8, "8/10")),
        ("**Score**: 0", (0.0, "0/10")),
    ],
)
def test_scores(reply, expected):
    assert parse_judgment(reply, "score") == pytest.approx(expected)


@pytest.mark.parametrize(
    ("reply", "mode", "message"),
    [
        ("I cannot tell.", "yes_no", "has no 'VERDICT: YES/NO'"),
        ("There is no doubt it is right", "yes_no", "has no 'VERDICT"),
        ("SCORE: 12", "score", "score 12 is outside 0..10"),
        ("Looks fine to me", "score", "has no 'SCORE: N'"),
    ],
)
def test_malformed_judgments(reply, mode, message):
    with pytest.raises(JudgeOutputError, match=re.escape(message)):
        parse_judgment(reply, mode)


# -- against the fake server -----------------------------------------------------------------
def test_right_answer_scores_one_and_the_request_is_complete(server, monkeypatch):
    monkeypatch.setenv("JUDGE_KEY", "sekrit")
    reward = judge(server, api_key_env="JUDGE_KEY", max_tokens=32)
    result = score(reward, " 5 ", answer="5")
    assert (result.reward, result.failed) == (1.0, False)
    assert result.extras["verdict"] == "YES" and "VERDICT: YES" in result.extras["judge_reply"]
    request = server.requests[-1]
    assert request["auth"] == "Bearer sekrit"
    body = request["body"]
    assert body["model"] == "judge" and body["temperature"] == 0 and body["max_tokens"] == 32
    system, user = body["messages"]
    assert system["role"] == "system" and "grader" in system["content"]
    assert "Question:\nWhat is 2 + 3?" in user["content"]
    assert "Reference answer:\n5\n" in user["content"]
    assert "Candidate answer:\n5\n" in user["content"]


def test_wrong_answer_scores_zero(server):
    result = score(judge(server), "6", answer="5")
    assert (result.reward, result.failed, result.extras["verdict"]) == (0.0, False, "NO")


def test_malformed_judgment_is_a_failed_reward(server):
    result = score(judge(server), "ramble", answer="5")
    assert result.failed and result.reward == 0.0
    assert "JudgeOutputError: the judge's reply has no 'VERDICT: YES/NO'" in result.error
    strict = judge(server, on_error="raise")
    with pytest.raises(RewardError, match="has no 'VERDICT"):
        score(strict, "ramble", answer="5")


def test_no_answer_scores_zero_without_asking(server):
    result = score(judge(server), None, answer="5")
    assert (result.reward, result.extras) == (0.0, {"verdict": "no answer"})
    assert server.requests == []


def test_score_mode_custom_prompt_and_model_discovery(server):
    server.script = ["SCORE: 6"]
    reward = llm_judge.with_options(
        {
            "base_url": server.base_url,
            "verdict": "score",
            "max_score": 8,
            "prompt": "Q={question} A={prediction} (max {max_score}) {{literal}}",
            "system_prompt": None,
            "reference_field": None,
        }
    )
    result = score(reward, "5", answer="5")
    assert result.reward == pytest.approx(0.75) and result.extras["verdict"] == "6/8"
    body = server.requests[-1]["body"]
    assert body["model"] == "judge-7b"  # the first the server lists
    assert body["messages"] == [
        {"role": "user", "content": "Q=What is 2 + 3? A=5 (max 8) {literal}"}
    ]


def test_retries_then_http_error(server):
    server.script = [503, "VERDICT: YES"]
    result = score(judge(server, retries=1), "5", answer="5")
    assert result.reward == 1.0 and len(server.requests) == 2
    server.script = [500, 500]
    result = score(judge(server, retries=1), "5", answer="5")
    assert result.failed
    assert re.search(r"llm_judge: POST http://\S+/chat/completions -> HTTP 500", result.error)
    server.script = [400]  # not retried
    before = len(server.requests)
    assert score(judge(server, retries=3), "5", answer="5").failed
    assert len(server.requests) == before + 1


def test_timeout_and_server_down_are_clear_failures(server):
    server.delay = 0.6
    started = time.perf_counter()
    result = score(judge(server, timeout=0.2, retries=0), "5", answer="5")
    assert result.failed and "timed out after 0.2s; check the server or raise options.timeout" in (
        result.error
    )
    assert time.perf_counter() - started < 2
    down = judge(server, retries=0)
    server.shutdown()
    server.server_close()
    result = score(down, "5", answer="5")
    assert result.failed
    assert "cannot reach http://127.0.0.1:" in result.error and "options.base_url" in result.error


def test_concurrent_judgments(server):
    reward = judge(server)

    async def many():
        rows = [{"question": f"{i} + 0?", "answer": str(i)} for i in range(24)]
        return await asyncio.gather(
            *(reward.score(str(i if i % 3 else i + 1), None, row) for i, row in enumerate(rows))
        )

    results = asyncio.run(many())
    assert [r.reward for r in results] == [0.0 if i % 3 == 0 else 1.0 for i in range(24)]
    assert len(server.requests) == 24


def test_missing_question_field_fails_clearly(server):
    reward = judge(server, question_field="prompt")
    assert reward.fields == ["prompt"]
    result = asyncio.run(reward.score("5", None, {"question": "x"}))
    assert result.failed and "needs the dataset field 'prompt'" in result.error


# -- options --------------------------------------------------------------------------------
def test_bad_options_are_one_line_user_errors(monkeypatch):
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    with pytest.raises(UserError, match="needs options.base_url"):
        llm_judge.with_options({})
    with pytest.raises(UserError, match=r"options\.temprature: Extra inputs are not permitted"):
        llm_judge.with_options({"base_url": "http://x/v1", "temprature": 0})
    with pytest.raises(UserError, match=r"options.prompt uses \{answer\}"):
        llm_judge.with_options({"base_url": "http://x/v1", "prompt": "{answer}"})
    with pytest.raises(UserError, match="reward 'exact_match' takes no options"):
        exact_match.with_options({"base_url": "http://x/v1"})
    monkeypatch.setenv("OPENAI_BASE_URL", "http://from-env/v1")
    assert llm_judge.with_options({}).timeout == pytest.approx(30 * 2 + 0.5 + 5)
    config = load_config(
        None, reward=[{"name": "llm_judge", "weight": 0.5, "options": {"model": "j"}}]
    )
    assert config.reward[0].options == {"model": "j"}


def test_rollout_with_the_judge_in_the_config(server, tiny_model, tmp_path):
    data = tmp_path / "data.jsonl"
    rows = [{"question": "What is 2 + 3?", "answer": "5"}, {"question": "4 * 4?", "answer": "16"}]
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))

    def answer(text):
        payload = {"name": "answer", "arguments": {"answer": text}}
        return "<tool_call>\n" + json.dumps(payload) + "\n</tool_call>"

    script = tmp_path / "script.jsonl"
    lines = [{"responses": [answer("5")]}, {"responses": [answer("15")]}]
    script.write_text("".join(json.dumps(line) + "\n" for line in lines))
    config = tmp_path / "judged.yaml"
    config.write_text(
        f"""
model: tiny
backend: {{name: scripted, script: {script}}}
data: {{path: {data}}}
tools: [answer]
reward:
  - name: llm_judge
    weight: 0.75
    options: {{base_url: "{server.base_url}", model: judge, max_tokens: 16}}
  - {{name: exact_match, weight: 0.25}}
chat: {{parser: hermes}}
rollout: {{n: 2, max_turns: 2}}
"""
    )
    out = tmp_path / "out.jsonl"
    result = runner.invoke(
        build_app(),
        ["rollout", str(config), "--model", str(tiny_model), "--out", str(out), "--quiet"],
    )
    assert result.exit_code == 0, result.output
    trajectories = read_trajectories(out)
    assert [t.reward for t in trajectories] == [1.0, 1.0, 0.0, 0.0]
    for trajectory in trajectories:
        trajectory.check()
        extras = trajectory.reward_extras
        assert extras["llm_judge/verdict"] == ("YES" if trajectory.task_index == 0 else "NO")
        assert "error" not in extras
    assert len(server.requests) == 4
