"""The learning table: what RL does to held-out reward, recipe by recipe.

For each recipe it runs the recipe's plain commands, as a user would, and reads their records:

1. ``base``: ``agentfly eval RECIPE --n 4`` on the recipe's held-out tasks (``data.holdout``:
   a fixed, seeded 10% that no phase trains on) with the model the recipe starts from.
2. ``train``: ``agentfly train RECIPE``, the recipe's defaults as they are: its warm start where
   the recipe enables one (``trainer.warm_start``), its curriculum and its RL settings; with a
   held-out eval on the same tasks (``trainer.eval.every``, 10 by default: before the first
   step, every 10 steps and after the last).
   The eval before step 1 scores the warm-started model (the base model without a warm start).

Per recipe the table gives held-out mean reward (with its standard error over tasks) and pass@k
of the base model, after the warm start, during RL and after it; RL's gain over its own starting
model; each phase's wall time; and the exact commands. One PNG per recipe draws the held-out
curve. Everything is recomputed from the run folders, so the table can be rebuilt at any time.

It resumes: a finished phase is never run again, and an interrupted training run continues from
its newest checkpoint (``--resume``; the warm start's model is reused). All recipes take hours on
a 2-core CPU: run one at a time (``--recipes search_qa``) and commit ``docs/learning/`` after
each.

The default recipes are the packaged ones; the bridges' rows (``BRIDGE_RECIPES``: the
environment libraries' own tasks, after ``make install-bridges``) run when named, e.g.
``--recipes reasoning_gym:chain_sum,bfcl:simple_python``; their folders and plots use ``_`` for
the ``:``.

Run: .venv/bin/python benchmarks/learning_table.py [--recipes code_math,search_qa]
     [--out docs/learning] [--runs runs/learning] [--redo | --redo-train] [--model M]
     [--set KEY=VALUE ...] [--table-only]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shlex
import shutil
import statistics
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

ROOT = Path(__file__).resolve().parents[1]
RECIPES = ["code_math", "search_qa", "chess_puzzles", "textworld", "scienceworld", "calculator"]
# the environment libraries' own tasks (docs/environments.md; `make install-bridges` first)
BRIDGE_RECIPES = [
    "reasoning_gym:chain_sum",
    "bfcl:simple_python",
    "textarena:GuessTheNumber-v0",
    "humaneval",
]
ALL_RECIPES = RECIPES + BRIDGE_RECIPES
EVAL_N = 4  # chains per held-out task, as the trainer's held-out eval (trainer.eval.n)
EVAL_EVERY = 10  # held-out evals of a training run: before it, every 10 steps and after it
SAVE_EVERY = 5  # checkpoints, so that a run cut by the end of a session resumes (--resume)
TABLE_FILE = "learning_table.json"
MARKDOWN_FILE = "learning_table.md"
DOC_PAGE = ROOT / "docs" / "learning.md"
BEGIN, END = "<!-- learning-table:begin -->", "<!-- learning-table:end -->"


# ---- commands ----------------------------------------------------------------------------------
def agentfly_command(*args: str) -> list[str]:
    return [sys.executable, "-m", "agentfly_cli", *args]


def shown(command: list[str]) -> str:
    """The command as a user types it: ``agentfly ...`` from the clone's root."""
    words = ["agentfly", *command[3:]]
    return " ".join(shlex.quote(_relative(word)) for word in words)


def _relative(word: str) -> str:
    try:
        return str(Path(word).resolve().relative_to(ROOT))
    except ValueError:
        return word


def base_command(recipe: str, run: Path, extra: list[str]) -> list[str]:
    return agentfly_command(
        "eval", recipe, "--n", str(EVAL_N), "--quiet", "--json",
        "--out", str(run / "base_eval.jsonl"), *extra,
    )  # fmt: skip


def train_command(
    recipe: str, run: Path, extra: list[str], resume: bool, eval_every: int = EVAL_EVERY
) -> list[str]:
    return agentfly_command(
        "train", recipe, "--out", str(run / "train"), "--quiet", "--json",
        *(["--resume"] if resume else []), "--set", f"trainer.eval.every={eval_every}",
        "--set", f"trainer.save_every={SAVE_EVERY}", *extra,
    )  # fmt: skip


def run_logged(command: list[str], log: Path, stdout: Path | None = None) -> tuple[int, float]:
    """Run ``command`` with its output in ``log`` (its stdout in ``stdout`` when given);
    (exit code, wall seconds)."""
    started = time.monotonic()
    with log.open("a", encoding="utf-8") as out:
        out.write(f"\n$ {shlex.join(command)}\n")
        out.flush()
        if stdout is None:
            done = subprocess.run(command, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT)
        else:
            with stdout.open("w", encoding="utf-8") as printed:
                done = subprocess.run(command, cwd=ROOT, stdout=printed, stderr=out)
    return done.returncode, round(time.monotonic() - started, 1)


# ---- reading the records -------------------------------------------------------------------
def task_means(trajectory_file: Path) -> dict[str, float]:
    """Mean reward per task of a trajectory file (chains of one task share its id)."""
    rewards: dict[str, list[float]] = defaultdict(list)
    with trajectory_file.open(encoding="utf-8") as lines:
        for line in lines:
            chain = json.loads(line)
            task = chain.get("task") or {}
            key = str(task.get("id", chain.get("task_index")))
            reward = chain.get("reward")
            rewards[key].append(float(reward) if reward is not None else 0.0)
    return {key: sum(values) / len(values) for key, values in rewards.items()}


def held_out_point(means: dict[str, float], metrics: dict[str, Any]) -> dict[str, Any]:
    """Mean, standard error over tasks, and pass@k of one held-out evaluation."""
    values = list(means.values())
    spread = statistics.stdev(values) / math.sqrt(len(values)) if len(values) > 1 else 0.0
    point = {"mean": round(statistics.fmean(values), 4), "stderr": round(spread, 4)}
    point["tasks"] = len(values)
    point.update({k: round(v, 4) for k, v in metrics.items() if k.startswith("pass@")})
    return point


def finished_eval(path: Path) -> dict[str, Any] | None:
    """What ``agentfly eval --json`` printed into ``path``, if it finished."""
    try:
        printed = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return printed if isinstance(printed, dict) and "eval" in printed else None


def read_base(printed: dict[str, Any]) -> dict[str, Any]:
    """The base point from what ``agentfly eval --json`` printed: its per-task mean@n rows."""
    report = printed["eval"]
    overall, mean_key = report["overall"], f"mean@{report['overall']['n']}"
    means = {
        str(row["task_index"] if row.get("id") is None else row["id"]): row[mean_key]
        for row in report["tasks"]
    }
    return held_out_point(means, {k: v for k, v in overall.items() if k.startswith("pass@")})


def read_train(run: Path) -> dict[str, Any]:
    """The held-out curve of a training run, its warm start, and its last training rewards."""
    folder = run / "train"
    records = [
        json.loads(line)
        for line in (folder / "metrics.jsonl").read_text(encoding="utf-8").splitlines()
        if line.strip()
    ]
    curve = []
    for record in records:
        if "eval/reward_mean" not in record:
            continue
        step = int(record["step"])
        means = task_means(folder / "trajectories" / f"eval-{step:06d}.jsonl")
        metrics = {k[len("eval/") :]: v for k, v in record.items() if k.startswith("eval/pass@")}
        curve.append({"step": step, **held_out_point(means, metrics)})
    steps = [r for r in records if "reward/mean" in r and "eval/reward_mean" not in r]
    out: dict[str, Any] = {
        "curve": curve,
        "train_reward": [round(r["reward/mean"], 4) for r in steps],
        "eval_seconds": round(sum(r.get("eval/seconds", 0.0) for r in records), 1),
        # the steps' own times (rollout, update, sync): right across a resume; setup, loading
        # and the held-out evals (eval_seconds) are not in it
        "rl_seconds": round(sum(r.get("time/step_s", 0.0) for r in records), 1),
    }
    levels = [r["curriculum/level"] for r in steps if "curriculum/level" in r]
    if levels:
        out["curriculum_levels"] = levels
    resolved = folder / "config.json"
    if resolved.is_file():  # the recipe's settings at the time: its defaults change over time
        out["settings"] = run_settings(json.loads(resolved.read_text(encoding="utf-8")))
    summary = folder / "warm_start" / "warm_start.json"
    if summary.is_file():
        out["warm_start"] = json.loads(summary.read_text(encoding="utf-8"))
        out["warm_start_seconds"] = out["warm_start"]["seconds"]
    return out


def run_settings(config: dict[str, Any]) -> dict[str, Any]:
    """The settings of a run that shape learning, from its resolved ``config.json``."""
    trainer, rollout = config.get("trainer", {}), config.get("rollout", {})
    warm = trainer.get("warm_start", {})
    algorithm = trainer.get("algorithm", {})
    return {
        "warm_start": {k: warm.get(k) for k in ("limit", "epochs", "lr")}
        if warm.get("enabled")
        else None,
        "curriculum": trainer.get("curriculum")
        if trainer.get("curriculum", {}).get("field")
        else None,
        "steps": trainer.get("steps"),
        "tasks_per_step": trainer.get("tasks_per_step"),
        "n": rollout.get("n"),
        "temperature": rollout.get("temperature"),
        "lr": trainer.get("backend", {}).get("lr"),
        "advantage": algorithm.get("advantage"),
        "entropy_coef": algorithm.get("entropy_coef"),
    }


# ---- running one recipe ----------------------------------------------------------------------
def folder_name(recipe: str) -> str:
    """A recipe's run folder and plot name: ``bfcl:simple_python`` -> ``bfcl_simple_python``."""
    return recipe.replace(":", "_")


def run_recipe(
    recipe: str,
    row: dict[str, Any],
    runs: Path,
    extra: list[str],
    redo: bool,
    eval_every: int = EVAL_EVERY,
    save: Any = lambda: None,
    extend: bool = False,
    redo_train: bool = False,
) -> None:
    """Run what is missing of ``recipe``'s row (updated in place; ``save()`` after a phase).

    ``extend``: a finished training run continues from its newest checkpoint to the steps
    its command asks for now (a recipe whose ``trainer.steps`` grew). ``redo_train``: train
    again from scratch (new RL settings), keeping the base model's eval."""
    run = runs / folder_name(recipe)
    if redo:
        shutil.rmtree(run, ignore_errors=True)
        row.pop("phases", None)
    elif redo_train:
        shutil.rmtree(run / "train", ignore_errors=True)
        row.get("phases", {}).pop("train", None)
    run.mkdir(parents=True, exist_ok=True)
    log = run / "log.txt"
    phases = row.setdefault("phases", {})
    if not phases.get("base", {}).get("done"):
        command = base_command(recipe, run, extra)
        printed = finished_eval(run / "base_eval.json")
        if printed is None:  # else: it finished, and the table was not saved after it
            print(f"[{recipe}] base: {shown(command)}", flush=True)
            code, _ = run_logged(command, log, stdout=run / "base_eval.json")
            printed = finished_eval(run / "base_eval.json")
            if code != 0 or printed is None:
                raise SystemExit(f"[{recipe}] base eval failed (exit {code}); see {log}")
        phases["base"] = {
            "done": True,
            "command": shown(command),
            "seconds": printed["summary"]["wall_s"],
            **read_base(printed),
        }
        save()
    train = phases.setdefault("train", {"attempts": []})
    folder = run / "train"
    resume = any((folder / "checkpoints").glob("step-*"))
    if train.get("done") and extend:
        if not resume:
            raise SystemExit(f"[{recipe}] --extend: no checkpoint in {folder / 'checkpoints'}")
        train["done"] = False
    if train.get("done"):
        return
    if folder.exists() and not resume:  # stopped before its first checkpoint: start over,
        for part in folder.iterdir():  # keeping a finished warm start
            if part.name != "warm_start":
                shutil.rmtree(part) if part.is_dir() else part.unlink()
    command = train_command(recipe, run, extra, resume, eval_every)
    print(f"[{recipe}] train: {shown(command)}", flush=True)
    code, seconds = run_logged(command, log)
    train["attempts"].append({"command": shown(command), "seconds": seconds, "exit": code})
    train["command"] = shown(train_command(recipe, run, extra, False, eval_every))
    if code != 0:
        raise SystemExit(f"[{recipe}] training failed (exit {code}); see {log}")
    train.update(read_train(run))
    train["done"] = True


# ---- the table -------------------------------------------------------------------------------
def summarize(recipe: str, row: dict[str, Any]) -> dict[str, Any]:
    """The numbers of one table row (None where a phase has not run)."""
    phases = row.get("phases", {})
    base = phases.get("base") if phases.get("base", {}).get("done") else None
    train = phases.get("train") if phases.get("train", {}).get("done") else None
    out: dict[str, Any] = {"recipe": recipe, "base": base and _point(base)}
    if train and train["curve"]:
        curve = train["curve"]
        start, end = curve[0], curve[-1]
        out["warm_start"] = _point(start) if "warm_start" in train else None
        out["rl_start"], out["rl_end"] = _point(start), _point(end)
        out["rl_gain"] = round(end["mean"] - start["mean"], 4)
        out["rl_gain_stderr"] = round(math.hypot(start["stderr"], end["stderr"]), 4)
        out["rl_steps"] = end["step"]
        out["warm_start_seconds"] = train.get("warm_start_seconds", 0.0)
        out["rl_seconds"] = train.get("rl_seconds")
        out["eval_seconds"] = train.get("eval_seconds")
    return out


def _point(point: dict[str, Any]) -> dict[str, Any]:
    keep = ("mean", "stderr", "tasks", "step")
    return {k: v for k, v in point.items() if k in keep or k.startswith("pass@")}


def largest_k(point: dict[str, Any]) -> int:
    """The largest k of the point's pass@k values (0 without any)."""
    return max((int(key.split("@")[1]) for key in point if key.startswith("pass@")), default=0)


def _cell(point: dict[str, Any] | None) -> str:
    if not point:
        return "-"
    k = largest_k(point)
    pass_k = f" (pass@{k} {point[f'pass@{k}']:.2f})" if k else ""
    return f"{point['mean']:.3f} ± {point['stderr']:.3f}{pass_k}"


def _minutes(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds / 60:.1f}"


def markdown(table: dict[str, Any]) -> str:
    lines = [
        "| recipe | base | after warm start | RL start -> end (steps) | RL gain | warm start min "
        "| RL steps min | held-out evals min |",
        "|---|---|---|---|---|---|---|---|",
    ]
    commands = []
    for recipe, row in table["recipes"].items():
        s = summarize(recipe, row)
        if "rl_end" in s:
            gain = f"{s['rl_gain']:+.3f} ± {s['rl_gain_stderr']:.3f}"
            rl = f"{_cell(s['rl_start'])} -> {_cell(s['rl_end'])} ({s['rl_steps']})"
            times = (
                _minutes(s["warm_start_seconds"]) if s["warm_start"] else "-",
                _minutes(s["rl_seconds"]),
                _minutes(s["eval_seconds"]),
            )
        else:
            gain, rl, times = "-", "-", ("-", "-", "-")
        lines.append(
            f"| `{recipe}` | {_cell(s['base'])} | {_cell(s.get('warm_start'))} | {rl} | {gain} "
            f"| {' | '.join(times)} |"
        )
        for phase in ("base", "train"):
            command = row.get("phases", {}).get(phase, {}).get("command")
            if command:
                commands.append(f"- `{recipe}` {phase}: `{command}`")
    notes = [
        "",
        "Held-out mean reward ± its standard error over tasks (pass@k: a chain passes at reward "
        f"1), {EVAL_N} chains per task. RL's start is the model RL begins from (the warm-started "
        "one where the recipe warm-starts). RL steps: rollouts, updates and weight syncs; the "
        "held-out evals (before RL, every `trainer.eval.every` steps as its train command "
        "sets, and after the last step) are timed apart.",
        "",
        "Commands (from the clone's root, after `make install` and `source .venv/bin/activate`):",
        "",
        *commands,
    ]
    return "\n".join(lines + notes) + "\n"


def plot(recipe: str, row: dict[str, Any], out: Path) -> Path | None:
    """One PNG of the held-out curve: RL steps against mean reward, the base as a line."""
    train = row.get("phases", {}).get("train", {})
    if not train.get("done") or not train.get("curve"):
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    curve = train["curve"]
    figure, axis = plt.subplots(figsize=(6, 4))
    axis.errorbar(
        [p["step"] for p in curve],
        [p["mean"] for p in curve],
        yerr=[p["stderr"] for p in curve],
        marker="o",
        capsize=3,
        label="held-out mean reward"
        + (" (step 0: after warm start)" if "warm_start" in train else ""),
    )
    k = largest_k(curve[0])
    if k > 1:
        axis.plot(
            [p["step"] for p in curve],
            [p[f"pass@{k}"] for p in curve],
            marker="s",
            linestyle=":",
            label=f"held-out pass@{k}",
        )
    base = row.get("phases", {}).get("base", {})
    if base.get("done"):
        axis.axhline(base["mean"], color="grey", linestyle="--", label="base model")
    axis.set(xlabel="RL step", ylabel="held-out score", title=recipe, ylim=(0, 1.05))
    axis.legend(loc="best")  # clear of the curves
    axis.grid(alpha=0.3)
    path = out / f"{folder_name(recipe)}.png"
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    plt.close(figure)
    return path


def write_outputs(table: dict[str, Any], out: Path) -> None:
    table["summary"] = [summarize(recipe, row) for recipe, row in table["recipes"].items()]
    (out / TABLE_FILE).write_text(json.dumps(table, indent=2) + "\n", encoding="utf-8")
    text = markdown(table)
    (out / MARKDOWN_FILE).write_text(text, encoding="utf-8")
    for recipe, row in table["recipes"].items():
        plot(recipe, row, out)
    if out.resolve() == (DOC_PAGE.parent / "learning").resolve() and DOC_PAGE.is_file():
        page = DOC_PAGE.read_text(encoding="utf-8")
        if BEGIN in page and END in page:
            head, rest = page.split(BEGIN, 1)
            _, tail = rest.split(END, 1)
            DOC_PAGE.write_text(f"{head}{BEGIN}\n{text}{END}{tail}", encoding="utf-8")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--recipes", default=",".join(RECIPES), help="comma-separated")
    parser.add_argument("--out", default=str(ROOT / "docs" / "learning"), help="table folder")
    parser.add_argument("--runs", default=str(ROOT / "runs" / "learning"), help="run folders")
    parser.add_argument(
        "--eval-every", type=int, default=EVAL_EVERY, help="held-out eval every N RL steps"
    )
    parser.add_argument("--redo", action="store_true", help="run the recipes' phases again")
    parser.add_argument(
        "--redo-train",
        action="store_true",
        help="run the training phase again (new RL settings), keeping the base eval",
    )
    parser.add_argument(
        "--extend",
        action="store_true",
        help="continue finished training runs from their last checkpoint to the recipe's steps",
    )
    parser.add_argument("--table-only", action="store_true", help="rebuild the outputs only")
    parser.add_argument("--model", help="another starting model for every phase (tests: tiny)")
    parser.add_argument("--set", action="append", default=[], dest="sets", help="KEY=VALUE")
    args = parser.parse_args(argv)
    out, runs = Path(args.out), Path(args.runs)
    out.mkdir(parents=True, exist_ok=True)
    path = out / TABLE_FILE
    table = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}
    table.setdefault("recipes", {})
    extra = [*(["--model", args.model] if args.model else [])]
    for item in args.sets:
        extra += ["--set", item]
    recipes = [name.strip() for name in args.recipes.split(",") if name.strip()]
    unknown = [name for name in recipes if name not in ALL_RECIPES]
    if unknown:
        print(f"error: unknown recipe {unknown[0]!r}; the table has {', '.join(ALL_RECIPES)}")
        return 2
    if args.table_only:  # recompute the finished rows from their run folders where present
        for recipe, row in table["recipes"].items():
            train = row.get("phases", {}).get("train", {})
            run = runs / folder_name(recipe)
            if train.get("done") and (run / "train" / "metrics.jsonl").is_file():
                train.update(read_train(run))
    else:
        for recipe in recipes:
            row = table["recipes"].setdefault(recipe, {})
            row["machine"] = f"{os.cpu_count()} CPUs, {sys.platform}"
            try:
                run_recipe(
                    recipe,
                    row,
                    runs,
                    extra,
                    args.redo,
                    args.eval_every,
                    save=lambda: write_outputs(table, out),
                    extend=args.extend,
                    redo_train=args.redo_train,
                )
            finally:
                write_outputs(table, out)  # what finished is kept, even when a phase failed
    write_outputs(table, out)
    print(json.dumps(table["summary"], indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
