"""``agentfly doctor``: is a model folder fit for token-exact multi-turn RL, and what to fix."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from agentfly_cli.chat.doctor import Verdict


def diagnose(
    model: str,
    *,
    parser: str | None = None,
    template: str | None = None,
    observation_role: str = "tool",
    tokenizer_loader: str = "auto",
) -> list[Verdict]:
    """One verdict per check of ``model``'s tokenizer, chat template and tool-call parser;
    each that does not pass says how to fix it."""
    from agentfly_cli.chat.doctor import diagnose as run

    return run(
        model,
        parser=parser,
        template=template,
        observation_role=observation_role,
        tokenizer_loader=tokenizer_loader,
    )


def any_failed(verdicts: list[Verdict]) -> bool:
    """A check failed (the others pass or warn): the model is not fit as it is."""
    from agentfly_cli.chat.doctor import FAIL

    return any(v.status == FAIL for v in verdicts)


def check_parser(name: str) -> None:
    """``name`` is a registered tool-call parser; a UserError naming `agentfly parsers list`
    if not."""
    from agentfly_cli.chat.parsers import get_parser

    get_parser(name)


def observation_role_problem(role: str) -> str | None:
    """What is wrong with ``role`` as the role tool results are sent as (None: nothing)."""
    from pydantic import ValidationError

    from agentfly_cli.settings.chat import ObservationSettings

    try:
        ObservationSettings(role=role)
    except ValidationError as exc:
        return exc.errors()[0]["msg"].removeprefix("Value error, ")
    return None
