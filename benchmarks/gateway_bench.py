"""The gateway's overhead per request, and whether 1,000 concurrent sessions lose or mix up any.

An instant fake backend (it returns the same few ids at once) isolates what the gateway adds:
checking the request, rendering the prompt (or the delta of a session's next turn), parsing the
reply, recording it token-exactly, and, over HTTP, Starlette, uvicorn and JSON. Each session is
a multi-turn conversation: every request extends the previous one, as agents' do.

- ``unloaded``: one session at a time; per-request p50 of a direct backend call, of
  ``Gateway.complete`` (in process) and of an HTTP request. Overhead = gateway p50 - direct p50.
- ``loaded``: 256 concurrent sessions; per-request latency percentiles (queueing included) and
  the service time (wall time / requests) of each path, in process and over HTTP.
- ``many_sessions``: 1,000 concurrent sessions (``--many``) over HTTP, 3 turns each; the
  backend echoes the session's marker, so a reply or a recorded turn in the wrong session
  shows: lost and misattributed requests are counted.

- ``separate_client``: the ``loaded`` HTTP case with the client in another process, so that
  the server's own CPU time per request can be read (``server_cpu_ms``: this process's CPU
  seconds while the client ran, over its requests) and set against a direct backend call's
  (``direct_cpu_ms``): ``overhead_cpu_ms`` is what the gateway, Starlette, uvicorn and JSON
  cost per request at that concurrency, whatever the queueing.

- ``streaming``: one request at a time, a reply of ``--stream-tokens`` ids that a backend hands
  over one id per step: ``Gateway.stream`` (every event built) against ``Gateway.complete`` on
  the same reply; ``overhead_us_per_token`` is what streaming adds per sampled token.

In ``unloaded`` and ``loaded`` the HTTP client runs in this process and shares the CPU with the
server (2 cores here).
Run: python benchmarks/gateway_bench.py [--sessions 256] [--many 1000] [--stream-tokens 256]
     [--out FILE.json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from agentfly_cli.backends.base import Backend, Generation, SamplingParams  # noqa: E402
from agentfly_cli.chat.parsers import get_parser  # noqa: E402
from agentfly_cli.chat.templates import ChatTemplate  # noqa: E402
from agentfly_cli.models.tiny import build_tiny_model  # noqa: E402
from agentfly_cli.serve.app import build_app  # noqa: E402
from agentfly_cli.serve.gateway import Gateway  # noqa: E402
from agentfly_cli.serve.server import serving_in_thread  # noqa: E402

MARKER = re.compile(r"session-(\d+) turn-(\d+)")
TARGET_OVERHEAD_MS = 2.0


class Instant(Backend):
    """Returns the same reply ids at once."""

    name = "instant"

    def __init__(self, ids: list[int]) -> None:
        self.ids = ids

    async def generate(self, prompt_ids, params, context=None):
        return Generation(list(self.ids), [-0.1] * len(self.ids), "stop")


class Dribble(Instant):
    """The same reply ids, handed over one id per step (as a streaming backend does)."""

    name = "dribble"

    async def stream(self, prompt_ids, params, context=None):
        for token in self.ids:
            yield [token]
        yield Generation(list(self.ids), [-0.1] * len(self.ids), "stop")


class Echo(Backend):
    """Replies ``ack session-S turn-T`` for the last marker in the prompt."""

    name = "echo"

    def __init__(self, chat: ChatTemplate) -> None:
        self.chat = chat

    async def generate(self, prompt_ids, params, context=None):
        found = MARKER.findall(self.chat.decode(prompt_ids[-40:]))
        text = f"ack session-{found[-1][0]} turn-{found[-1][1]}" if found else "ack none"
        ids = self.chat.encode_response(text)
        return Generation(ids, [-0.1] * len(ids), "stop")


def percentiles(seconds: list[float]) -> dict[str, float]:
    ordered = sorted(seconds)

    def pick(q: float) -> float:
        return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1e3, 3)

    return {"n": len(ordered), "p50_ms": pick(0.5), "p95_ms": pick(0.95), "p99_ms": pick(0.99),
            "mean_ms": round(statistics.fmean(ordered) * 1e3, 3)}  # fmt: skip


def turn_message(session: int, turn: int) -> dict:
    return {"role": "user", "content": f"Remember session-{session} turn-{turn}."}


async def session_direct(backend, chat, session: int, turns: int, times: list[float]) -> None:
    messages = [turn_message(session, 0)]
    ids = chat.render_prompt(messages)
    for turn in range(turns):
        started = time.perf_counter()
        generation = await backend.generate(ids, SamplingParams(max_tokens=16))
        times.append(time.perf_counter() - started)
        ids = ids + generation.token_ids + chat.observation_delta([turn_message(session, turn + 1)])


async def session_gateway(gateway, session: int, turns: int, times: list[float]) -> None:
    messages = [turn_message(session, 0)]
    for turn in range(turns):
        started = time.perf_counter()
        reply = await gateway.complete(f"s{session}", {"messages": messages, "max_tokens": 16})
        times.append(time.perf_counter() - started)
        messages += [reply["choices"][0]["message"], turn_message(session, turn + 1)]


async def session_http(client, url: str, session: int, turns: int, times: list[float]) -> list:
    messages, replies = [turn_message(session, 0)], []
    for turn in range(turns):
        started = time.perf_counter()
        response = await client.post(
            f"{url}/s/s{session}/v1/chat/completions",
            json={"messages": messages, "max_tokens": 16},
        )
        times.append(time.perf_counter() - started)
        if response.status_code != 200:
            replies.append(None)
            return replies
        message = response.json()["choices"][0]["message"]
        replies.append(message["content"])
        messages += [message, turn_message(session, turn + 1)]
    return replies


def drive(count: int, sequential: bool, make) -> float:
    """Run ``make(i)`` for ``count`` sessions, one after another or all at once; the wall."""

    async def run() -> float:
        started = time.perf_counter()
        if sequential:
            for i in range(count):
                await make(i)
        else:
            await asyncio.gather(*(make(i) for i in range(count)))
        return time.perf_counter() - started

    return asyncio.run(run())


def drive_http(url: str, count: int, sequential: bool, turns: int, times: list[float]) -> float:
    import httpx

    async def run() -> float:
        limits = httpx.Limits(max_connections=count, max_keepalive_connections=count)
        async with httpx.AsyncClient(limits=limits, timeout=120) as client:
            started = time.perf_counter()
            if sequential:
                for i in range(count):
                    await session_http(client, url, i, turns, times)
            else:
                await asyncio.gather(
                    *(session_http(client, url, i, turns, times) for i in range(count))
                )
            return time.perf_counter() - started

    return asyncio.run(run())


def measure(chat: ChatTemplate, sessions: int, turns: int) -> dict:
    """Direct calls, the gateway in process and over HTTP: one session at a time (200 of
    them), then ``sessions`` at once."""
    backend = Instant(chat.encode_response("OK."))
    gateway = Gateway(backend, chat, get_parser("hermes"), "tiny")
    out: dict = {}
    for label, count, sequential in (("unloaded", 200, True), ("loaded", sessions, False)):
        times: dict[str, list[float]] = {"direct": [], "gateway": [], "http": []}
        direct, inproc = times["direct"], times["gateway"]
        walls = {
            "direct": drive(count, sequential,
                            lambda i, t=direct: session_direct(backend, chat, i, turns, t)),
            "gateway": drive(count, sequential,
                             lambda i, t=inproc: session_gateway(gateway, i, turns, t)),
        }  # fmt: skip
        gateway.episodes.clear()
        with serving_in_thread(build_app(gateway)) as url:
            walls["http"] = drive_http(url, count, sequential, turns, times["http"])
        gateway.episodes.clear()
        section: dict = {"sessions": count, "turns": turns, "at_once": 1 if sequential else count}
        for name, measured in times.items():
            section[name] = {**percentiles(measured),
                             "service_ms": round(walls[name] / len(measured) * 1e3, 3)}  # fmt: skip
        section["overhead_p50_ms"] = {
            "gateway": round(section["gateway"]["p50_ms"] - section["direct"]["p50_ms"], 3),
            "http": round(section["http"]["p50_ms"] - section["direct"]["p50_ms"], 3),
        }
        out[label] = section
    return out


def streaming(chat: ChatTemplate, tokens: int, requests: int = 50) -> dict:
    """Per-request time of a streamed reply of ``tokens`` ids against the same reply whole."""
    words = " ".join(f"word{i % 50}" for i in range(tokens * 2))
    ids = chat.encode_response(words)[:tokens]
    gateway = Gateway(Dribble(ids), chat, get_parser("hermes"), "tiny")
    body = {"messages": [{"role": "user", "content": "Talk."}], "max_tokens": tokens}

    async def consume() -> int:
        return sum(1 for _ in [event async for event in gateway.stream(None, body)])

    times: dict[str, list[float]] = {"complete": [], "stream": []}
    events = 0
    for _ in range(requests):
        for name in times:
            started = time.perf_counter()
            if name == "stream":
                events = asyncio.run(consume())
            else:
                asyncio.run(gateway.complete(None, body))
            times[name].append(time.perf_counter() - started)
    out: dict = {"tokens": len(ids), "requests": requests, "events": events}
    for name, measured in times.items():
        out[name] = percentiles(measured)
    extra_ms = out["stream"]["p50_ms"] - out["complete"]["p50_ms"]
    out["overhead_us_per_token"] = round(extra_ms * 1e3 / len(ids), 2)
    return out


def separate_client(chat: ChatTemplate, sessions: int, turns: int) -> dict:
    """``sessions`` concurrent HTTP sessions from a client process; the server's CPU time."""
    backend = Instant(chat.encode_response("OK."))
    direct: list[float] = []
    cpu = time.process_time()
    drive(sessions, False, lambda i: session_direct(backend, chat, i, turns, direct))
    direct_cpu = (time.process_time() - cpu) / len(direct)
    gateway = Gateway(backend, chat, get_parser("hermes"), "tiny")
    with serving_in_thread(build_app(gateway)) as url:
        cpu = time.process_time()
        done = subprocess.run(
            [sys.executable, __file__, "--client", url, "--sessions", str(sessions),
             "--turns", str(turns)],
            capture_output=True, text=True, check=False,
        )  # fmt: skip
        server_cpu = time.process_time() - cpu
    if done.returncode != 0:
        raise RuntimeError(f"the client process failed: {done.stderr[-2000:]}")
    client = json.loads(done.stdout)
    requests = client["latency"]["n"]
    return {"sessions": sessions, "turns": turns, "requests": requests,
            "client_wall_s": client["wall_s"], "latency": client["latency"],
            "service_ms": round(client["wall_s"] / requests * 1e3, 3),
            "server_cpu_ms": round(server_cpu / requests * 1e3, 3),
            "direct_cpu_ms": round(direct_cpu * 1e3, 3),
            "overhead_cpu_ms": round((server_cpu / requests - direct_cpu) * 1e3, 3)}  # fmt: skip


def client_main(url: str, sessions: int, turns: int) -> None:
    """The client process of :func:`separate_client`: its latencies and wall, as JSON."""
    times: list[float] = []
    wall = drive_http(url, sessions, False, turns, times)
    print(json.dumps({"wall_s": wall, "latency": percentiles(times)}))


def thousand_sessions(chat: ChatTemplate, sessions: int = 1000, turns: int = 3) -> dict:
    import httpx

    gateway = Gateway(Echo(chat), chat, get_parser("hermes"), "tiny")
    times: list[float] = []
    with serving_in_thread(build_app(gateway)) as url:

        async def run():
            limits = httpx.Limits(max_connections=sessions, max_keepalive_connections=sessions)
            async with httpx.AsyncClient(limits=limits, timeout=300) as client:
                started = time.perf_counter()
                replies = await asyncio.gather(
                    *(session_http(client, url, i, turns, times) for i in range(sessions))
                )
                return replies, time.perf_counter() - started

        replies, wall = asyncio.run(run())
    lost = sum(turns - len([r for r in rs if r is not None]) for rs in replies)
    wrong_reply = sum(
        1
        for i, rs in enumerate(replies)
        for turn, r in enumerate(rs)
        if r is not None and r != f"ack session-{i} turn-{turn}"
    )
    wrong_record = 0
    for i in range(sessions):
        episode = gateway.episodes.get(f"s{i}")
        if episode is None or len(episode.segments) != 1:
            wrong_record += 1
            continue
        trajectory = episode.segments[0].trajectory
        trajectory.check()
        seen = {int(s) for s, _ in MARKER.findall(chat.decode(trajectory.ids))}
        wrong_record += seen != {i} or trajectory.num_turns != turns
    return {"sessions": sessions, "turns": turns, "requests": len(times),
            "lost": lost, "misattributed_replies": wrong_reply,
            "misrecorded_sessions": wrong_record, "wall_s": round(wall, 2),
            "latency": percentiles(times)}  # fmt: skip


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=256)
    parser.add_argument("--turns", type=int, default=4)
    parser.add_argument("--many", type=int, default=1000, help="sessions of the lost/mixed check")
    parser.add_argument("--stream-tokens", type=int, default=256, help="a streamed reply's ids")
    parser.add_argument("--out", default=None)
    parser.add_argument("--client", default=None, help=argparse.SUPPRESS)  # the client process
    args = parser.parse_args(argv)
    if args.client:
        client_main(args.client, args.sessions, args.turns)
        return {}
    folder = build_tiny_model(Path(tempfile.mkdtemp()) / "tiny")
    chat = ChatTemplate.load(str(folder))
    result = {
        "benchmark": "gateway_bench",
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
        "target_overhead_p50_ms": TARGET_OVERHEAD_MS,
        **measure(chat, args.sessions, args.turns),
        "streaming": streaming(chat, args.stream_tokens),
        "separate_client": separate_client(chat, args.sessions, args.turns),
        "many_sessions": thousand_sessions(chat, args.many),
    }
    text = json.dumps(result, indent=2)
    print(text)
    if args.out:
        Path(args.out).write_text(text + "\n")
    return result


if __name__ == "__main__":
    main()
