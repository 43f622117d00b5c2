"""Env pool overheads: warm acquire/release, and what each provider adds to a step.

What it measures (the ``scratchpad`` env, whose own work is a dict lookup, so the numbers are
the pool's and the provider's cost):

- ``local``: 10,000 warm acquire/release cycles in-process (acquire resets the env for its
  task, release resets it and checks its health); p50/p99. Target: p50 < 1 ms. Also the same
  cycles with 64 tasks contending for 8 envs (leases per second).
- ``process``, ``ray``, ``server`` (a pool server over a unix socket): cold start of one env,
  warm acquire/release cycles, and one ``step`` round trip, each against the in-process
  figure measured in the same run. Ray is skipped when it is not installed.
- ``python``: the sandboxed interpreter env: cold start and one small cell, when bubblewrap
  is installed (else the rlimit fallback, as reported).

Run: python benchmarks/pool_bench.py [--cycles 10000] [--out FILE.json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from agentfly_cli.envs.pool import EnvPool
from agentfly_cli.envs.providers import make_provider  # noqa: E402
from agentfly_cli.settings.envs import PoolLimits
from envs_builtin.scratchpad import SCRATCHPAD  # noqa: E402

STEP = {"op": "list"}


def summary(seconds: list[float]) -> dict[str, float]:
    """p50 / p99 / mean in microseconds."""
    ordered = sorted(seconds)

    def pick(q: float) -> float:
        return ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1e6

    return {
        "n": len(ordered),
        "p50_us": round(pick(0.50), 1),
        "p99_us": round(pick(0.99), 1),
        "mean_us": round(statistics.fmean(ordered) * 1e6, 1),
    }


async def timed(times: int, action: Callable[[], Awaitable[object]]) -> list[float]:
    out = []
    for _ in range(times):
        started = time.perf_counter()
        await action()
        out.append(time.perf_counter() - started)
    return out


async def pool_cycles(pool, cycles: int) -> list[float]:
    async def cycle():
        async with pool.lease({}):
            pass

    for _ in range(min(100, cycles)):  # warm-up
        await cycle()
    return await timed(cycles, cycle)


async def step_times(pool, steps: int) -> list[float]:
    async with pool.lease({}) as handle:
        for _ in range(min(50, steps)):
            await handle.env.step(STEP)
        return await timed(steps, lambda: handle.env.step(STEP))


async def cold_starts(provider, starts: int) -> list[float]:
    out = []
    for _ in range(starts):
        started = time.perf_counter()
        handle = await provider.create(SCRATCHPAD, {})
        await handle.start()
        out.append(time.perf_counter() - started)
        await handle.close()
    return out


def make_pool(provider_name: str, pool_max: int = 8, warm: int = 1, **settings) -> EnvPool:
    provider = make_provider(provider_name, **settings)
    limits = PoolLimits.from_spec(SCRATCHPAD, pool_max=pool_max, warm_size=warm)
    return EnvPool(SCRATCHPAD, provider, limits)


async def bench_local(cycles: int) -> dict:
    async with make_pool("local") as pool:
        cycle = summary(await pool_cycles(pool, cycles))
        step = summary(await step_times(pool, cycles))
    async with make_pool("local", pool_max=8, warm=8) as pool:
        per_task = cycles // 64

        async def worker():
            for _ in range(per_task):
                async with pool.lease({}):
                    await asyncio.sleep(0)

        started = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(64)))
        wall = time.perf_counter() - started
        contended = {
            "tasks": 64,
            "pool_max": 8,
            "leases": per_task * 64,
            "leases_per_s": round(per_task * 64 / wall),
            "stats": pool.stats().as_dict(),
        }
    return {
        "acquire_release": cycle,
        "step": step,
        "contended": contended,
        "target_p50_us": 1000,
        "meets_target": cycle["p50_us"] < 1000,
    }


async def bench_provider(name: str, cycles: int, starts: int, **settings) -> dict:
    provider = make_provider(name, **settings)
    try:
        [first] = await cold_starts(provider, 1)  # includes connecting (ray.init) and imports
        cold = summary(await cold_starts(provider, starts))
    finally:
        await provider.shutdown()
    async with make_pool(name, **settings) as pool:
        cycle = summary(await pool_cycles(pool, cycles))
        step = summary(await step_times(pool, cycles))
    return {
        "first_start_s": round(first, 3),
        "cold_start": cold,
        "acquire_release": cycle,
        "step": step,
    }


async def bench_server(cycles: int) -> dict:
    from agentfly_cli.envs.manager import ResourceManager
    from agentfly_cli.pool_server.server import PoolServer
    from agentfly_cli.settings.envs import EnvPoolSettings

    folder = tempfile.mkdtemp(prefix="agentfly-bench-")
    address = f"unix://{folder}/pad.sock"
    server = PoolServer(SCRATCHPAD, EnvPoolSettings(pool_max=8, warm_size=1), address)
    serving = asyncio.create_task(server.serve())
    while server._server is None:
        await asyncio.sleep(0.01)
    manager = ResourceManager(
        {"scratchpad": SCRATCHPAD}, {"scratchpad": EnvPoolSettings(address=address)}
    )
    try:
        async with manager:
            pool = manager._pools["scratchpad"]
            cycle = summary(await pool_cycles(pool, cycles))
            step = summary(await step_times(pool, cycles))
    finally:
        server.stop()
        await serving
    return {"acquire_release": cycle, "step": step, "transport": "unix socket, JSON frames"}


async def bench_python(cells: int) -> dict:
    try:
        from envs_builtin.python_sandbox import PYTHON, bwrap_problem
    except ImportError as exc:
        return {"skipped": f"python env unavailable: {exc}"}
    # the env refuses to start without bubblewrap; the bench's own cells may run without it
    options = {"sandbox": "bwrap" if bwrap_problem() is None else "none"}
    starts = []
    for _ in range(5):
        env = PYTHON.create(**options)
        started = time.perf_counter()
        await env.start()
        starts.append(time.perf_counter() - started)
        await env.close()
    env = PYTHON.create(**options)
    await env.start()
    try:
        await env.step({"code": "x = 1"})
        runs = await timed(cells, lambda: env.step({"code": "x += 1"}))
        isolation = env.mode  # "bwrap", or "none": rlimits only (no bubblewrap here)
    finally:
        await env.close()
    return {"cold_start": summary(starts), "cell": summary(runs), "isolation": isolation}


async def main(cycles: int, starts: int) -> dict:
    results: dict = {
        "benchmark": "pool_bench",
        "machine": {
            "python": platform.python_version(),
            "cpus": os.cpu_count(),
            "platform": platform.platform(),
        },
        "env": "scratchpad",
        "cycles": cycles,
    }
    results["local"] = await bench_local(cycles)
    small = max(200, cycles // 10)
    results["process"] = await bench_provider("process", small, starts)
    try:
        import ray  # noqa: F401
    except ImportError:
        results["ray"] = {"skipped": "ray is not installed (make install-ray)"}
    else:
        results["ray"] = await bench_provider("ray", small, starts)
    results["server"] = await bench_server(small)
    results["python"] = await bench_python(100)
    local_step = results["local"]["step"]["p50_us"]
    results["step_overhead_vs_local_p50_us"] = {
        name: round(results[name]["step"]["p50_us"] - local_step, 1)
        for name in ("process", "ray", "server")
        if "step" in results[name]
    }
    return results


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cycles", type=int, default=10_000)
    parser.add_argument("--starts", type=int, default=10)
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    report = asyncio.run(main(args.cycles, args.starts))
    text = json.dumps(report, indent=2)
    print(text)
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(text + "\n")
