"""``benchmarks/gateway_bench.py`` at a small size: its JSON, and its lost / mixed-up check
catching a gateway that answers a session with another's reply."""

from __future__ import annotations

import json

import pytest

from tests.helpers.paths import load_script

SERVE_EXTRA = "the gateway needs the serve extra: pip install 'agentfly-cli[serve]'"
pytest.importorskip("starlette", reason=SERVE_EXTRA)
pytest.importorskip("uvicorn", reason=SERVE_EXTRA)


@pytest.fixture(scope="module")
def bench():
    return load_script("benchmarks/gateway_bench.py")


def test_the_benchmark_reports_overheads_and_no_lost_request(bench, tmp_path):
    out = tmp_path / "gateway.json"
    result = bench.main(["--sessions", "8", "--turns", "2", "--many", "40", "--stream-tokens",
                         "32", "--out", str(out)])  # fmt: skip
    assert json.loads(out.read_text()) == result
    for label, count in (("unloaded", 200), ("loaded", 8)):
        section = result[label]
        assert section["sessions"] == count
        for path in ("direct", "gateway", "http"):
            assert section[path]["n"] == count * 2 and section[path]["p50_ms"] >= 0
        assert set(section["overhead_p50_ms"]) == {"gateway", "http"}
    separate = result["separate_client"]
    assert (separate["sessions"], separate["requests"]) == (8, 16)
    assert separate["server_cpu_ms"] > 0 and separate["latency"]["n"] == 16
    assert separate["overhead_cpu_ms"] == pytest.approx(
        separate["server_cpu_ms"] - separate["direct_cpu_ms"], abs=0.002
    )
    streamed = result["streaming"]
    assert streamed["tokens"] == 32 and streamed["stream"]["n"] == streamed["complete"]["n"] == 50
    assert streamed["events"] >= 16  # the text came in many events, not one
    assert "overhead_us_per_token" in streamed
    many = result["many_sessions"]
    assert (many["sessions"], many["requests"]) == (40, 120)
    assert many["lost"] == many["misattributed_replies"] == many["misrecorded_sessions"] == 0


def test_a_reply_sent_to_the_wrong_session_is_counted(bench, monkeypatch):
    """The mixed-dialect check counts a session answered with another's marker: both of its
    replies are misattributed and its record holds the other session's markers."""
    echo = bench.dc.MarkerEcho
    real = echo.generate

    async def swapped(self, prompt_ids, params, context=None):
        generation = await real(self, prompt_ids, params, context)
        text = self.chat.decode(generation.token_ids)
        if "session-3 " in text:  # s3 gets s4's reply
            text = text.replace("session-3 ", "session-4 ").split("<|im_end|>")[0]
            generation.token_ids = self.chat.encode_response(text)
        return generation

    monkeypatch.setattr(echo, "generate", swapped)
    chat = bench.ChatTemplate.load(
        str(bench.build_tiny_model(bench.Path(bench.tempfile.mkdtemp())))
    )
    many = bench.mixed_sessions(chat, sessions=6, turns=2)
    assert many["misattributed_replies"] == 2 and many["misrecorded_sessions"] == 1
    assert many["lost"] == 0 and many["first_problems"][0].startswith("s3 ")
