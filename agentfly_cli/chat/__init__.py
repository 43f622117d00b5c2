"""The chat layer: chat templates (prompts, exact observation deltas) and tool-call parsers.

The names below are imported on first use, so that loading the built-in parsers' plugin
(``agentfly_cli.chat.builtin_parsers``) imports nothing heavy and ``agentfly --help`` stays fast.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from agentfly_cli.plugin_host.lazy_exports import lazy_exports

_EXPORTS = {
    "ChatTemplate": "agentfly_cli.chat.templates",
    "ChatTemplateError": "agentfly_cli.chat.templates",
    "ObservationSettings": "agentfly_cli.settings.chat",
    "ParseError": "agentfly_cli.chat.parsers",
    "ParsedResponse": "agentfly_cli.chat.parsers",
    "ToolCall": "agentfly_cli.chat.parsers",
    "ToolCallParser": "agentfly_cli.chat.parsers",
    "get_parser": "agentfly_cli.chat.parsers",
    "parser_names": "agentfly_cli.chat.parsers",
}

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

if TYPE_CHECKING:
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


__getattr__ = lazy_exports(globals(), _EXPORTS)


def __dir__() -> list[str]:
    return sorted(__all__)
