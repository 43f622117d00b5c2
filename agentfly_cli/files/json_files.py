"""Read JSON and JSONL files that users hand us, with one-line errors for every way they break.

A file may hold bytes that are not UTF-8, be binary, nest deeper than Python's recursion
limit, or not be JSON at all; each is a :class:`~agentfly_cli.errors.UserError` naming the
file, the line and the fix, never a traceback. A UTF-8 byte-order mark is accepted.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from agentfly_cli.errors import UserError

BOM = b"\xef\xbb\xbf"


def iter_json_lines(path: str | Path, fix: str) -> Iterator[tuple[int, Any]]:
    """``(line number, value)`` of each non-blank line of a JSONL file.

    ``fix`` ends the messages for a file that is not JSON text: what to pass instead.
    """
    path = Path(path)
    with _open_bytes(path, fix) as lines:
        for number, raw in enumerate(lines, 1):
            if number == 1:
                raw = raw.removeprefix(BOM)
            text = decode_text(raw, f"{path}:{number}", fix)
            if text.strip():
                yield number, parse_json(text, f"{path}:{number}", fix)


def read_json_file(path: str | Path, fix: str) -> Any:
    """The value of a whole JSON file."""
    path = Path(path)
    with _open_bytes(path, fix) as data:
        raw = data.read().removeprefix(BOM)
    return parse_json(decode_text(raw, str(path), fix), str(path), fix)


def decode_text(raw: bytes, where: str, fix: str) -> str:
    """``raw`` as UTF-8 text; binary data and other encodings are one-line UserErrors."""
    if b"\x00" in raw:
        raise UserError(f"{where}: holds NUL bytes, so it is binary, not JSON text; {fix}")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        byte = raw[exc.start : exc.start + 1].hex()
        raise UserError(
            f"{where}: byte 0x{byte} at offset {exc.start} is not UTF-8; save the file as "
            "UTF-8 (e.g. with `iconv -f latin1 -t utf-8`)"
        ) from None


def parse_json(text: str, where: str, fix: str) -> Any:
    """``json.loads(text)`` with one-line errors (bad syntax, nesting too deep)."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise UserError(
            f"{where}: not JSON ({exc.msg} at line {exc.lineno} column {exc.colno}); {fix}"
        ) from None
    except RecursionError:
        raise UserError(
            f"{where}: JSON nested too deeply to read (over about 1000 levels of lists or "
            "objects); flatten it"
        ) from None


def _open_bytes(path: Path, fix: str):
    try:
        return open(path, "rb")  # noqa: SIM115 (the callers close it)
    except IsADirectoryError:
        raise UserError(f"{path} is a folder, not a file; {fix}") from None
    except OSError as exc:
        raise UserError(f"cannot read {path} ({exc.strerror or exc}); {fix}") from None
