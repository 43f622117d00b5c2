"""Sync against async training (``trainer.mode: async``, ``max_staleness`` 1 and 2), in one run.

Two cases, each trained for ``--steps`` steps per mode from the same model and seed:

- ``latency``: the calculator recipe with a ``calculator`` tool that waits 0.5-3 s
  (``--latency``) before it answers (uniform, drawn from a hash of the expression, so each
  mode meets the same latency for the same call), as real environments and tool servers do;
  the tool-latency-bound case.
- ``calculator``: the demo recipe as it is (``make demo``'s settings; no held-out eval).

Per case and mode: wall time of the steps (the sum of ``time/step_s``: rollouts or the wait
for them, update, weight sync), steps per hour, the trainer's idle fraction (sync: the
rollouts; async: waiting for finished groups), the producer's idle fraction (sync: the update
and sync; async: time with no batch rolling out), staleness and dropped groups, and the
training reward per step (one PNG per case draws the modes' curves). The sync run also reports
its ``overlap_ceiling``: the speedup a perfect overlap of its rollouts and updates would give
(an upper bound where both share the cores, since each then slows the other), and its
``cpu_ceiling``: the speedup at which the process's CPU work (``time/cpu_s``, every thread)
would fill every core; no overlap can beat the smaller of the two (``ceiling``). Every mode
reports ``cpu_cores_busy``, the cores its steps kept busy on average. Each mode runs in its own
process, one after another.

Run: .venv/bin/python benchmarks/async_bench.py [--model smollm2] [--steps 8]
     [--cases latency,calculator] [--modes sync,async1,async2] [--latency 0.5,3]
     [--out FILE] [--runs DIR]
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

CASES = ("latency", "calculator")
MODES = {"sync": [], "async1": ["trainer.max_staleness=1"], "async2": ["trainer.max_staleness=2"]}
LATENCY_S = (0.5, 3.0)


def latency_for(expression: str, latency: tuple[float, float] = LATENCY_S) -> float:
    """Uniform in ``latency`` (0.5-3 s), the same for the same expression in every run."""
    digest = hashlib.sha256(expression.encode("utf-8", "surrogatepass")).digest()
    share = int.from_bytes(digest[:8], "big") / 2**64
    low, high = latency
    return low + (high - low) * share


def slow_calculator_tool(latency: tuple[float, float] = LATENCY_S):
    """The built-in calculator behind a wait of ``latency`` seconds (an async tool: the event
    loop goes on)."""
    from agentfly_cli.components.tools import tool
    from tools_builtin.safe_eval import evaluate, format_number

    @tool(name="calculator", timeout=10.0)
    async def calculator(expression: str) -> str:
        """Evaluate an arithmetic expression and return the number.

        Args:
            expression: The expression to evaluate, for example "2**10 + 3*7".
        """
        await asyncio.sleep(latency_for(expression, latency))
        return format_number(evaluate(expression))

    return calculator


# ---- one run (a child process) ------------------------------------------------------------------
def run_one(
    case: str,
    mode: str,
    model: str,
    steps: int,
    run_dir: Path,
    sets: list[str],
    latency: tuple[float, float] = LATENCY_S,
) -> None:
    from agentfly_cli import load_config, run_training

    mode_sets = [] if mode == "sync" else ["trainer.mode=async", *MODES[mode]]
    config = load_config(
        "calculator",
        sets=[
            f"trainer.steps={steps}",
            "trainer.eval.every=0",
            "trainer.telemetry.sinks=[jsonl]",
            "trainer.save_trajectories=false",
            *mode_sets,
            *sets,
        ],
        model=model,
    )
    tools = [slow_calculator_tool(latency), "answer"] if case == "latency" else None
    run_training(config, tools=tools, out=run_dir)


# ---- the comparison -----------------------------------------------------------------------------
def overlap_ceiling(steps: list[dict[str, Any]]) -> float | None:
    """The most a sync run's steps/h could grow if each step's rollout ran wholly beside its
    update: the sum of step times over the sum of each step's longer phase (rollout, or update
    and sync). An upper bound: where both phases share the cores, each slows the other."""
    longer = sum(max(s["time/rollout_s"], s["time/step_s"] - s["time/rollout_s"]) for s in steps)
    return round(sum(s["time/step_s"] for s in steps) / longer, 3) if longer > 0 else None


def cpu_ceiling(step_s: float, cpu_s: float | None, cores: int) -> float | None:
    """The most a run's steps/h could grow before its CPU work (``cpu_s``, the sum of
    ``time/cpu_s``: every thread of the process) fills ``cores`` cores: its step time over its
    CPU time spread on them. None for metrics from before ``time/cpu_s`` was logged."""
    return round(step_s / (cpu_s / cores), 3) if cpu_s else None


def usable_cores() -> int:
    """The cores this process may run on (its affinity, else the machine's count)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def summarize(run_dir: Path, wall_s: float, cores: int | None = None) -> dict[str, Any]:
    lines = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    steps = [line for line in lines if "reward/mean" in line]
    step_s = sum(line["time/step_s"] for line in steps)
    rollout_s = sum(line["time/rollout_s"] for line in steps)  # async: the trainer's wait
    asynchronous = "async/trainer_wait_s" in steps[-1]
    if asynchronous:
        busy = steps[-1]["async/producer_busy_s"]
        producer_idle = max(0.0, 1.0 - busy / step_s) if step_s else 0.0
    else:
        producer_idle = 1.0 - rollout_s / step_s if step_s else 0.0
    out = {
        "steps": len(steps),
        "steps_wall_s": round(step_s, 1),
        "process_wall_s": round(wall_s, 1),
        "steps_per_hour": round(3600 * len(steps) / step_s, 2) if step_s else None,
        "trainer_idle_fraction": round(rollout_s / step_s, 3) if step_s else None,
        "producer_idle_fraction": round(producer_idle, 3),
        "reward": [round(line["reward/mean"], 4) for line in steps],
        "train_s_mean": round(statistics.mean(line["time/train_s"] for line in steps), 2),
        "sync_s_mean": round(statistics.mean(line["time/sync_s"] for line in steps), 3),
    }
    logged_cpu = all("time/cpu_s" in line for line in steps)
    cpu_s = sum(line["time/cpu_s"] for line in steps) if logged_cpu else None
    if cpu_s is not None and step_s:
        out["cpu_cores_busy"] = round(cpu_s / step_s, 2)
    if asynchronous:
        out["staleness_mean"] = round(
            statistics.mean(line.get("async/staleness_mean", 0.0) for line in steps), 3
        )
        out["dropped_groups"] = int(sum(line["async/dropped_groups"] for line in steps))
    else:
        out["overlap_ceiling"] = overlap_ceiling(steps)
        out["cpu_ceiling"] = cpu_ceiling(step_s, cpu_s, cores or usable_cores())
        bounds = [b for b in (out["overlap_ceiling"], out["cpu_ceiling"]) if b is not None]
        out["ceiling"] = min(bounds) if bounds else None
    return out


def reward_stats(rewards: list[float]) -> dict[str, float]:
    """Mean training reward over the run and over its second half, with standard errors."""
    half = rewards[len(rewards) // 2 :]

    def mean_se(values):
        if len(values) < 2:
            return values[0] if values else 0.0, 0.0
        return statistics.mean(values), statistics.stdev(values) / len(values) ** 0.5

    mean, se = mean_se(rewards)
    late, late_se = mean_se(half)
    return {
        "mean": round(mean, 4),
        "se": round(se, 4),
        "late": round(late, 4),
        "late_se": round(late_se, 4),
    }


def plot(case: str, results: dict[str, dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 3.6))
    for mode, result in results.items():
        rewards = result["reward"]
        label = f"{mode} ({result['steps_per_hour']:.0f} steps/h)"
        ax.plot(range(1, len(rewards) + 1), rewards, marker="o", label=label)
    ax.set_xlabel("step")
    ax.set_ylabel("training reward (mean)")
    ax.set_title(f"async_bench: {case}")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def latency_range(text: str) -> tuple[float, float]:
    """``LOW,HIGH`` seconds (0 <= LOW <= HIGH) for ``--latency``."""
    try:
        low, high = (float(part) for part in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not LOW,HIGH in seconds; write for example 0.5,3"
        ) from None
    if not 0 <= low <= high < float("inf"):
        raise argparse.ArgumentTypeError(f"{text!r}: need 0 <= LOW <= HIGH; write e.g. 0.5,3")
    return low, high


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2")
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--cases", default=",".join(CASES))
    parser.add_argument("--modes", default=",".join(MODES))
    parser.add_argument("--set", dest="sets", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument(
        "--latency",
        type=latency_range,
        default=LATENCY_S,
        metavar="LOW,HIGH",
        help="the latency case's tool wait in seconds, uniform (default 0.5,3)",
    )
    parser.add_argument("--out", type=Path, help="write the JSON here (and one PNG per case)")
    parser.add_argument("--runs", type=Path, help="keep the run folders here (default: a temp dir)")
    parser.add_argument(
        "--one", nargs=3, metavar=("CASE", "MODE", "RUN_DIR"), help=argparse.SUPPRESS
    )
    args = parser.parse_args(argv)
    if args.one:
        case, mode, run_dir = args.one
        run_one(case, mode, args.model, args.steps, Path(run_dir), args.sets, args.latency)
        return 0

    cases = [c for c in args.cases.split(",") if c]
    modes = [m for m in args.modes.split(",") if m]
    unknown = sorted({*cases} - set(CASES)) + sorted({*modes} - set(MODES))
    if unknown:
        print(f"error: unknown case or mode {', '.join(unknown)}; cases: {', '.join(CASES)}; "
              f"modes: {', '.join(MODES)}", file=sys.stderr)  # fmt: skip
        return 2
    runs = args.runs or Path(tempfile.mkdtemp(prefix="async-bench-"))
    report: dict[str, Any] = {
        "benchmark": "async_bench",
        "machine": f"{os.cpu_count()} CPUs, {platform.system().lower()}",
        "cores": usable_cores(),
        "model": args.model,
        "steps": args.steps,
        "latency_s": list(args.latency),
        "sets": args.sets,
        "cases": {},
    }
    for case in cases:
        results: dict[str, dict] = {}
        for mode in modes:
            run_dir = runs / case / mode
            shutil.rmtree(run_dir, ignore_errors=True)
            command = [sys.executable, __file__, "--model", args.model, "--steps", str(args.steps)]
            command += ["--latency", ",".join(str(x) for x in args.latency)]
            for item in args.sets:
                command += ["--set", item]
            command += ["--one", case, mode, str(run_dir)]
            started = time.perf_counter()
            done = subprocess.run(
                command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
            )
            wall = time.perf_counter() - started
            if done.returncode:
                tail = done.stderr.strip().splitlines()[-5:]
                print(f"error: {case}/{mode} failed: " + " | ".join(tail), file=sys.stderr)
                return 1
            results[mode] = summarize(run_dir, wall)
            results[mode]["reward_stats"] = reward_stats(results[mode]["reward"])
            print(f"{case}/{mode}: {json.dumps(results[mode])}", file=sys.stderr)
        if "sync" in results:
            base = results["sync"]["steps_per_hour"]
            for result in results.values():
                result["speedup_vs_sync"] = round(result["steps_per_hour"] / base, 3)
        report["cases"][case] = results
        if args.out:  # after each case: a run stopped later keeps the cases it finished
            args.out.parent.mkdir(parents=True, exist_ok=True)
            args.out.write_text(json.dumps(report, indent=1) + "\n")
            try:
                plot(case, results, args.out.with_name(f"{args.out.stem}-{case}.png"))
            except ImportError as exc:  # a bare GPU machine may lack matplotlib
                print(f"note: no plot of {case} ({exc}); the JSON has the curves", file=sys.stderr)
    print(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
