"""Tool-call markup of any known format, found in text that a parser left as plain content.

A model that writes ``<tool_call>`` under the line protocol, ``[TOOL_CALLS]`` under hermes, or a
tag the parser does not recognise (``<tool_call >``) meant to call a tool. Left alone, the turn
would count as a final answer; the engine instead tells the model (an ``unparsed_call`` error).
"""

from __future__ import annotations

import re

# Each alternative is anchored on a literal and bounded, so one scan of a turn is linear.
_MARKUP = re.compile(
    r"<tool_call\b|</tool_call>|\[TOOL_CALLS\]|<\|python_tag\|>|<function=|<tool_use>"
    r"|<｜tool▁calls?▁begin｜>"
    r'|\{\s*"name"\s*:\s*"[^"\n]{1,100}"\s*,\s*"(?:arguments|parameters)"\s*:'
    r"|^[ \t]*(?i:action[ _]input)[ \t]*:",
    re.MULTILINE,
)
_SHOWN = 40


def unparsed_markup(content: str) -> str | None:
    """The first tool-call markup in ``content`` (at most 40 characters of it), else None."""
    match = _MARKUP.search(content)
    if match is None:
        return None
    return match.group().strip()[:_SHOWN]
