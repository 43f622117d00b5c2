"""One linear scan of a turn for blocks between an opening and a closing tag.

Hermes' ``<tool_call>...</tool_call>``, Qwen3-Coder's XML and DeepSeek-V3's call markers are
read the same way: text, blocks, closing tags with no opening one (strays), and an opening tag
never closed. Each tag is searched for once from where the scan stands, so a turn of a million
stray tags costs one pass (tests/chat/test_parser_limits.py).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Literal, NamedTuple

Kind = Literal["text", "stray", "block", "unclosed"]


class Span(NamedTuple):
    """A piece of the turn, ``body[start:end]``.

    - ``text``: plain text between blocks;
    - ``stray``: a closing tag with no opening one, with the text before it (that text also
      came as ``text``);
    - ``block``: from the opening tag up to (not including) its closing tag;
    - ``unclosed``: an opening tag never closed, to the end of the turn (or, with ``reopen``,
      to the next opening tag).
    """

    kind: Kind
    start: int
    end: int


def scan_tags(body: str, open_tag: str, close_tag: str, *, reopen: bool = False) -> Iterator[Span]:
    """The spans of ``body`` in order.

    ``reopen``: an opening tag met before the closing one ends the unclosed block there and the
    scan goes on from it (DeepSeek-V3); without it, that tag is part of the block's text
    (hermes, XML: the block's decoder reports it).
    """
    pos = 0
    next_open, next_close = body.find(open_tag), body.find(close_tag)
    while pos <= len(body):
        if 0 <= next_open < pos:
            next_open = body.find(open_tag, pos)
        if 0 <= next_close < pos:
            next_close = body.find(close_tag, pos)
        start, stray = next_open, next_close
        if stray >= 0 and (start < 0 or stray < start):
            yield Span("text", pos, stray)
            yield Span("stray", pos, stray + len(close_tag))
            pos = stray + len(close_tag)
            continue
        if start < 0:
            yield Span("text", pos, len(body))
            return
        yield Span("text", pos, start)
        if reopen:
            inner = start + len(open_tag)
            if 0 <= next_open < inner:
                next_open = body.find(open_tag, inner)
            if next_close >= 0 and 0 <= next_open < next_close:
                yield Span("unclosed", start, next_open)
                pos = next_open
                continue
        if next_close < 0:
            if reopen and next_open >= 0:
                yield Span("unclosed", start, next_open)
                pos = next_open
                continue
            yield Span("unclosed", start, len(body))
            return
        yield Span("block", start, next_close)
        pos = next_close + len(close_tag)
