"""The chat layer: chat templates (prompts, exact observation deltas) and tool-call parsers."""

from __future__ import annotations

from agentfly_cli.chat.parsers import (
    ParsedResponse,
    ParseError,
    ToolCall,
    ToolCallParser,
    get_parser,
    parser_names,
)
from agentfly_cli.chat.templates import ChatTemplate, ChatTemplateError
from agentfly_cli.settings.chat import ObservationSettings

__all__ = [
    "ChatTemplate",
    "ChatTemplateError",
    "ObservationSettings",
    "ParseError",
    "ParsedResponse",
    "ToolCall",
    "ToolCallParser",
    "get_parser",
    "parser_names",
]
