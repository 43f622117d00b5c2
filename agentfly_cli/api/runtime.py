"""The process a front end runs in: its ``AGENTFLY_*`` variables and its heap."""

from __future__ import annotations


def check_environment() -> None:
    """Check every ``AGENTFLY_*`` variable at once; a bad one is a one-line UserError."""
    from agentfly_cli.settings.variables import check_environment as check

    check()


def return_freed_memory() -> bool:
    """Tune glibc's allocator so freed memory goes back to the system (call it before torch
    starts its threads); False where it is not glibc or mallopt refused."""
    from agentfly_cli.runtime.malloc import return_freed_memory as tune

    return tune()
