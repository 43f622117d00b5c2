"""One place for CLI output: human (Rich) or ``--json``, one-line errors, exit codes.

Exit codes: 0 success, 1 a command that ran but failed (for example a tool that returned an
error), 2 bad input from the user. ``AGENTFLY_DEBUG=1`` shows tracebacks.
"""

from __future__ import annotations

import functools
import json
import re
import sys
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import typer
from rich.console import Console
from rich.markup import escape

from agentfly_cli.api.errors import UserError, debug_enabled, printable
from agentfly_cli.cli.word_safe_table import WordSafeTable

EXIT_FAILURE = 1
EXIT_USAGE = 2

JSON_OPTION = typer.Option(False, "--json", help="Print machine-readable JSON.")


def stdout_console() -> Console:
    return Console(soft_wrap=False)


def stderr_console() -> Console:
    return Console(stderr=True, soft_wrap=True)


def print_json(data: Any) -> None:
    """Write ``data`` as JSON to stdout (plain text, no Rich markup).

    Text stays readable (UTF-8), except that lone surrogates, which UTF-8 cannot encode, are
    written as JSON escapes: the output is always valid JSON.
    """
    text = json.dumps(data, indent=2, ensure_ascii=False, default=str)
    sys.stdout.write(LONE_SURROGATE.sub(_json_escape, text) + "\n")
    sys.stdout.flush()


LONE_SURROGATE = re.compile("[\ud800-\udfff]")


def _json_escape(match: re.Match[str]) -> str:
    return f"\\u{ord(match.group()):04x}"


def print_text(text: str) -> None:
    """Write ``text`` to stdout: no wrapping, no markup, control characters shown escaped."""
    text = printable(text)
    sys.stdout.write(text if text.endswith("\n") else text + "\n")
    sys.stdout.flush()


def warn(message: str) -> None:
    stderr_console().print(
        f"[yellow]warning:[/yellow] {escape(printable(message))}", highlight=False
    )


def fail(message: str, code: int = EXIT_USAGE) -> typer.Exit:
    """Print a one-line error to stderr and return the ``typer.Exit`` to raise."""
    first_line = " ".join(printable(str(message)).split())
    stderr_console().print(f"[bold red]error:[/bold red] {escape(first_line)}", highlight=False)
    return typer.Exit(code)


def handle_errors(command: Callable[..., Any]) -> Callable[..., Any]:
    """Turn :class:`UserError` into one line and exit code 2, and bugs into one line and 1."""

    @functools.wraps(command)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return command(*args, **kwargs)
        except typer.Exit:
            raise
        except UserError as exc:
            if debug_enabled():
                raise
            raise fail(str(exc), EXIT_USAGE) from None
        except KeyboardInterrupt:
            raise fail("interrupted", 130) from None
        except Exception as exc:
            if debug_enabled():
                raise
            raise fail(
                f"internal error: {type(exc).__name__}: {exc} (set AGENTFLY_DEBUG=1 for the "
                "traceback)",
                EXIT_FAILURE,
            ) from None

    return wrapper


def table(title: str, columns: Sequence[str], rows: Iterable[Sequence[Any]]) -> WordSafeTable:
    """A table whose cells are escaped, so that user text never becomes markup or control codes.

    Every column wraps at spaces when the terminal is narrow (a header such as "reward mean"
    too), and never below its longest word, so a word is never cut. Names, numbers and flags hold
    no spaces and stay whole; the commands choose their columns so that the longest words fit 80
    columns (tests check it).
    """
    cells = [[printable("" if cell is None else str(cell)) for cell in row] for row in rows]
    return WordSafeTable(title, columns, cells)


SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z])")


def summary(text: str | None) -> str:
    """The first sentence of ``text``, whole: a table wraps it, never cuts it."""
    joined = " ".join((text or "").split())
    end = SENTENCE_END.search(joined)
    return joined[: end.start()] if end else joined


def first_line(text: str | None, width: int = 72) -> str:
    """The first line of ``text``, cut at ``width`` (prefer :func:`summary` in tables)."""
    line = (text or "").strip().splitlines()[0] if (text or "").strip() else ""
    return line if len(line) <= width else line[: width - 1] + "…"
