"""A Rich table that narrows its columns to fit the terminal but never below their longest word.

Rich narrows the widest column first and only afterwards applies each column's ``min_width``, so
a table whose words all fit can still come out wider than the terminal and be cropped (a plugin
shown as ``builtin_parsers (CON``). Here the widths are chosen before Rich sees the table: the
widest column that can still give gives first, and no column goes below its longest word.
"""

from __future__ import annotations

from collections.abc import Sequence

from rich.cells import cell_len
from rich.console import Console, ConsoleOptions, RenderResult
from rich.markup import escape
from rich.measure import Measurement
from rich.table import Table

CELL_PADDING = 2  # Rich's default (0, 1) padding: one space each side


class WordSafeTable:
    """A titled table of text cells, laid out so that no word is folded or cropped."""

    def __init__(self, title: str, columns: Sequence[str], cells: Sequence[Sequence[str]]):
        self.title = title
        self.columns = list(columns)
        self.cells = [list(row) for row in cells]

    def __rich_measure__(self, console: Console, options: ConsoleOptions) -> Measurement:
        return Measurement.get(console, options, self._build())

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        shortest, longest = self._column_ranges()
        room = options.max_width - (len(self.columns) + 1) - CELL_PADDING * len(self.columns)
        if sum(longest) <= room or sum(shortest) > room:
            # it fits as it is, or some word cannot fit whatever the widths: Rich's own layout
            # (the caller shows records instead where a value must stay whole: fitted_table.py)
            yield self._build()
            return
        yield self._build(narrowed(longest, shortest, room))

    def _column_ranges(self) -> tuple[list[int], list[int]]:
        """Each column's longest word and longest line, header included, in terminal cells."""
        shortest, longest = [], []
        for index, header in enumerate(self.columns):
            texts = [header, *(row[index] for row in self.cells if index < len(row))]
            lines = [line for text in texts for line in text.splitlines() or [""]]
            words = [word for text in texts for word in text.split()]
            shortest.append(max((cell_len(word) for word in words), default=1))
            longest.append(max(max((cell_len(line) for line in lines), default=1), shortest[-1]))
        return shortest, longest

    def _build(self, widths: Sequence[int] | None = None) -> Table:
        shortest, _ = self._column_ranges()
        result = Table(title=self.title, title_justify="left", header_style="bold", expand=False)
        for index, column in enumerate(self.columns):
            width = None if widths is None else widths[index]
            result.add_column(column, overflow="fold", min_width=shortest[index], width=width)
        for row in self.cells:
            result.add_row(*(escape(cell) for cell in row))
        return result


def narrowed(longest: Sequence[int], shortest: Sequence[int], room: int) -> list[int]:
    """Column widths summing to at most ``room``: the widest column gives first, none below
    its ``shortest`` (which must fit in ``room``)."""
    widths = list(longest)
    while sum(widths) > room:
        can_give = [i for i, width in enumerate(widths) if width > shortest[i]]
        if not can_give:
            break
        widest = max(can_give, key=lambda i: widths[i])
        others = [widths[i] for i in can_give if i != widest]
        floor = max(shortest[widest], max(others, default=0), widths[widest] - (sum(widths) - room))
        widths[widest] = floor if floor < widths[widest] else widths[widest] - 1
    return widths
