"""``agentfly sft``: supervised fine-tuning on trajectories, the warm start before RL."""

from __future__ import annotations

from pathlib import Path

import typer

from agentfly_cli.cli.output import handle_errors, print_json, stdout_console

SETS = typer.Option(
    None, "--set", help="Override any SFT setting: --set backend.lr_schedule=constant"
)


@handle_errors
def sft(
    trajectories: list[Path] = typer.Argument(
        ..., help="Trajectory JSONL files (`agentfly rollout --out`)."
    ),
    out: Path = typer.Option(..., "--out", help="Run folder: model/, sft.json, metrics, plot."),
    model: str | None = typer.Option(
        None, "--model", help="Model folder or alias; default: the one the chains were made for."
    ),
    epochs: int | None = typer.Option(None, "--epochs", help="Passes over the chains.", min=1),
    lr: float | None = typer.Option(None, "--lr", help="Peak learning rate (default 5e-5)."),
    batch_size: int | None = typer.Option(
        None, "--batch-size", help="Chains per optimizer step.", min=1
    ),
    min_reward: float | None = typer.Option(
        None, "--min-reward", help="Keep only chains that scored at least this."
    ),
    holdout: float | None = typer.Option(
        None, "--holdout", help="Share of tasks held out to measure loss on (default 0.1)."
    ),
    force: bool = typer.Option(False, "--force", help="Replace OUT/model if it exists."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No live progress."),
    json_out: bool = typer.Option(False, "--json", help="Print the summary as JSON."),
    sets: list[str] | None = SETS,
) -> None:
    """Fine-tune a model on the trained tokens of trajectories (e.g. scripted solutions)."""
    from agentfly_cli.api.training import heldout_tasks_file, run_sft, sft_folder, sft_settings
    from agentfly_cli.cli.rollout_cmd import _quiet_transformers

    sft_folder(out)

    settings = sft_settings(
        sets or [],
        **{
            "epochs": epochs,
            "backend.lr": lr,
            "batch_size": batch_size,
            "min_reward": min_reward,
            "holdout": holdout,
        },
    )
    _quiet_transformers()
    result = run_sft(
        trajectories,
        out=out,
        settings=settings,
        model=model,
        console=not quiet and not json_out,
        force=force,
    )
    if json_out:
        print_json(result.summary())
        return
    console = stdout_console()
    before, after = result.heldout_loss_before, result.heldout_loss_after
    held = f"; held-out loss {before:.3f} -> {after:.3f}" if before is not None else ""
    console.print(
        f"trained {result.train_chains} chains x {settings.epochs} epochs in "
        f"{result.optimizer_steps} steps ({result.seconds:.0f} s){held}"
    )
    console.print(f"model: {result.model_dir}")
    if result.heldout_tasks:
        tasks = heldout_tasks_file(result.out)
        console.print(
            f"held-out tasks: {tasks}  (score them: agentfly eval RECIPE --model "
            f"{result.model_dir} --data {tasks})"
        )
    console.print(f"continue with RL: agentfly train RECIPE --model {result.model_dir}")
