"""``agentfly view``: show one trajectory, trained tokens apart from masked ones.

Everything shown comes from the model, the tools or the file: control characters are shown
escaped and Rich markup is printed literally.
"""

from __future__ import annotations

from pathlib import Path

import typer
from rich.markup import escape

from agentfly_cli.api.errors import UserError, printable
from agentfly_cli.cli.output import handle_errors, stderr_console, stdout_console, table


@handle_errors
def view(
    path: Path = typer.Argument(..., help="A trajectory JSONL file (from `agentfly rollout`)."),
    index: int = typer.Option(0, "--index", "-i", help="Which trajectory (0-based line)."),
    html: Path = typer.Option(None, "--html", help="Write a standalone HTML page here instead."),
    tokenizer: str = typer.Option(
        None, "--tokenizer", help="Tokenizer folder, if not the one recorded in the file."
    ),
) -> None:
    """Show one trajectory: trained tokens highlighted, masked tokens dim."""
    from agentfly_cli.api.trajectories import (
        check_page_target,
        html_page,
        load_tokenizer_for,
        read_trajectory_at,
        rich_text,
        write_page,
    )

    if html is not None:
        check_page_target(html, "--html")  # before anything is read
    trajectory, count = read_trajectory_at(path, index)
    if count == 0:
        raise UserError(f"{path} holds no trajectories")
    if trajectory is None:
        raise UserError(
            f"--index {index} is out of range; {path} holds {count} (use 0 to {count - 1})"
        )
    try:
        tok = load_tokenizer_for(trajectory, tokenizer)
    except Exception:  # noqa: BLE001 - a broken folder breaks the loaders in many ways
        tok = None
    pieces = _pieces(trajectory, tok)
    title = f"{path.name} #{index}"
    if html is not None:
        write_page(html, html_page(trajectory, pieces, title))
        stderr_console().print(f"wrote {html}", markup=False, highlight=False)
        return
    console = stdout_console()
    console.print(table(title, ("field", "value"), facts_of(trajectory)))
    if pieces is None:
        which = f"--tokenizer {tokenizer!r} does not load" if tokenizer else "tokenizer not found"
        stderr_console().print(
            f"[yellow]note:[/yellow] {escape(printable(which))}; showing messages "
            "(pass --tokenizer with the model folder the trajectory was made with)"
        )
        for message in trajectory.messages:
            style = "bold green" if message.get("role") == "assistant" else "grey50"
            line = printable(f"[{message.get('role')}] {message.get('content', '')}")
            console.print(line, style=style, markup=False, highlight=False)
        return
    console.print(
        "[bold green on grey11]trained[/] = sampled tokens (loss mask 1); "
        "[grey50]grey[/] = masked (prompt, observations)"
    )
    console.print(rich_text(pieces))
    for call in trajectory.tool_calls:
        console.print(
            printable(
                f"turn {call.turn} {call.name or '(parse error)'}({call.arguments}) -> "
                f"{call.status}: {call.observation}"
            ),
            markup=False,
            highlight=False,
        )


def _pieces(trajectory, tok):
    """The trajectory's tokens as text, or None without a tokenizer; ids the tokenizer does not
    have are a one-line error."""
    from agentfly_cli.api.trajectories import token_pieces

    if tok is None:
        return None
    try:
        return token_pieces(trajectory, tok)
    except (OverflowError, IndexError, TypeError, ValueError) as exc:
        raise UserError(
            f"the tokenizer cannot decode this trajectory's ids ({type(exc).__name__}: {exc}); "
            "pass --tokenizer with the model folder the trajectory was made with"
        ) from None


def facts_of(trajectory) -> list[tuple[str, object]]:
    """The rows of the summary table: one per fact, so that long values wrap, never cut."""
    trained = sum(trajectory.loss_mask)
    return [
        ("reward", trajectory.reward),
        ("finish", trajectory.finish_reason),
        ("turns", trajectory.num_turns),
        ("tokens", f"{len(trajectory.ids)} ({trained} trained)"),
        ("group", trajectory.group_id),
        ("prediction", trajectory.prediction),
    ]
