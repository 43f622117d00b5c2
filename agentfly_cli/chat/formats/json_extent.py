"""Where a JSON-like value ends, found in one pass without decoding it.

Parsers use it to step over a value the JSON decoder gave up on without saying where (nested
too deeply, a NaN): the next call is looked for after it, so a broken value is scanned once.
"""

from __future__ import annotations

import re

_SIGNIFICANT = re.compile(r'[\[\]{}"\\]')
_OPENERS, _CLOSERS = "[{", "]}"


def value_end(text: str, start: int) -> int:
    """Index just past the bracketed value that opens at ``start`` (strings and their escapes
    respected), or ``len(text)`` when it never closes. A value that does not open with a bracket
    ends one character later."""
    if start >= len(text) or text[start] not in _OPENERS:
        return min(start + 1, len(text))
    depth = 0
    in_string = False
    escaped_until = -1  # the character after a backslash inside a string is literal
    for match in _SIGNIFICANT.finditer(text, start):
        at = match.start()
        if at < escaped_until:
            continue
        char = match.group()
        if in_string:
            if char == "\\":
                escaped_until = at + 2
            elif char == '"':
                in_string = False
        elif char == '"':
            in_string = True
        elif char in _OPENERS:
            depth += 1
        elif char in _CLOSERS:
            depth -= 1
            if depth == 0:
                return at + 1
    return len(text)
