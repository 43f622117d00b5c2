"""Text from tools, models and files, made safe to print on a terminal.

A tool result or a model's output may hold escape sequences (ANSI colours, OSC 8 links, OSC 52
clipboard writes, a terminal title), other C0/C1 control characters, bidi overrides that
reorder what is shown, or lone surrogates that cannot be encoded at all. Printed raw they are
interpreted by the terminal; :func:`printable` shows each one escaped instead (``\\x1b``,
``\\u202e``). Newlines and tabs stay. Rich markup is a separate matter: print such text with
``markup=False`` or through :func:`rich.markup.escape`.
"""

from __future__ import annotations

import re

_UNSAFE = re.compile(
    "[\x00-\x08\x0b-\x1f\x7f-\x9f"  # C0 but tab and newline; DEL; C1 (\x9b is a one-byte CSI)
    "\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069"  # bidi marks, embeddings and overrides
    "\u2028\u2029"  # line and paragraph separators
    "\ud800-\udfff]"  # lone surrogates (unencodable)
)


def printable(text: str) -> str:
    """``text`` with every control character shown escaped, not interpreted (linear time)."""
    return _UNSAFE.sub(_escaped, text.replace("\r\n", "\n"))


def _escaped(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"
