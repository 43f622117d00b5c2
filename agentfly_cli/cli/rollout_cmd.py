"""``agentfly rollout`` and ``agentfly eval``: run agent chains and report on them."""

from __future__ import annotations

import contextlib
import math
import time
from pathlib import Path
from typing import Any

import typer

from agentfly_cli.cli.output import (
    JSON_OPTION,
    handle_errors,
    print_json,
    stderr_console,
    stdout_console,
)

SPEC = typer.Argument(None, help="A recipe name (see `agentfly recipes list`) or a YAML config.")
MODEL = typer.Option(None, "--model", help="Model folder, or an alias: tiny, smollm2.")
BACKEND = typer.Option(None, "--backend", help="hf, vllm, openai, scripted, or a plugin's.")
SCRIPT = typer.Option(None, "--script", help="scripted backend: JSONL of responses per task.")
DATA = typer.Option(None, "--data", help="Tasks: JSONL, JSON, Parquet or a datasets folder.")
TOOLS = typer.Option(None, "--tools", help="Comma-separated tool names (or module:attr).")
REWARD = typer.Option(None, "--reward", help="Reward name (or module:attr).")
N = typer.Option(None, "--n", help="Chains per task.", min=1)
MAX_TURNS = typer.Option(None, "--max-turns", help="Assistant turns per chain.", min=1)
LIMIT = typer.Option(None, "--limit", help="Use only the first N tasks.", min=1)
WHERE = typer.Option(
    None, "--where", help="Keep only tasks whose field matches: --where kind=shopping,change"
)
TEMPLATE = typer.Option(None, "--template", help="Chat template: a packaged name or .jinja file.")
PARSER = typer.Option(None, "--parser", help="Tool-call format: hermes, line, react, ...")
BASE_URL = typer.Option(None, "--base-url", help="openai backend: server URL (…/v1).")
SETS = typer.Option(None, "--set", help="Override any config field: --set rollout.top_p=0.9")
OUT = typer.Option(
    None, "--out", help="Trajectory JSONL file (default: runs/<recipe>-<command>-<time>.jsonl)."
)
QUIET = typer.Option(False, "--quiet", "-q", help="No progress bar.")


def build_config(spec, **flags: Any):
    """The run config from a recipe/YAML plus the flags that were given."""
    from agentfly_cli.config import load_config

    fields = {
        "model": flags.get("model"),
        "backend.name": flags.get("backend"),
        "backend.script": flags.get("script"),
        "backend.base_url": flags.get("base_url"),
        "data.path": flags.get("data"),
        "data.limit": flags.get("limit"),
        # each --where field is added to the recipe's own data.where (or replaces that field)
        **{f"data.where.{k}": v for k, v in (parse_where(flags.get("where")) or {}).items()},
        "tools": flags.get("tools"),
        "reward": flags.get("reward"),
        "rollout.n": flags.get("n"),
        "rollout.max_turns": flags.get("max_turns"),
        "chat.template": flags.get("template"),
        "chat.parser": flags.get("parser"),
        # a new format starts without the recipe's options for the old one (--set can add some)
        "chat.parser_options": {} if flags.get("parser") else None,
        "out": flags.get("out"),
    }
    return load_config(spec, flags.get("sets") or [], **fields)


def parse_where(items: list[str] | None) -> dict[str, Any] | None:
    """``--where FIELD=VALUE[,VALUE...]`` flags as ``data.where``; None when none were given."""
    from agentfly_cli.errors import UserError

    if not items:
        return None
    where: dict[str, Any] = {}
    for item in items:
        field, sep, values = item.partition("=")
        if not sep or not field.strip() or not values.strip():
            raise UserError(f"--where {item!r}: expected FIELD=VALUE, e.g. --where kind=shopping")
        choices = [v.strip() for v in values.split(",") if v.strip()]
        where[field.strip()] = choices[0] if len(choices) == 1 else choices
    return where


def execute(config, *, quiet: bool, out: str | None):
    """Build and run the rollout with a Rich progress bar on stderr."""
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    from agentfly_cli.rollout.runner import build_rollout, run_rollout

    _quiet_transformers()
    console = stderr_console()
    with (
        console.status("loading model, template and tools…", spinner="dots")
        if not quiet
        else contextlib.nullcontext()
    ):
        run = build_rollout(config)
    total = len(run.tasks) * config.rollout.n
    rewards: list[float] = []
    progress = Progress(
        TextColumn("[bold]rollout[/bold]"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("chains · mean reward {task.fields[reward]}"),
        TimeElapsedColumn(),
        TextColumn("eta"),
        TimeRemainingColumn(),
        console=console,
        disable=quiet,
        transient=False,
    )
    with progress:
        bar = progress.add_task("rollout", total=total, reward="-")

        def finished(trajectory) -> None:
            if trajectory.reward is not None:
                rewards.append(trajectory.reward)
            mean = f"{sum(rewards) / len(rewards):.3f}" if rewards else "-"
            progress.update(bar, advance=1, reward=mean)

        result = run_rollout(run, out=out, on_finish=finished)
    return run, result


def _quiet_transformers() -> None:
    """No weight-loading progress bars or advisory logs between our progress and summary."""
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    hf_logging.set_verbosity_error()


@handle_errors
def rollout(
    spec: str = SPEC,
    model: str = MODEL,
    backend: str = BACKEND,
    script: Path = SCRIPT,
    data: Path = DATA,
    tools: str = TOOLS,
    reward: str = REWARD,
    n: int = N,
    max_turns: int = MAX_TURNS,
    limit: int = LIMIT,
    where: list[str] = WHERE,
    template: str = TEMPLATE,
    parser: str = PARSER,
    base_url: str = BASE_URL,
    out: Path = OUT,
    sets: list[str] = SETS,
    quiet: bool = QUIET,
    as_json: bool = JSON_OPTION,
) -> None:
    """Roll out agent chains and write token-exact trajectories."""
    from agentfly_cli.cli.rollout_report import print_report

    config = with_output_file(
        build_config(**locals_without(locals(), "quiet", "as_json")), "rollout"
    )
    _, summary = run_and_summarize(config, quiet=quiet or as_json)
    if as_json:
        print_json({"summary": summary, "out": config.out})
        return
    print_report(summary, config.out)


@handle_errors
def evaluate(
    spec: str = SPEC,
    model: str = MODEL,
    backend: str = BACKEND,
    script: Path = SCRIPT,
    data: Path = DATA,
    tools: str = TOOLS,
    reward: str = REWARD,
    n: int = N,
    max_turns: int = MAX_TURNS,
    limit: int = LIMIT,
    where: list[str] = WHERE,
    template: str = TEMPLATE,
    parser: str = PARSER,
    base_url: str = BASE_URL,
    out: Path = OUT,
    sets: list[str] = SETS,
    threshold: float = typer.Option(
        1.0, "--threshold", help="A chain passes when its reward is at least this."
    ),
    quiet: bool = QUIET,
    as_json: bool = JSON_OPTION,
) -> None:
    """Evaluate: roll out n chains per task and report pass@k and mean@k."""
    from agentfly_cli.cli.rollout_report import eval_tables, print_report
    from agentfly_cli.errors import UserError
    from agentfly_cli.rollout.summary import evaluate as evaluate_trajectories

    if not math.isfinite(threshold):
        raise UserError(f"--threshold {threshold}: must be a finite number, e.g. 1 or 0.5")
    config = build_config(**locals_without(locals(), "quiet", "as_json", "threshold"))
    if config.data.holdout and "split" not in config.data.model_fields_set:
        # a recipe's held-out tasks are what eval is for (--set data.split=train|all: others)
        config = config.model_copy(
            update={"data": config.data.model_copy(update={"split": "heldout"})}
        )
    config = with_output_file(config, "eval")
    if not config.reward:
        raise UserError("eval needs a reward: pass --reward NAME (see `agentfly rewards list`)")
    result, summary = run_and_summarize(config, quiet=quiet or as_json)
    report = evaluate_trajectories(result.trajectories, threshold)
    if as_json:
        print_json({"summary": summary, "eval": report, "out": config.out})
        return
    console = stdout_console()
    for item in eval_tables(report, threshold):
        console.print(item)
    print_report(summary, config.out)


def with_output_file(config, command: str):
    """The config with ``out`` set (a default under ``runs/`` when none was given) and checked
    for writability before anything loads: a rollout's chains are never thrown away."""
    from agentfly_cli.output_paths import check_file_target

    out = config.out or str(
        _fresh_path(f"{config.name}-{command}-{time.strftime('%Y%m%d-%H%M%S')}")
    )
    check_file_target(out, "--out")
    return config.model_copy(update={"out": out})


def _fresh_path(stem: str) -> Path:
    """``runs/<stem>.jsonl``, or ``runs/<stem>-2.jsonl`` (and so on) if that one exists."""
    path, number = Path("runs") / f"{stem}.jsonl", 1
    while path.exists():
        number += 1
        path = Path("runs") / f"{stem}-{number}.jsonl"
    return path


def run_and_summarize(config, *, quiet: bool):
    """Run the rollout (``--out`` is ``config.out``) and its summary, with the run's facts."""
    from agentfly_cli.rollout.summary import summarize

    run, result = execute(config, quiet=quiet, out=config.out)
    summary = summarize(result.trajectories, result.wall_s)
    summary.update(run.info)
    if result.envs:
        summary["envs"] = result.envs
    return result, summary


def locals_without(values: dict[str, Any], *names: str) -> dict[str, Any]:
    kept = {k: v for k, v in values.items() if k not in names}
    for key in ("script", "data", "out"):
        if kept.get(key) is not None:
            kept[key] = str(kept[key])
    return kept
