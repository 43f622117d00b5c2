"""The gateway's overhead per request, per dialect, and whether 1,000 concurrent sessions lose
or mix up any.

An instant fake backend (it returns the same few ids at once) isolates what the gateway adds:
checking the request, rendering the prompt (or the delta of a session's next turn), parsing the
reply, recording it token-exactly, and, over HTTP, Starlette, uvicorn and JSON. Each session is
a multi-turn conversation: every request extends the previous one, as agents' do.

- ``unloaded``: one session at a time; per-request p50 of a direct backend call, of
  ``Gateway.complete`` (in process) and of an HTTP request. Overhead = gateway p50 - direct p50.
- ``loaded``: 256 concurrent sessions; per-request latency percentiles (queueing included) and
  the service time (wall time / requests) of each path, in process and over HTTP.
- ``separate_client``: the ``loaded`` HTTP case with the client in another process, so that
  the server's own CPU time per request can be read (``server_cpu_ms``: this process's CPU
  seconds while the client ran, over its requests) and set against a direct backend call's
  (``direct_cpu_ms``): ``overhead_cpu_ms`` is what the gateway, Starlette, uvicorn and JSON
  cost per request at that concurrency, whatever the queueing.
- ``streaming``: one request at a time, a reply of ``--stream-tokens`` ids that a backend hands
  over one id per step: ``Gateway.stream`` (every event built) against ``Gateway.complete`` on
  the same reply; ``overhead_us_per_token`` is what streaming adds per sampled token.
- ``dialects``: the ``loaded`` case (``--sessions`` at once, ``--turns`` requests each, a tool
  call and its tool result every other turn) in each dialect's own shape
  (benchmarks/dialect_clients.py): chat completions, Responses by ``previous_response_id``
  and by whole ``input``, Anthropic Messages. Per dialect: in process (the route's handler
  called directly: the conversions and the gateway, no HTTP), over HTTP alone (one lean
  keep-alive connection per session) and over HTTP mixed (the dialects round-robin in one
  load, so all share one queue). ``--rounds`` rounds rotate the order; one server serves all;
  the heap loaded before the runs (model, tokenizer, imports) is frozen out of the garbage
  collector (``gc.freeze``) so that a full collection's pause does not land on one dialect.
  ``overhead_vs_chat_ms_p50``: a dialect's request p50 minus a chat request's in the mixed
  load; ``overhead_vs_chat`` adds the differences in service time (in process, HTTP), in CPU
  per request, and in p50 when each dialect runs alone (there, at saturation, p50 is about
  sessions x service time: a per-request difference shows 256 times over). ``within_target``:
  each per-request difference (mixed p50, service times, CPU) is at most 1 ms.
- ``many_sessions``: 1,000 concurrent sessions (``--many``) over HTTP (httpx), round-robin
  over the dialects' clients, 3 turns each (a tool call, its result, a user turn); the
  backend echoes the session's last marker, so a reply or a recorded turn in the wrong
  session shows: lost, misattributed and misshaped replies and misrecorded sessions are
  counted, and every recorded segment is checked token-exact.

In ``unloaded``, ``loaded`` and ``dialects`` the HTTP client runs in this process and shares
the CPU with the server (2 cores here).
Run: python benchmarks/gateway_bench.py [--sessions 256] [--turns 4] [--rounds 5] [--many 1000]
     [--stream-tokens 256] [--only loaded,streaming,separate_client,dialects,many_sessions]
     [--out FILE.json]
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import platform
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
from agentfly_cli.serve.dialects import messages as anthropic_messages  # noqa: E402
from agentfly_cli.serve.dialects import responses as openai_responses  # noqa: E402
from agentfly_cli.serve.gateway import Gateway  # noqa: E402
from agentfly_cli.serve.server import serving_in_thread  # noqa: E402
from benchmarks import dialect_clients as dc  # noqa: E402

TARGET_OVERHEAD_MS = 2.0
DIALECT_TARGET_MS = 1.0  # what a dialect may add per request over chat completions


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


def mixed_sessions(chat: ChatTemplate, sessions: int = 1000, turns: int = 3) -> dict:
    """``sessions`` concurrent sessions over HTTP (httpx), round-robin over the dialects'
    clients, ``turns`` requests each; the backend echoes the session's last marker, so a
    reply or a recorded turn in the wrong session shows. Every recorded segment is checked
    token-exact (``trajectory.check()``)."""
    import httpx

    gateway = Gateway(dc.MarkerEcho(chat), chat, get_parser("hermes"), "tiny")
    plan = [dc.DIALECTS[i % len(dc.DIALECTS)] for i in range(sessions)]
    times: list[float] = []
    with serving_in_thread(build_app(gateway)) as url:

        async def run():
            limits = httpx.Limits(max_connections=sessions, max_keepalive_connections=sessions)
            async with httpx.AsyncClient(limits=limits, timeout=300) as client:
                send = dc.http_sender(client, url)
                started = time.perf_counter()
                said = await asyncio.gather(
                    *(dc.converse(send, d, i, turns, times) for i, d in enumerate(plan))
                )
                return said, time.perf_counter() - started

        said, wall = asyncio.run(run())
    counts = {d: {"sessions": 0, "lost": 0, "misattributed_replies": 0, "misshaped_replies": 0,
                  "misrecorded_sessions": 0} for d in dc.DIALECTS}  # fmt: skip
    problems: list[str] = []
    for i, (dialect, replies) in enumerate(zip(plan, said, strict=True)):
        count = counts[dialect]
        count["sessions"] += 1
        count["lost"] += sum(r is None for r in replies)
        count["misattributed_replies"] += dc.misattributed(i, replies)
        count["misshaped_replies"] += sum(r is not None and not r.shaped for r in replies)
        wrong = dc.recorded_wrong(chat, gateway.episodes.get(f"s{i}"), i, turns)
        count["misrecorded_sessions"] += wrong is not None
        if wrong is not None and len(problems) < 5:
            problems.append(f"s{i} ({dialect}): {wrong}")
    total = {key: sum(c[key] for c in counts.values()) for key in counts["chat"]}
    return {"sessions": sessions, "turns": turns, "requests": len(times),
            "dialects": list(dc.DIALECTS), **{k: v for k, v in total.items() if k != "sessions"},
            "token_exact_sessions": sessions - total["misrecorded_sessions"],
            "by_dialect": counts, "first_problems": problems, "wall_s": round(wall, 2),
            "latency": percentiles(times)}  # fmt: skip


# ---- the dialects (benchmarks/dialect_clients.py) --------------------------------------------
def in_process_send(gateway: Gateway):
    """``send`` calling each route's handler in process (no HTTP, no JSON)."""
    handlers = {"/v1/chat/completions": gateway.complete,
                "/v1/responses": lambda s, b: openai_responses.create(gateway, s, b),
                "/v1/messages": lambda s, b: anthropic_messages.create(gateway, s, b)}  # fmt: skip

    async def send(path: str, body: dict):
        _, _, session, route = path.split("/", 3)  # /s/SESSION/v1/...
        return 200, await handlers[f"/{route}"](session, body)

    return send


async def at_once(url: str | None, gateway: Gateway, plan: list[str], turns: int,
                  prefix: str) -> dict:  # fmt: skip
    """The sessions of ``plan`` (session i in dialect ``plan[i]``) all at once, over HTTP
    (one lean keep-alive connection each) or in process (``url`` None): latencies by
    dialect, what each reply said, the wall and this process's CPU seconds."""
    times: dict[str, list[float]] = {d: [] for d in plan}

    async def one(i: int, dialect: str):
        if url is None:
            return await dc.converse(in_process_send(gateway), dialect, i, turns,
                                     times[dialect], prefix)  # fmt: skip
        http = dc.LeanHTTP(url)
        try:
            return await dc.converse(http.send, dialect, i, turns, times[dialect], prefix)
        finally:
            await http.close()

    wall, cpu = time.perf_counter(), time.process_time()
    said = await asyncio.gather(*(one(i, d) for i, d in enumerate(plan)))
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    return {"times": times, "said": said, "wall": wall, "cpu": cpu}


def full_collection_ms() -> float:
    """How long a full garbage collection of this process's heap pauses it (best of 3)."""
    best = float("inf")
    for _ in range(3):
        started = time.perf_counter()
        gc.collect()
        best = min(best, time.perf_counter() - started)
    return round(best * 1e3, 1)


def dialect_costs(chat: ChatTemplate, sessions: int, turns: int, rounds: int) -> dict:
    """Each dialect's ``loaded`` case (``sessions`` at once, ``turns`` requests each, a tool
    call and its result in every other turn), in process and over HTTP, then the dialects
    mixed in one load; the rounds rotate the order, and every run shares one server."""
    gateway = Gateway(dc.Alternating(chat), chat, get_parser("hermes"), "tiny")
    modes = ("in_process", "http", "mixed_http")
    runs = {m: {d: {"times": [], "wall": 0.0, "cpu": 0.0, "requests": 0} for d in dc.DIALECTS}
            for m in modes}  # fmt: skip
    failed = 0

    def keep(mode: str, result: dict, share: float = 1.0) -> None:
        nonlocal failed
        failed += sum(s is None or not s.shaped for said in result["said"] for s in said)
        for dialect, measured in result["times"].items():
            run = runs[mode][dialect]
            run["times"] += measured
            run["requests"] += len(measured)
            run["wall"] += result["wall"] * share
            run["cpu"] += result["cpu"] * share
        gateway.episodes.clear()

    with serving_in_thread(build_app(gateway)) as url:
        for where in (None, url):  # warm up every path once, measured nowhere
            asyncio.run(at_once(where, gateway, list(dc.DIALECTS) * 4, turns, "warm-"))
        gateway.episodes.clear()
        gc.collect()
        collections = {"unfrozen": full_collection_ms()}
        gc.freeze()  # the model, tokenizer and imports: a full collection skips them
        frozen = gc.get_freeze_count()
        collections["frozen"] = full_collection_ms()
        for r in range(rounds):
            order = dc.DIALECTS[r % len(dc.DIALECTS) :] + dc.DIALECTS[: r % len(dc.DIALECTS)]
            for mode, where in (("in_process", None), ("http", url)):
                for dialect in order:
                    plan = [dialect] * sessions
                    keep(mode, asyncio.run(at_once(where, gateway, plan, turns,
                                                   f"r{r}-{mode[0]}-{dialect}-")))  # fmt: skip
            plan = [order[i % len(order)] for i in range(sessions)]
            mixed = asyncio.run(at_once(url, gateway, plan, turns, f"r{r}-mixed-"))
            keep("mixed_http", mixed, share=0.0)  # one wall for all: none per dialect
    gc.unfreeze()
    out: dict = {"sessions": sessions, "turns": turns, "rounds": rounds,
                 "failed_or_misshaped_replies": failed, "gc_frozen_objects": frozen,
                 "gc_full_collection_ms": collections,
                 "target_overhead_ms": DIALECT_TARGET_MS}  # fmt: skip
    for dialect in dc.DIALECTS:
        section = {}
        for mode in modes:
            run = runs[mode][dialect]
            section[mode] = percentiles(run["times"])
            if mode != "mixed_http":
                section[mode]["service_ms"] = round(run["wall"] / run["requests"] * 1e3, 4)
            if mode == "http":
                section[mode]["cpu_ms"] = round(run["cpu"] / run["requests"] * 1e3, 4)
        out[dialect] = section
    chat_section = out["chat"]
    for dialect in dc.DIALECTS[1:]:
        mine = out[dialect]
        mine["overhead_vs_chat_ms_p50"] = round(
            mine["mixed_http"]["p50_ms"] - chat_section["mixed_http"]["p50_ms"], 3
        )
        mine["overhead_vs_chat"] = {
            "alone_http_p50_ms": round(mine["http"]["p50_ms"] - chat_section["http"]["p50_ms"], 3),
            "http_service_ms": round(mine["http"]["service_ms"]
                                     - chat_section["http"]["service_ms"], 4),
            "http_cpu_ms": round(mine["http"]["cpu_ms"] - chat_section["http"]["cpu_ms"], 4),
            "in_process_service_ms": round(mine["in_process"]["service_ms"]
                                           - chat_section["in_process"]["service_ms"], 4),
        }  # fmt: skip
        per_request = [mine["overhead_vs_chat_ms_p50"]] + [
            mine["overhead_vs_chat"][k] for k in ("http_service_ms", "http_cpu_ms",
                                                  "in_process_service_ms")]  # fmt: skip
        mine["within_target"] = all(v <= DIALECT_TARGET_MS for v in per_request)
    return out


CASES = ("loaded", "streaming", "separate_client", "dialects", "many_sessions")


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=256)
    parser.add_argument("--turns", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=5, help="rounds of the dialects case")
    parser.add_argument("--many", type=int, default=1000, help="sessions of the lost/mixed check")
    parser.add_argument("--stream-tokens", type=int, default=256, help="a streamed reply's ids")
    parser.add_argument("--only", default=",".join(CASES),
                        help=f"the cases to run, comma-separated (of {', '.join(CASES)}; "
                        "loaded includes unloaded)")  # fmt: skip
    parser.add_argument("--out", default=None)
    parser.add_argument("--client", default=None, help=argparse.SUPPRESS)  # the client process
    args = parser.parse_args(argv)
    if args.client:
        client_main(args.client, args.sessions, args.turns)
        return {}
    cases = [c.strip() for c in args.only.split(",") if c.strip()]
    unknown = sorted(set(cases) - set(CASES))
    if unknown:
        parser.error(f"--only: unknown case(s) {', '.join(unknown)}; the cases: {', '.join(CASES)}")
    folder = build_tiny_model(Path(tempfile.mkdtemp()) / "tiny")
    chat = ChatTemplate.load(str(folder))
    result: dict = {
        "benchmark": "gateway_bench",
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(),
                    "load_average_before": [round(x, 2) for x in os.getloadavg()]},
        "target_overhead_p50_ms": TARGET_OVERHEAD_MS,
    }  # fmt: skip
    if "loaded" in cases:
        result.update(measure(chat, args.sessions, args.turns))
    if "streaming" in cases:
        result["streaming"] = streaming(chat, args.stream_tokens)
    if "separate_client" in cases:
        result["separate_client"] = separate_client(chat, args.sessions, args.turns)
    if "dialects" in cases:
        result["dialects"] = dialect_costs(chat, args.sessions, args.turns, args.rounds)
    if "many_sessions" in cases:
        result["many_sessions"] = mixed_sessions(chat, args.many)
    result["machine"]["load_average_after"] = [round(x, 2) for x in os.getloadavg()]
    text = json.dumps(result, indent=2)
    print(text)
    if args.out:
        Path(args.out).write_text(text + "\n")
    return result


if __name__ == "__main__":
    main()
