"""``agentfly models``: the model aliases agentfly builds locally (no hub downloads)."""

from __future__ import annotations

import typer

from agentfly_cli.cli.output import JSON_OPTION, handle_errors, print_json, stdout_console, table

app = typer.Typer(
    help="Models built locally: the tiny test model and SmolLM2 from PyPI.", no_args_is_help=True
)


@app.command("list")
@handle_errors
def list_models(as_json: bool = JSON_OPTION) -> None:
    """List the aliases `--model` accepts and whether each is built in the cache."""
    from agentfly_cli.api.models import model_aliases

    items = model_aliases()
    if as_json:
        print_json(items)
        return
    rows = [(i["name"], "yes" if i["built"] else "no", i["description"]) for i in items]
    stdout_console().print(table("model aliases", ("name", "built", "description"), rows))


@app.command("build")
@handle_errors
def build(name: str = typer.Argument(..., help="An alias from `agentfly models list`.")) -> None:
    """Build (or convert) a model alias into the cache and print its folder."""
    from agentfly_cli.api.models import build_model
    from agentfly_cli.cli.output import print_text

    print_text(str(build_model(name)))
