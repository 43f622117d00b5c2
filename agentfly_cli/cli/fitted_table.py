"""Tables that never cut a value: a table when its longest words fit the terminal, else records.

Rich folds a word that is wider than its column (a pid 4197 shown as ``419`` over ``7``). Here a
table is printed only when every column can hold its longest word; otherwise each row becomes a
block of ``label  value`` lines that wrap at spaces. A value wider than the terminal by itself
gets a line of its own, whole (the terminal wraps it; copying it still works).
"""

from __future__ import annotations

import textwrap
from collections.abc import Iterable, Sequence
from typing import Any

from rich.console import Console
from rich.measure import Measurement

from agentfly_cli.api.errors import printable
from agentfly_cli.cli.output import table


def print_fitted(
    console: Console, title: str, columns: Sequence[str], rows: Iterable[Sequence[Any]]
) -> None:
    """Print ``rows`` as a table if it fits ``console.width`` uncut, else as one record per row."""
    rows = [[printable("" if cell is None else str(cell)) for cell in row] for row in rows]
    shown = table(title, columns, rows)
    unbounded = console.options.update_width(2**16)  # else the measure is clamped to the width
    if Measurement.get(console, unbounded, shown).minimum <= console.width:
        console.print(shown)
        return
    _print_text(console, title)
    for row in rows:
        print_record(console, row[0], list(zip(columns[1:], row[1:], strict=True)))


def print_facts(console: Console, title: str, facts: Sequence[tuple[str, str]]) -> None:
    """``(label, value)`` pairs as a two-column table if it fits uncut, else as one record."""
    facts = [(printable(label), printable(value)) for label, value in facts]
    shown = table(title, ("setting", "value"), facts)
    unbounded = console.options.update_width(2**16)
    if Measurement.get(console, unbounded, shown).minimum <= console.width:
        console.print(shown)
    else:
        print_record(console, title, facts)


def print_record(console: Console, heading: str, fields: Sequence[tuple[str, str]]) -> None:
    """``heading`` on a line of its own, then one indented ``label  value`` line per field."""
    _print_text(console, heading)
    label_width = max((len(label) for label, _ in fields), default=0)
    for label, value in fields:
        _print_text(console, wrap_words(value, console.width, f"  {label:<{label_width}}  "))


def wrap_words(text: str, width: int, prefix: str = "") -> str:
    """``prefix`` + ``text`` wrapped at spaces to ``width``, later lines indented to match.

    A word is never broken: one too wide for the line after the prefix starts a line of its own,
    and a word wider than ``width`` itself stays whole on its line.
    """
    indent = " " * len(prefix)
    if len(prefix) + max((len(w) for w in text.split()), default=0) > width:
        # the longest word does not fit after the prefix: the value starts on the next line
        lines = textwrap.wrap(text, width, break_long_words=False, break_on_hyphens=False) or [""]
        return "\n".join([prefix.rstrip(), *lines])
    lines = textwrap.wrap(
        text,
        width,
        initial_indent=prefix,
        subsequent_indent=indent,
        break_long_words=False,
        break_on_hyphens=False,
    )
    return "\n".join(lines) if lines else prefix.rstrip()


def _print_text(console: Console, text: str) -> None:
    console.print(text, markup=False, highlight=False, soft_wrap=True)
