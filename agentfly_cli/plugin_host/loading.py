"""Find components by name: registered ones first, then ``module:attr`` or ``file.py:attr``.

The second form lets a user try a tool or reward from their own file without writing a
plugin: ``agentfly tools call my_tools.py:search --args '{"query": "x"}'``.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
from pathlib import Path
from typing import Any

from agentfly_cli.errors import UnknownComponentError, UserError
from agentfly_cli.plugin_host.plugins import PluginHost, get_plugin_host


def load_object(spec: str) -> Any:
    """Import ``package.module:attr`` or ``path/to/file.py:attr`` (dots in attr walk attributes)."""
    target, _, attribute = spec.rpartition(":")
    if not target or not attribute:
        raise UserError(f"cannot load {spec!r}: use 'module:attribute' or 'file.py:attribute'")
    if target.endswith(".py"):
        path = Path(target).expanduser().resolve()
        if not path.is_file():
            raise UserError(f"cannot load {spec!r}: no file {path}{_relative_hint(target)}")
        module_name = f"agentfly_user_{abs(hash(path))}"
        module = sys.modules.get(module_name)
        if module is None:
            module_spec = importlib.util.spec_from_file_location(module_name, path)
            if module_spec is None or module_spec.loader is None:
                raise UserError(f"cannot load {spec!r}: {target} is not a Python file")
            module = importlib.util.module_from_spec(module_spec)
            sys.modules[module_name] = module
            try:
                module_spec.loader.exec_module(module)
            except (Exception, SystemExit) as exc:  # a file may call sys.exit() at import
                sys.modules.pop(module_name, None)
                raise UserError(f"cannot load {spec!r}: {_import_failure(exc)}") from exc
    else:
        if os.getcwd() not in sys.path and "" not in sys.path:
            sys.path.insert(0, os.getcwd())  # as `python -m` does: modules beside the user
        try:
            module = importlib.import_module(target)
        except (Exception, SystemExit) as exc:
            raise UserError(f"cannot import {target!r}: {_import_failure(exc)}") from exc
    value: Any = module
    for part in attribute.split("."):
        try:
            value = getattr(value, part)
        except AttributeError:
            raise UserError(f"cannot load {spec!r}: {target} has no attribute {part!r}") from None
    return value


def _relative_hint(target: str) -> str:
    """How a relative file path was read: from the command line, against the current folder
    (a recipe's paths arrive already made relative to the recipe's folder)."""
    if Path(target).expanduser().is_absolute():
        return ""
    return f" (relative to the current folder, {os.getcwd()})"


def _import_failure(exc: BaseException) -> str:
    """What went wrong while a user's module ran (KeyboardInterrupt is never caught here)."""
    if isinstance(exc, SystemExit):
        return f"it called sys.exit({exc.code!r}) while being imported; remove that call"
    return f"{type(exc).__name__}: {exc}"


def _registered(host: PluginHost, kind: str, name: str) -> Any:
    """The component, or an unknown-name error that also points at plugins that failed."""
    try:
        return host.components.of(kind).get(name)
    except UnknownComponentError as exc:
        if not host.failed:
            raise
        failed = ", ".join(p.name for p in host.failed)
        raise UnknownComponentError(
            f"{exc}; note that plugin(s) {failed} failed to load (see `agentfly plugins`)"
        ) from None


def resolve_tools(spec: str, host: PluginHost | None = None) -> list:
    """The tools of one ``tools:`` entry: one tool, or every tool of an ``mcp:`` server."""
    from agentfly_cli.components.mcp_tools import is_mcp_spec, mcp_tools

    if is_mcp_spec(spec):
        return mcp_tools(spec)
    return [resolve_tool(spec, host)]


def resolve_tool(spec: str, host: PluginHost | None = None):
    """A registered tool by name, a ``module:attr`` / ``file.py:attr`` tool or function, or
    the one tool of an ``mcp:...#tool`` entry."""
    from agentfly_cli.components.mcp_tools import is_mcp_spec, mcp_tools
    from agentfly_cli.components.rewards import Reward
    from agentfly_cli.components.tools import Tool

    host = host or get_plugin_host()
    if is_mcp_spec(spec):
        tools = mcp_tools(spec)
        if len(tools) > 1:
            names = ", ".join(t.name for t in tools)
            raise UserError(
                f"{spec!r} offers {len(tools)} tools ({names}); pick one with '{spec}#NAME'"
            )
        return tools[0]
    if ":" not in spec:
        return _registered(host, "tools", spec)
    value = load_object(spec)
    if isinstance(value, Tool):
        if not value.is_bound:
            raise UserError(
                f"{spec!r} is a method tool read from its class; expose an instance's tool, "
                f"e.g. toolbox = MyToolbox() and then 'module:toolbox.{value.name}'"
            )
        return value
    if isinstance(value, Reward):
        raise UserError(f"{spec!r} is a reward, not a tool; try `agentfly rewards call`")
    if callable(value):
        try:
            return Tool(value)
        except TypeError as exc:
            raise UserError(str(exc)) from exc
    raise UserError(f"{spec!r} is a {type(value).__name__}, not a tool or function")


def resolve_reward(spec: str, host: PluginHost | None = None):
    """A registered reward by name, or a ``module:attr`` / ``file.py:attr`` reward or function."""
    from agentfly_cli.components.rewards import Reward
    from agentfly_cli.components.tools import Tool

    host = host or get_plugin_host()
    if ":" not in spec:
        return _registered(host, "rewards", spec)
    value = load_object(spec)
    if isinstance(value, Reward):
        return value
    if isinstance(value, Tool):
        raise UserError(f"{spec!r} is a tool, not a reward; try `agentfly tools call`")
    if callable(value):
        try:
            return Reward(value)
        except TypeError as exc:
            raise UserError(str(exc)) from exc
    raise UserError(f"{spec!r} is a {type(value).__name__}, not a reward or function")
