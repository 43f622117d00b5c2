"""The page ``agentfly --help`` prints, drawn with a few light Rich parts.

Typer's Rich help module imports Markdown, Pygments and Rich's tracebacks, about a quarter of
the time `agentfly --help` takes. The root page is the one people open most, so it is drawn
here, with Typer's look (usage, an Options panel, a Commands panel); subcommands keep Typer's
own help. Help texts are printed as they are written (no Rich markup: a plugin's ``[x]``
stays); commands and parameters are read by duck typing, since Typer vendors its own click.
"""

from __future__ import annotations

import inspect
import os
import re
from typing import Any

_PARAGRAPH_BREAK = re.compile(r"\n\s*\n")


def first_paragraph(command: Any) -> str:
    """A command's one-line summary: its short help, else the first paragraph of its help."""
    text = command.short_help or command.help or ""
    summary = _PARAGRAPH_BREAK.split(text.strip(), maxsplit=1)[0]
    summary = " ".join(word for word in summary.split() if word != "\b")  # click's no-rewrap mark
    return f"(deprecated) {summary}" if command.deprecated else summary


def _option_rows(group: Any, ctx: Any) -> list[tuple[str, str, str]]:
    rows = []
    for param in group.get_params(ctx):
        if getattr(param, "hidden", False) or param.param_type_name != "option":
            continue
        names = ", ".join([*param.opts, *param.secondary_opts])
        kind = "" if param.is_flag else param.type.name.upper()
        rows.append((names, kind, param.help or ""))
    return rows


def _command_rows(group: Any, ctx: Any) -> list[tuple[str, str]]:
    rows = []
    for name in group.list_commands(ctx):
        command = group.get_command(ctx, name)
        if command is not None and not command.hidden:
            rows.append((name, first_paragraph(command)))
    return rows


def _console():
    from rich.console import Console

    width = os.environ.get("TERMINAL_WIDTH")  # the variable Typer's help reads too
    return Console(width=int(width) if width and width.isdigit() else None, highlight=False)


def print_root_help(group: Any, ctx: Any) -> None:
    """Print the help of the root group: usage, description, options and commands."""
    from rich import box
    from rich.padding import Padding
    from rich.panel import Panel
    from rich.table import Table
    from rich.text import Text

    console = _console()
    usage = " ".join(group.collect_usage_pieces(ctx))
    console.print(Padding(Text.assemble(("Usage: ", "yellow"), f"{ctx.command_path} {usage}"), 1))
    if group.help:
        console.print(Padding(Text(inspect.cleandoc(group.help)), (0, 1, 1, 1)))

    def panel(title: str, rows: list[tuple[str, ...]], styles: tuple[str, ...]) -> None:
        if not rows:
            return
        table = Table.grid(padding=(0, 1), expand=True)
        for style in styles[:-1]:
            table.add_column(style=style, no_wrap=True)
        table.add_column(ratio=1)
        for row in rows:
            table.add_row(*(Text(cell) for cell in row))
        console.print(
            Panel(table, title=title, title_align="left", border_style="dim", box=box.ROUNDED)
        )

    panel("Options", _option_rows(group, ctx), ("bold cyan", "bold yellow", ""))
    panel("Commands", _command_rows(group, ctx), ("bold cyan", ""))
