"""Tool-call parsers: turn an assistant turn's text into calls, errors, reasoning and an answer.

Formats: ``hermes`` (``<tool_call>`` JSON), ``llama3_json``, ``mistral`` (``[TOOL_CALLS]``),
``react`` (``Action:`` / ``Action Input:``) and ``line`` (a line protocol set by options).
Every parser takes any string and returns a ParsedResponse: bad markup becomes a ParseError
whose message the model reads as the tool result. Calls inside ``<think>`` are never run.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from agentfly_cli.chat.formats_json import HermesParser, Llama3JsonParser, MistralParser
from agentfly_cli.chat.formats_text import LineParser, ReactParser
from agentfly_cli.chat.parsed import (
    BaseParser,
    ParsedResponse,
    ParseError,
    ToolCall,
    split_think,
)
from agentfly_cli.errors import UserError

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


_PARSERS: dict[str, type[BaseParser]] = {
    cls.name: cls
    for cls in (HermesParser, Llama3JsonParser, MistralParser, ReactParser, LineParser)
}


def parser_names() -> list[str]:
    """The known parser names."""
    return sorted(_PARSERS)


def get_parser(name: str, options: dict | None = None) -> ToolCallParser:
    """The parser ``name``, configured with ``options`` (only ``line`` takes any).

    ``name`` may also be ``module:attr`` or ``file.py:attr``: your own parser class (built with
    ``from_options(options)`` when it has one, else called with no arguments) or instance. Base
    it on :class:`BaseParser` to get think-block handling and crash safety.
    """
    if ":" in name:
        return _custom_parser(name, options)
    cls = _PARSERS.get(name)
    if cls is None:
        raise UserError(
            f"unknown tool-call parser {name!r}; use one of: {', '.join(parser_names())}"
        )
    return cls.from_options(options)


def _custom_parser(spec: str, options: dict | None) -> ToolCallParser:
    from agentfly_cli.loading import load_object

    value = load_object(spec)
    if isinstance(value, type):
        factory = getattr(value, "from_options", None)
        try:
            value = factory(options) if callable(factory) else value()
        except UserError:
            raise
        except Exception as exc:  # the user's constructor: one line, not an internal error
            raise UserError(
                f"parser {spec!r} failed to build: {type(exc).__name__}: {exc}; "
                "fix its constructor (or from_options) or pick a packaged parser"
            ) from exc
    if not callable(getattr(value, "parse", None)):
        raise UserError(
            f"parser {spec!r} has no parse(text) method; subclass "
            "agentfly_cli.chat.parsed.BaseParser and implement parse_body(text)"
        )
    if not isinstance(getattr(value, "name", None), str):
        value.name = spec
    return value
