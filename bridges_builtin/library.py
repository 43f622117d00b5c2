"""What every bridge needs from its environment library: importing it on first use, with the
install line of its extra when it is missing, and its version (part of a task file's key)."""

from __future__ import annotations

import importlib
import importlib.metadata
import importlib.util
from types import ModuleType

from agentfly_cli.errors import UserError


def install_line(extra: str) -> str:
    """The command that installs a bridge's extra."""
    return f"pip install 'agentfly-cli[{extra}]'"


def installed(module: str) -> bool:
    """Whether ``module`` can be imported (without importing it)."""
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def require(module: str, extra: str, bridge: str) -> ModuleType:
    """``module`` imported, or one ``UserError`` line naming the install command."""
    if not installed(module):
        raise UserError(
            f"the {bridge} bridge needs its library, which is not installed: {install_line(extra)}"
        )
    return importlib.import_module(module)


def version(distribution: str) -> str:
    """The installed version of ``distribution`` ("" when it is not installed)."""
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return ""
