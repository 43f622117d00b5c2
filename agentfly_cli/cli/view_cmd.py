"""``agentfly view``: show one trajectory, trained tokens apart from masked ones."""

from __future__ import annotations

from pathlib import Path

import typer

from agentfly_cli.cli.output import handle_errors, stderr_console, stdout_console, table
from agentfly_cli.errors import UserError


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
    from agentfly_cli.rollout.render import html_page, load_tokenizer_for, rich_text, token_pieces
    from agentfly_cli.rollout.trajectory import read_trajectories

    trajectories = read_trajectories(path)
    if not trajectories:
        raise UserError(f"{path} holds no trajectories")
    if not 0 <= index < len(trajectories):
        raise UserError(f"--index {index} is out of range; {path} holds {len(trajectories)}")
    trajectory = trajectories[index]
    tok = load_tokenizer_for(trajectory, tokenizer)
    pieces = token_pieces(trajectory, tok) if tok is not None else None
    title = f"{path.name} #{index}"
    if html is not None:
        html.write_text(html_page(trajectory, pieces, title), encoding="utf-8")
        stderr_console().print(f"wrote {html}")
        return
    console = stdout_console()
    console.print(
        table(
            title,
            ("reward", "finish", "turns", "tokens", "trained", "group", "prediction"),
            [
                (
                    trajectory.reward,
                    trajectory.finish_reason,
                    trajectory.num_turns,
                    len(trajectory.ids),
                    sum(trajectory.loss_mask),
                    trajectory.group_id,
                    trajectory.prediction,
                )
            ],
        )
    )
    if pieces is None:
        stderr_console().print(
            "[yellow]note:[/yellow] tokenizer not found; showing messages (pass --tokenizer)"
        )
        for message in trajectory.messages:
            style = "bold green" if message.get("role") == "assistant" else "grey50"
            console.print(
                f"[{message.get('role')}] {message.get('content', '')}", style=style, markup=False
            )
        return
    console.print(
        "[bold green on grey11]trained[/] = sampled tokens (loss mask 1); "
        "[grey50]grey[/] = masked (prompt, observations)"
    )
    console.print(rich_text(pieces))
    for call in trajectory.tool_calls:
        console.print(
            f"turn {call.turn} {call.name or '(parse error)'}({call.arguments}) -> "
            f"{call.status}: {call.observation}",
            markup=False,
            highlight=False,
        )
