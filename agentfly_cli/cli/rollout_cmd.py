"""``agentfly rollout`` and ``agentfly eval``: run agent chains and report on them."""

from __future__ import annotations

import contextlib
import math

import typer

from agentfly_cli.cli.output import (
    JSON_OPTION,
    handle_errors,
    print_json,
    stderr_console,
    stdout_console,
)
from agentfly_cli.cli.run_options import RunFlags, build_config, with_run_options

QUIET = typer.Option(False, "--quiet", "-q", help="No progress bar.")


def execute(config, *, quiet: bool, evaluate: float | None = None):
    """Run the rollout (or, with ``evaluate`` as the threshold, the evaluation) through the
    API, with a Rich progress bar on stderr; its result (an ``EvalReport`` when evaluating)."""
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    from agentfly_cli.api.experiment import Experiment

    _quiet_transformers()
    console = stderr_console()
    experiment = Experiment(config)
    with (
        console.status("loading model, template and tools…", spinner="dots")
        if not quiet
        else contextlib.nullcontext()
    ):
        experiment.load()
    tasks = experiment.tasks if evaluate is None else experiment.eval_tasks
    total = len(tasks) * config.rollout.n
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

        if evaluate is None:
            return experiment.rollout(out=config.out, on_finish=finished)
        return experiment.evaluate(threshold=evaluate, out=config.out, on_finish=finished)


def _quiet_transformers() -> None:
    """No weight-loading progress bars or advisory logs between our progress and summary."""
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    hf_logging.set_verbosity_error()


@handle_errors
@with_run_options()
def rollout(flags: RunFlags, quiet: bool = QUIET, as_json: bool = JSON_OPTION) -> None:
    """Roll out agent chains and write token-exact trajectories."""
    from agentfly_cli.api.settings import with_output_file
    from agentfly_cli.cli.rollout_report import print_report

    config = with_output_file(build_config(flags), "rollout")
    summary = execute(config, quiet=quiet or as_json).summary()
    if as_json:
        print_json({"summary": summary, "out": config.out})
        return
    print_report(summary, config.out)


@handle_errors
@with_run_options()
def evaluate(
    flags: RunFlags,
    threshold: float = typer.Option(
        1.0, "--threshold", help="A chain passes when its reward is at least this."
    ),
    quiet: bool = QUIET,
    as_json: bool = JSON_OPTION,
) -> None:
    """Evaluate: roll out n chains per task and report pass@k and mean@k."""
    from agentfly_cli.api.errors import UserError
    from agentfly_cli.api.settings import for_eval, with_output_file
    from agentfly_cli.cli.rollout_report import eval_tables, print_report

    if not math.isfinite(threshold):
        raise UserError(f"--threshold {threshold}: must be a finite number, e.g. 1 or 0.5")
    # a recipe's held-out tasks are what eval is for (--set data.split=train|all: others)
    config = with_output_file(for_eval(build_config(flags)), "eval")
    if not config.reward:
        raise UserError("eval needs a reward: pass --reward NAME (see `agentfly rewards list`)")
    report = execute(config, quiet=quiet or as_json, evaluate=threshold)
    if not report.tasks and report.overall.get("infra_failures"):
        causes = ", ".join(f"{c} {n}" for c, n in report.overall["infra_failures"].items())
        raise UserError(
            f"every chain of the eval ended in an infrastructure failure ({causes}), so "
            "nothing scores the model; fix the env, sandbox or backend named in the "
            "trajectories (`agentfly view` on --out) and run again"
        )
    summary = report.rollout.summary()
    if as_json:
        print_json({"summary": summary, "eval": report.to_dict(), "out": config.out})
        return
    console = stdout_console()
    for item in eval_tables(report.to_dict(), threshold):
        console.print(item)
    print_report(summary, config.out)
