"""Lone surrogates: code points (U+D800-U+DFFF) that a Python str may hold but UTF-8 cannot.

A model writes them easily: the JSON escape ``"\\ud800"`` in a tool call decodes to one. They
must never end a run, so text on its way to a tokenizer has them replaced (U+FFFD, the
replacement character), and JSON lines escape them, which round-trips them exactly.
"""

from __future__ import annotations

import json
import re
from typing import Any

_SURROGATE = re.compile("[\ud800-\udfff]")
REPLACEMENT = "\ufffd"


def has_surrogates(text: str) -> bool:
    """Whether ``text`` holds a code point that UTF-8 cannot encode."""
    return not text.isascii() and _SURROGATE.search(text) is not None


def replace_surrogates(text: str) -> str:
    """``text`` with every surrogate code point replaced by U+FFFD (deterministic)."""
    if text.isascii():
        return text
    return _SURROGATE.sub(REPLACEMENT, text)


def _escape(match: re.Match) -> str:
    return f"\\u{ord(match.group()):04x}"


def json_line(value: Any) -> str:
    """``value`` as one line of JSON that UTF-8 can always encode.

    Non-ASCII text stays readable (``ensure_ascii=False``); surrogates, which can only occur
    inside JSON strings, are written as ``\\uXXXX`` escapes, so ``json.loads`` gives back the
    very same str. (A high surrogate followed by a low one comes back as the one character
    that the pair encodes.) Objects JSON has no form for are written as their ``str``.
    """
    text = json.dumps(value, ensure_ascii=False, default=str)
    if text.isascii():
        return text
    return _SURROGATE.sub(_escape, text)
