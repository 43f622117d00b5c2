"""The ``agentfly`` Typer app. Only parsing and printing live here; the work is in the library.

This module must stay light: ``agentfly --help`` never imports torch.
"""

from __future__ import annotations

import os

import typer

from agentfly_cli import __version__
from agentfly_cli.api import runtime
from agentfly_cli.api.components import get_plugin_host
from agentfly_cli.cli import (
    backends_cmd,
    doctor_cmd,
    env_cmd,
    envs_cmd,
    models_cmd,
    parsers_cmd,
    plugins_cmd,
    recipes_cmd,
    rewards_cmd,
    rollout_cmd,
    serve_cmd,
    sft_cmd,
    tools_cmd,
    train_cmd,
    view_cmd,
)
from agentfly_cli.cli.output import handle_errors
from agentfly_cli.cli.usage_errors import OneLineErrorsGroup


def _version(value: bool) -> None:
    if value:
        typer.echo(f"agentfly-cli {__version__}")
        raise typer.Exit()


def build_app(*, with_plugin_commands: bool = True) -> typer.Typer:
    """A fresh ``agentfly`` app with the built-in commands and the plugins' commands."""
    app = typer.Typer(
        name="agentfly",
        cls=OneLineErrorsGroup,
        help="Train LM agents with reinforcement learning on multi-turn tool use.",
        no_args_is_help=True,
        add_completion=False,
        pretty_exceptions_show_locals=False,
    )

    @app.callback()
    @handle_errors
    def root(
        version: bool = typer.Option(
            False,
            "--version",
            help="Show the version and exit.",
            callback=_version,
            is_eager=True,
        ),
        local_rank: int | None = typer.Option(
            None,
            "--local_rank",
            "--local-rank",
            hidden=True,
            help="Set by the deepspeed launcher (LOCAL_RANK in the environment is used).",
        ),
    ) -> None:
        """Train LM agents with reinforcement learning on multi-turn tool use."""
        runtime.check_environment()
        if local_rank is not None:
            os.environ.setdefault("LOCAL_RANK", str(local_rank))

    app.command("plugins")(plugins_cmd.plugins)
    app.add_typer(tools_cmd.app, name="tools")
    app.add_typer(rewards_cmd.app, name="rewards")
    app.add_typer(envs_cmd.app, name="envs", hidden=True)  # the first name of `env list`
    app.add_typer(env_cmd.app, name="env")
    app.add_typer(recipes_cmd.app, name="recipes")
    app.add_typer(models_cmd.app, name="models")
    app.add_typer(backends_cmd.app, name="backends")
    app.add_typer(parsers_cmd.app, name="parsers")
    app.command("rollout")(rollout_cmd.rollout)
    app.command("eval")(rollout_cmd.evaluate)
    app.command("view")(view_cmd.view)
    app.command("train")(train_cmd.train)
    app.command("sft")(sft_cmd.sft)
    app.command("export")(train_cmd.export)
    app.command("serve")(serve_cmd.serve)
    app.command("doctor")(doctor_cmd.doctor)
    if with_plugin_commands:
        get_plugin_host().add_commands(app)
    return app


def main() -> None:
    """Console-script entry point."""
    runtime.return_freed_memory()  # before torch starts its threads: see train/heap.py
    build_app()(prog_name="agentfly")


if __name__ == "__main__":
    main()
