"""`make demo`: train SmolLM2-135M-Instruct on the packaged calculator recipe, on the CPU.

Runs `agentfly train` (no argument: the default recipe), then reads the run's metrics and says
whether the model learned: the mean reward of the last 3 steps must be at least 0.6 and at
least 0.3 above the mean of the first 3 steps. Exit code 1 when it did not.

The run also holds 10% of the questions out of training and evaluates 16 of them (4 chains
each) before the first step, every 5 steps and at the end; the summary reports that held-out
reward next to the training curve (it is reported, not part of the verdict), and what the run
cost: minutes, peak memory (RSS) and the size of the run folder.

The run keeps one checkpoint, the final model without optimizer state
(``trainer.save_only_model``): the demo saves only at its end, so there is no point in the run
to resume from, and the optimizer state would double the folder (1.1 GB in float32).

Extra arguments go to `agentfly train` (e.g. `--set trainer.steps=30`).
"""

from __future__ import annotations

import json
import resource
import subprocess
import sys
import time
from pathlib import Path

TARGET_LAST = 0.6
TARGET_GAIN = 0.3
# 16 of the recipe's held-out questions (data.holdout: 10% that no run trains on)
HELD_OUT_EVAL = ["--set", "trainer.eval.every=5", "--set", "trainer.eval.limit=16"]
ONE_MODEL_CHECKPOINT = [
    "--set",
    "trainer.keep_checkpoints=1",
    "--set",
    "trainer.save_only_model=true",
]


def learning_verdict(metrics_path: Path) -> tuple[bool, str]:
    """Did the reward curve rise as the demo promises? And a one-line summary."""
    rewards = []
    held_out = []
    for line in metrics_path.read_text().splitlines():
        record = json.loads(line)
        if record.get("reward/mean") is not None:
            rewards.append(record["reward/mean"])
        if record.get("eval/reward_mean") is not None:
            held_out.append((record["step"], record["eval/reward_mean"]))
    if len(rewards) < 6:
        return False, f"only {len(rewards)} steps were logged; the demo needs at least 6"
    first = sum(rewards[:3]) / 3
    last = sum(rewards[-3:]) / 3
    ok = last >= TARGET_LAST and last - first >= TARGET_GAIN
    curve = " ".join(f"{r:.2f}" for r in rewards)
    summary = (
        f"reward per step: {curve}\nfirst 3 steps {first:.3f} -> last 3 steps {last:.3f} "
        f"(target: last >= {TARGET_LAST} and a gain >= {TARGET_GAIN}): "
        + ("learned" if ok else "did NOT reach the target")
    )
    if held_out:
        points = ", ".join(
            f"{reward:.3f} after step {step}" if step else f"{reward:.3f} before training"
            for step, reward in held_out
        )
        summary += f"\nheld-out questions (never trained on), mean reward: {points}"
    return ok, summary


def folder_bytes(folder: Path) -> int:
    """Bytes of the files under ``folder``."""
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())


def main(argv: list[str]) -> int:
    run_dir = Path("runs") / f"demo-{time.strftime('%Y%m%d-%H%M%S')}"
    argv = [*HELD_OUT_EVAL, *ONE_MODEL_CHECKPOINT, *argv]  # later --set flags win
    command = [sys.executable, "-m", "agentfly_cli", "train", "--out", str(run_dir), *argv]
    print(f"$ agentfly train --out {run_dir} {' '.join(argv)}".rstrip(), flush=True)
    started = time.perf_counter()
    code = subprocess.run(command, check=False).returncode
    minutes = (time.perf_counter() - started) / 60
    if code != 0:
        print(f"agentfly train failed (exit code {code})", file=sys.stderr)
        return code
    ok, summary = learning_verdict(run_dir / "metrics.jsonl")
    peak_gb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 2**20  # KiB on Linux
    size_gb = folder_bytes(run_dir) / 2**30
    print(
        f"\n{summary}\ntrained in {minutes:.1f} min, peak memory {peak_gb:.1f} GiB, "
        f"run folder {size_gb:.2f} GiB; curves: {run_dir / 'plot.png'}"
    )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
