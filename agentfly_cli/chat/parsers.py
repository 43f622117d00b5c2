"""Tool-call parsers: turn an assistant turn's text into calls, errors, reasoning and an answer.

Parsers are plugin components (hook ``register_parsers``): the built-in formats, such as
``hermes`` (``<tool_call>`` JSON), ``mistral`` (``[TOOL_CALLS]``), ``react`` (``Action:`` /
``Action Input:``) and ``line`` (a line protocol set by options), come from the entry point
``builtin_parsers`` (chat/builtin_parsers.py), as a third-party plugin's would.
Every parser takes any string and returns a ParsedResponse: bad markup becomes a ParseError
whose message the model reads as the tool result. Calls inside ``<think>`` are never run.
"""

from __future__ import annotations

import difflib
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from agentfly_cli.chat.parser_output import ParsedResponse, ParseError, ToolCall, split_think
from agentfly_cli.errors import UnknownComponentError, UserError

if TYPE_CHECKING:
    from agentfly_cli.plugin_host.plugins import PluginHost

__all__ = [
    "ParseError",
    "ParsedResponse",
    "ToolCall",
    "ToolCallParser",
    "get_parser",
    "parser_names",
    "split_think",
]


@runtime_checkable
class ToolCallParser(Protocol):
    """What the rollout engine needs from a parser."""

    name: str

    def parse(self, text: str) -> ParsedResponse: ...


def parser_names(host: PluginHost | None = None) -> list[str]:
    """The registered parser names (`agentfly parsers list`)."""
    return list((host or _host()).components.parsers)


def get_parser(
    name: str, options: dict | None = None, *, host: PluginHost | None = None
) -> ToolCallParser:
    """The registered parser ``name``, configured with ``options`` (only ``line`` takes any).

    ``name`` may also be ``module:attr`` or ``file.py:attr``: your own parser class (built with
    ``from_options(options)`` when it has one, else called with no arguments) or instance. Base
    it on :class:`BaseParser` to get think-block handling and crash safety.
    """
    if ":" in name:
        return _custom_parser(name, options)
    host = host or _host()
    try:
        cls = host.components.parsers.get(name)
    except UnknownComponentError:
        raise UnknownComponentError(_unknown_message(name, host)) from None
    parser = _build(cls, options, name)
    if getattr(parser, "name", None) != name:  # registered under another name
        parser.name = name
    return parser


def _host() -> PluginHost:
    from agentfly_cli.plugin_host.plugins import (
        get_plugin_host,  # plugins load on first use, not at import
    )

    return get_plugin_host()


def _unknown_message(name: str, host: PluginHost) -> str:
    known = list(host.components.parsers)
    close = difflib.get_close_matches(name, known, n=1)
    hint = f"did you mean {close[0]!r}? " if close else ""
    message = f"unknown tool-call parser {name!r}; {hint}use one of: {', '.join(known) or 'none'}"
    if host.failed:
        failed = ", ".join(p.name for p in host.failed)
        message += f"; note that plugin(s) {failed} failed to load (see `agentfly plugins`)"
    elif not known:
        message += "; no plugin registers a parser (AGENTFLY_LOAD_PLUGINS without agentfly-cli?)"
    return message


def _build(cls: Any, options: dict | None, label: str) -> Any:
    """``cls.from_options(options)`` (or ``cls()``); a crash is one line naming the parser."""
    factory = getattr(cls, "from_options", None)
    try:
        return factory(options) if callable(factory) else cls()
    except UserError:
        raise
    except Exception as exc:  # a plugin's or user's constructor: one line, not an internal error
        raise UserError(
            f"parser {label!r} failed to build: {type(exc).__name__}: {exc}; "
            "fix its constructor (or from_options) or pick a packaged parser"
        ) from exc


def _custom_parser(spec: str, options: dict | None) -> ToolCallParser:
    from agentfly_cli.plugin_host.loading import load_object

    value = load_object(spec)
    if isinstance(value, type):
        value = _build(value, options, spec)
    if not callable(getattr(value, "parse", None)):
        raise UserError(
            f"parser {spec!r} has no parse(text) method; subclass "
            "agentfly_cli.chat.parser_output.BaseParser and implement parse_body(text)"
        )
    if not isinstance(getattr(value, "name", None), str):
        value.name = spec
    return value
