"""The ``python`` env between trajectories: how long a reset takes and how soon the next
trajectory's first cell answers.

One cycle is what a pool does per trajectory: a few cells (the trajectory), ``reset(None)``
(release), ``reset(task)`` (the next acquire), then the next trajectory's first cell. Three
paces: back to back (no pause anywhere: the worst case for a sandbox that is prepared in the
background), with a pause of ``--gap`` seconds before the next acquire, and model-paced (a pause
of ``--turn`` seconds before each cell, as a model writing its turns; the usual case in a
rollout). Also the cold start and a small cell's round trip. Per sandbox mode (bubblewrap when
it works, and the rlimit fallback).

Run: python benchmarks/sandbox_bench.py [--cycles 40] [--gap 0.05] [--turn 0.5] [--out FILE]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import platform
import sys
import time
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from envs_builtin.python_sandbox import PythonSandboxEnv, bwrap_problem  # noqa: E402

TRAJECTORY = ("x = 1", "import json\ny = json.dumps({'x': x})", "print(y)")


def summary(seconds: list[float]) -> dict[str, float]:
    """p50 / p90 / max in milliseconds."""
    ordered = sorted(seconds)

    def pick(q: float) -> float:
        return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1e3, 2)

    return {"n": len(ordered), "p50_ms": pick(0.5), "p90_ms": pick(0.9), "max_ms": pick(1.0)}


async def timed(action) -> float:
    started = time.perf_counter()
    await action
    return time.perf_counter() - started


async def cycles(mode: str, count: int, gap: float, turn: float = 0.0) -> dict:
    env = PythonSandboxEnv(sandbox=mode)
    await env.start()
    await env.reset({})
    resets, firsts, totals = [], [], []
    try:
        for _ in range(count):
            for code in TRAJECTORY:
                await asyncio.sleep(turn)
                await env.step(code)
            started = time.perf_counter()
            resets.append(await timed(env.reset(None)) + await timed(env.reset({})))
            if gap:
                await asyncio.sleep(gap)
            firsts.append(await timed(env.step("x = 2")))
            totals.append(time.perf_counter() - started - gap)
    finally:
        await env.close()
    return {"reset": summary(resets), "first_cell": summary(firsts), "total": summary(totals)}


async def basics(mode: str) -> dict:
    starts, cells = [], []
    for _ in range(5):
        env = PythonSandboxEnv(sandbox=mode)
        starts.append(await timed(env.start()))
        await env.close()
    env = PythonSandboxEnv(sandbox=mode)
    await env.start()
    try:
        await env.step("x = 1")
        for _ in range(200):
            cells.append(await timed(env.step("x += 1")))
    finally:
        await env.close()
    return {"cold_start": summary(starts), "cell": summary(cells), "mode": env.mode}


async def main(count: int, gap: float, turn: float) -> dict:
    modes = ["none"] if bwrap_problem() else ["bwrap", "none"]
    results: dict = {
        "benchmark": "sandbox_bench",
        "machine": {"python": platform.python_version(), "platform": platform.platform()},
        "cycles": count,
        "gap_s": gap,
        "turn_s": turn,
    }
    for mode in modes:
        results[mode] = {
            **await basics(mode),
            "back_to_back": await cycles(mode, count, 0.0),
            "with_gap": await cycles(mode, count, gap),
            "model_paced": await cycles(mode, max(count // 4, 5), 0.0, turn),
        }
    return results


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cycles", type=int, default=40)
    parser.add_argument("--gap", type=float, default=0.05)
    parser.add_argument("--turn", type=float, default=0.5)
    parser.add_argument("--out")
    arguments = parser.parse_args()
    warnings.simplefilter("ignore")
    report = json.dumps(
        asyncio.run(main(arguments.cycles, arguments.gap, arguments.turn)), indent=2
    )
    print(report)
    if arguments.out:
        Path(arguments.out).write_text(report + "\n")
