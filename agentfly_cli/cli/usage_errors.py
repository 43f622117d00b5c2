"""Typer's own usage errors (a bad flag value, an unknown option) as one line and exit code 2.

Typer prints them as a multi-line box with the usage text; the rest of the CLI prints one
``error:`` line naming the problem and the fix. The root group of the app converts them.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import typer
from typer.core import TyperGroup

from agentfly_cli.cli.output import debug_enabled, fail


@contextlib.contextmanager
def one_line_usage_errors() -> Iterator[None]:
    """Re-raise Typer's usage errors as :func:`~agentfly_cli.cli.output.fail` one-liners."""
    try:
        yield
    except typer.TyperException as exc:
        # `agentfly tools` alone shows the group's help through this error: keep it as it is
        if type(exc).__name__ == "NoArgsIsHelpError" or debug_enabled():
            raise
        context = getattr(exc, "ctx", None)
        where = f"; see `{context.command_path} --help`" if context is not None else ""
        raise fail(f"{exc.format_message().rstrip('.')}{where}", exc.exit_code) from None


class OneLineErrorsGroup(TyperGroup):
    """The ``agentfly`` root group: usage errors of any subcommand become one line, and its
    help page is drawn light."""

    def make_context(self, info_name: str | None, args: list[str], parent=None, **extra: Any):
        with one_line_usage_errors():
            return super().make_context(info_name, args, parent=parent, **extra)

    def invoke(self, ctx) -> Any:
        with one_line_usage_errors():
            return super().invoke(ctx)

    def format_help(self, ctx, formatter) -> None:
        """The root page, drawn without Typer's heavier Rich help module (see root_help)."""
        from agentfly_cli.cli.root_help import print_root_help

        print_root_help(self, ctx)
