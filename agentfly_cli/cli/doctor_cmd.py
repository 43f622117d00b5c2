"""``agentfly doctor MODEL``: is a model folder fit for token-exact multi-turn RL, and if not,
what to change."""

from __future__ import annotations

import typer

from agentfly_cli.cli.output import JSON_OPTION, handle_errors, print_json, stdout_console, table

MODEL = typer.Argument(..., help="A model folder (its tokenizer and chat template) or an alias.")
PARSER = typer.Option(None, "--parser", help="The tool-call format to check (default: guessed).")
TEMPLATE = typer.Option(None, "--template", help="A packaged template name or a .jinja file.")
ROLE = typer.Option("tool", "--observation-role", help="The role tool results are sent as.")
LOADER = typer.Option(
    "auto",
    "--tokenizer-loader",
    help="How the tokenizer folder is read, as backend.tokenizer_loader: auto, transformers "
    "(AutoTokenizer) or tokenizer.json (the file as is).",
)


@handle_errors
def doctor(
    model: str = MODEL,
    parser: str | None = PARSER,
    template: str | None = TEMPLATE,
    observation_role: str = ROLE,
    tokenizer_loader: str = LOADER,
    as_json: bool = JSON_OPTION,
) -> None:
    """Check MODEL's tokenizer, chat template and tool-call parser for multi-turn RL.

    One verdict per check (pass, warn, fail) and the fix for each that does not pass. Exit
    code 1 when a check fails.
    """
    from agentfly_cli.api.doctor import any_failed, diagnose

    _check_flags(parser, observation_role)
    verdicts = diagnose(
        model,
        parser=parser,
        template=template,
        observation_role=observation_role,
        tokenizer_loader=tokenizer_loader,
    )
    if as_json:
        print_json([v.to_dict() for v in verdicts])
    else:
        rows = [
            (
                v.check,
                v.status if v.status == "pass" else v.status.upper(),
                v.detail + (f"\nfix: {v.fix}" if v.fix else ""),
            )
            for v in verdicts
        ]
        stdout_console().print(
            table(f"agentfly doctor {model}", ("check", "verdict", "detail"), rows)
        )
    if any_failed(verdicts):
        raise typer.Exit(1)


def _check_flags(parser: str | None, observation_role: str) -> None:
    """An unknown --parser or an empty --observation-role is bad input (exit 2), not a failed
    check: caught before the model's tokenizer loads."""
    from agentfly_cli.api.doctor import check_parser, observation_role_problem
    from agentfly_cli.api.errors import UserError

    if parser is not None:
        check_parser(parser)  # an unknown name is a UserError naming `agentfly parsers list`
    reason = observation_role_problem(observation_role)
    if reason is not None:
        raise UserError(f"--observation-role {observation_role!r}: {reason}")
