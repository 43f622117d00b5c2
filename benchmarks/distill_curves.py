"""On-policy distillation vs RL from scratch: held-out reward per step, on one plot.

For each seed, two runs of ``agentfly train calculator`` from the same student (the recipe's
model, SmolLM2-135M-Instruct, unless ``--model``):

- ``rl``: RL from scratch (the recipe's GRPO on its reward);
- ``distill``: on-policy distillation from ``--teacher`` (``trainer.distill``; ``--mode only``:
  the teacher's per-token reverse KL is the whole advantage, ``add``: added to GRPO's).

Both hold out the recipe's held-out questions and evaluate ``--eval-limit`` of them (4 chains
each) before step 1 and every ``--eval-every`` steps; a point is the mean reward over those
tasks with its standard error over tasks (from the eval trajectories). ``--teacher`` takes a
model folder, a checkpoint folder (``.../checkpoints/step-000020``) or a run folder (its
latest checkpoint's ``model/``: what ``make demo`` leaves in ``runs/demo-*/``).

Writes OUT/curves.json and OUT/curves.png (both methods, every seed). A run whose folder
already holds its last eval is read, not run again; checkpoints are deleted after each run
unless ``--keep-checkpoints``. Example (about an hour on a 2-core CPU):

    python benchmarks/distill_curves.py --teacher runs/demo-20261204-012002
"""

from __future__ import annotations

import argparse
import json
import math
import shutil
import statistics
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

METHODS = ("rl", "distill")
LABELS = {"rl": "RL from scratch", "distill": "on-policy distillation"}


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--teacher", required=True, help="model, checkpoint or run folder")
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--eval-every", type=int, default=2)
    parser.add_argument("--eval-limit", type=int, default=16)
    parser.add_argument("--model", default=None, help="the student (default: the recipe's)")
    parser.add_argument("--mode", choices=["only", "add"], default="only")
    parser.add_argument("--coef", type=float, default=1.0)
    parser.add_argument("--recipe", default="calculator")
    parser.add_argument("--out", type=Path, default=None, help="default runs/distill-curves-TIME")
    parser.add_argument("--set", dest="sets", action="append", default=[], help="both methods")
    parser.add_argument("--rl-set", action="append", default=[], help="RL runs only")
    parser.add_argument("--distill-set", action="append", default=[], help="distillation only")
    parser.add_argument("--keep-checkpoints", action="store_true")
    args = parser.parse_args(argv)
    if args.out is None:
        args.out = Path("runs") / f"distill-curves-{time.strftime('%Y%m%d-%H%M%S')}"
    return args


def teacher_folder(path: Path) -> Path:
    """The model folder of ``path``: a run folder's latest checkpoint's ``model/`` (a run
    folder's own config.json is its settings), a checkpoint's ``model/``, or itself."""
    steps = sorted((path / "checkpoints").glob("step-*"))
    if steps and (steps[-1] / "model" / "config.json").exists():
        return steps[-1] / "model"
    if (path / "model" / "config.json").exists():
        return path / "model"
    if (path / "config.json").exists() and not (path / "metrics.jsonl").exists():
        return path
    raise SystemExit(
        f"--teacher: no model in {path} (no config.json, model/ or checkpoints/step-*/model/); "
        "pass a model folder, a checkpoint or a finished run folder (make demo: runs/demo-*)"
    )


def train_command(args: argparse.Namespace, method: str, seed: int, run_dir: Path) -> list[str]:
    """The ``agentfly train`` command line of one run (later --set flags win)."""
    sets = [
        f"trainer.steps={args.steps}",
        f"trainer.eval.every={args.eval_every}",
        f"trainer.eval.limit={args.eval_limit}",
        f"trainer.seed={seed}",
        f"rollout.seed={seed}",
        "trainer.keep_checkpoints=1",
        "trainer.save_only_model=true",
        *args.sets,
    ]
    if method == "distill":
        sets += [
            f"trainer.distill.teacher={teacher_folder(Path(args.teacher))}",
            f"trainer.distill.mode={args.mode}",
            f"trainer.distill.coef={args.coef}",
            *args.distill_set,
        ]
    else:
        sets += args.rl_set
    command = [sys.executable, "-m", "agentfly_cli", "train", args.recipe, "--out", str(run_dir)]
    if args.model:
        command += ["--model", args.model]
    for item in sets:
        command += ["--set", item]
    return command + ["--quiet"]


def task_means(trajectory_file: Path) -> list[float]:
    """Mean reward per task of an eval's trajectory file."""
    rewards: dict[Any, list[float]] = defaultdict(list)
    for line in trajectory_file.read_text(encoding="utf-8").splitlines():
        chain = json.loads(line)
        reward = chain.get("reward")
        rewards[chain.get("task_index")].append(0.0 if reward is None else float(reward))
    return [sum(v) / len(v) for v in rewards.values()]


def eval_curve(run_dir: Path) -> list[dict[str, float]]:
    """The run's held-out points: step, mean reward (``eval/reward_mean``) and, where its
    eval trajectories were written, the standard error over tasks."""
    points = []
    for line in (run_dir / "metrics.jsonl").read_text().splitlines():
        record = json.loads(line)
        if record.get("eval/reward_mean") is None:
            continue
        step = int(record["step"])
        point = {"step": step, "mean": round(record["eval/reward_mean"], 4)}
        chains = run_dir / "trajectories" / f"eval-{step:06d}.jsonl"
        if chains.exists():
            means = task_means(chains)
            spread = statistics.stdev(means) / math.sqrt(len(means)) if len(means) > 1 else 0.0
            point["stderr"] = round(spread, 4)
        points.append(point)
    return points


def finished(run_dir: Path, steps: int) -> bool:
    """The run folder holds the eval after its last step."""
    try:
        return any(p["step"] == steps for p in eval_curve(run_dir))
    except (OSError, ValueError):
        return False


def mean_curves(runs: list[dict[str, Any]]) -> dict[str, list[dict[str, float]]]:
    """Per method, the mean over its seeds of the held-out reward at each step they share."""
    out = {}
    for method in METHODS:
        curves = [r["curve"] for r in runs if r["method"] == method]
        if not curves:
            continue
        steps = sorted(set.intersection(*({p["step"] for p in c} for c in curves)))
        out[method] = [
            {
                "step": step,
                "mean": round(
                    statistics.fmean(p["mean"] for c in curves for p in c if p["step"] == step), 4
                ),
            }  # fmt: skip
            for step in steps
        ]
    return out


def write_plot(runs: list[dict[str, Any]], path: Path, title: str) -> None:
    """Every run's held-out curve (error bars: standard error over tasks), one colour per
    method, one line style per seed, and each method's mean over seeds in bold."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import matplotlib.ticker

    colours = {"rl": "tab:blue", "distill": "tab:orange"}
    styles = ["--", ":", "-.", (0, (5, 1))]
    seeds = sorted({r["seed"] for r in runs})
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for run in runs:
        curve = run["curve"]
        ax.errorbar(
            [p["step"] for p in curve],
            [p["mean"] for p in curve],
            yerr=[p.get("stderr", 0.0) for p in curve],
            color=colours[run["method"]],
            linestyle=styles[seeds.index(run["seed"]) % len(styles)],
            alpha=0.6,
            capsize=2,
            label=f"{LABELS[run['method']]}, seed {run['seed']}",
        )
    for method, curve in mean_curves(runs).items():
        ax.plot(
            [p["step"] for p in curve],
            [p["mean"] for p in curve],
            color=colours[method],
            linewidth=2.5,
            label=f"{LABELS[method]}, mean",
        )
    ax.xaxis.set_major_locator(matplotlib.ticker.MaxNLocator(integer=True))
    ax.set_xlabel("training step")
    ax.set_ylabel("held-out mean reward")
    ax.set_ylim(-0.02, 1.02)
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def run_one(args: argparse.Namespace, method: str, seed: int) -> dict[str, Any]:
    """One run (or the finished one already in its folder) and its held-out curve."""
    run_dir = args.out / f"{method}-seed{seed}"
    command = train_command(args, method, seed, run_dir)
    started = time.perf_counter()
    if finished(run_dir, args.steps):
        print(f"{run_dir}: finished earlier, read as it is", flush=True)
    else:
        shutil.rmtree(run_dir, ignore_errors=True)  # a half-finished run starts over
        print("$ " + " ".join(command[1:]), flush=True)
        code = subprocess.run(command, check=False).returncode
        if code != 0:
            raise SystemExit(f"{method} seed {seed}: agentfly train failed (exit code {code})")
    if not args.keep_checkpoints:
        shutil.rmtree(run_dir / "checkpoints", ignore_errors=True)
    curve = eval_curve(run_dir)
    minutes = round((time.perf_counter() - started) / 60, 2)
    print(f"{method} seed {seed}: " + " ".join(f"{p['step']}:{p['mean']:.3f}" for p in curve))
    return {"method": method, "seed": seed, "run_dir": str(run_dir), "minutes": minutes,
            "command": command[1:], "curve": curve}  # fmt: skip


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    teacher = teacher_folder(Path(args.teacher))
    args.out.mkdir(parents=True, exist_ok=True)
    runs = [run_one(args, method, seed) for seed in args.seeds for method in METHODS]
    result = {
        "teacher": str(teacher),
        "student": args.model or f"the {args.recipe} recipe's model",
        "mode": args.mode,
        "coef": args.coef,
        "steps": args.steps,
        "eval_every": args.eval_every,
        "eval_limit": args.eval_limit,
        "seeds": args.seeds,
        "sets": args.sets,
        "runs": runs,
        "mean": mean_curves(runs),
    }
    (args.out / "curves.json").write_text(json.dumps(result, indent=2) + "\n")
    title = f"held-out reward: distillation ({args.mode}) vs RL, seeds {args.seeds}"
    write_plot(runs, args.out / "curves.png", title)
    print(f"wrote {args.out / 'curves.json'} and {args.out / 'curves.png'}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
