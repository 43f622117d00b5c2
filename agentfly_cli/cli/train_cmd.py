"""``agentfly train`` and ``agentfly export``: improve a model with RL; save it for others."""

from __future__ import annotations

import time
from pathlib import Path

import typer

from agentfly_cli.cli.output import handle_errors, print_json, stdout_console
from agentfly_cli.cli.rollout_cmd import (
    BACKEND,
    DATA,
    LIMIT,
    MODEL,
    REWARD,
    SETS,
    SPEC,
    TOOLS,
    WHERE,
    N,
)

DEFAULT_RECIPE = "calculator"


def run_dir_for(config, out: str | None) -> Path:
    """``--out``, else ``trainer.out``, else ``runs/<recipe>-<time>``."""
    chosen = out or config.trainer.out
    if chosen:
        return Path(chosen)
    return Path("runs") / f"{config.name}-{time.strftime('%Y%m%d-%H%M%S')}"


@handle_errors
def train(
    spec: str | None = SPEC,
    model: str | None = MODEL,
    backend: str | None = BACKEND,
    data: str | None = DATA,
    tools: str | None = TOOLS,
    reward: str | None = REWARD,
    n: int | None = N,
    limit: int | None = LIMIT,
    where: list[str] | None = WHERE,
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
    sets: list[str] | None = SETS,
) -> None:
    """Train a model with RL on a recipe (default: the calculator recipe on SmolLM2-135M)."""
    from agentfly_cli.cli.rollout_cmd import _quiet_transformers, build_config
    from agentfly_cli.errors import UserError
    from agentfly_cli.output_paths import check_folder_target

    config = build_config(
        spec or DEFAULT_RECIPE,
        model=model,
        backend=backend,
        data=data,
        tools=tools,
        reward=reward,
        n=n,
        limit=limit,
        where=where,
        sets=[
            *([f"trainer.steps={steps}"] if steps else []),
            *(
                [f"trainer.warm_start.enabled={str(warm_start).lower()}"]
                if warm_start is not None
                else []
            ),
            *(sets or []),
        ],
    )
    if resume and not (out or config.trainer.out):
        raise UserError("--resume needs --out RUN_DIR: the folder of the run to continue")
    run_dir = check_folder_target(run_dir_for(config, out), "--out")
    checkpoints = run_dir / "checkpoints"
    if not resume and checkpoints.is_dir() and any(checkpoints.iterdir()):
        raise UserError(
            f"{run_dir} already holds a run; add --resume to continue it or pick another --out"
        )
    _quiet_transformers()
    from agentfly_cli.train.trainer import Trainer
    from agentfly_cli.train.warm_start import warm_started

    config = warm_started(config, run_dir, console=not quiet)
    trainer = Trainer(config, run_dir=run_dir, resume=resume, console=not quiet)
    result = trainer.fit()
    if not result.is_main:
        return  # one report per run, from rank 0
    last = result.history[-1] if result.history else {}
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
    force: bool = typer.Option(False, "--force", help="Replace OUT if it exists."),
) -> None:
    """Write the newest checkpoint of a run as a Hugging Face model folder."""
    from agentfly_cli.train.export import export_model

    written = export_model(run_dir, out, force=force)
    stdout_console().print(f"wrote {written} (load it with from_pretrained)")
