"""``agentfly train`` and ``agentfly export``: improve a model with RL; save it for others."""

from __future__ import annotations

from pathlib import Path

import typer

from agentfly_cli.cli.output import handle_errors, print_json, stdout_console
from agentfly_cli.cli.run_options import RunFlags, build_config, with_run_options

DEFAULT_RECIPE = "calculator"
# every shared option but the rollout-only ones (train's --out is a run folder, not a file)
TRAIN_OPTIONS = ("spec", "model", "backend", "data", "tools", "reward", "agent", "n")
TRAIN_OPTIONS += ("max_turns", "limit", "shuffle", "where", "template", "parser", "sets")


@handle_errors
@with_run_options(*TRAIN_OPTIONS)
def train(
    flags: RunFlags,
    steps: int | None = typer.Option(None, "--steps", help="Training steps.", min=1),
    out: str | None = typer.Option(None, "--out", help="Run folder (metrics, plot, checkpoints)."),
    resume: bool = typer.Option(
        False, "--resume", help="Continue the run in --out from its newest checkpoint."
    ),
    warm_start: bool | None = typer.Option(
        None,
        "--warm-start/--no-warm-start",
        help="First fine-tune on the recipe's packaged solutions of its training tasks "
        "(default: the recipe's trainer.warm_start.enabled).",
        show_default=False,
    ),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No live progress."),
    json_out: bool = typer.Option(False, "--json", help="Print the final metrics as JSON."),
) -> None:
    """Train a model with RL on a recipe (default: the calculator recipe on SmolLM2-135M)."""
    from agentfly_cli.api.training import run_training
    from agentfly_cli.cli.rollout_cmd import _quiet_transformers

    config = build_config(
        {**flags, "spec": flags["spec"] or DEFAULT_RECIPE},
        {"trainer.steps": steps, "trainer.warm_start.enabled": warm_start},
    )
    _quiet_transformers()
    result = run_training(config, out=out, resume=resume, console=not quiet)
    if not result.is_main:
        return  # one report per run, from rank 0
    last = result.final_metrics
    if json_out:
        print_json(
            {
                "run_dir": str(result.run_dir),
                "steps": result.steps,
                "last": last,
                "evals": result.evals,
            }
        )
        return
    console = stdout_console()
    console.print(f"run folder: {result.run_dir}  (metrics.jsonl, plot.png, checkpoints/)")
    console.print(f"export it: agentfly export {result.run_dir} OUT_FOLDER")


@handle_errors
def export(
    run_dir: Path = typer.Argument(..., help="A run folder of `agentfly train`, or a checkpoint."),
    out: Path = typer.Argument(..., help="Folder to write the Hugging Face model into."),
    force: bool = typer.Option(
        False, "--force", help="Replace OUT if an earlier export wrote it (or it is empty)."
    ),
) -> None:
    """Write the newest checkpoint of a run as a Hugging Face model folder."""
    from agentfly_cli.api.training import export_model

    written = export_model(run_dir, out, force=force)
    stdout_console().print(f"wrote {written} (load it with from_pretrained)")
