"""A package's public names imported on first use (PEP 562 ``__getattr__``).

Entry points name modules inside packages (``agentfly_cli.backends.builtin``); with
lazy exports, loading such a plugin imports its package's ``__init__`` and nothing heavy, so
``agentfly --help`` stays fast.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any


def lazy_exports(namespace: dict[str, Any], exports: dict[str, str]) -> Callable[[str], Any]:
    """A module ``__getattr__`` that imports ``exports[name]`` (a module path) on first use
    and caches the attribute in ``namespace`` (the package's ``globals()``)."""

    def __getattr__(name: str) -> Any:
        module = exports.get(name)
        if module is None:
            raise AttributeError(f"module {namespace['__name__']!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        namespace[name] = value
        return value

    return __getattr__
