"""Pythonic tool calls (Llama 3.2 / Llama 4 style): the reply is a python list of calls,
``[get_weather(city="Paris", days=3), other(x=1.5)]``, read with :mod:`ast`, never evaluated.

As vLLM's ``pythonic`` parser documents ("the model must not generate both text and tool calls
in the same generation"), calls are read only from a reply that is the list alone (after
``<think>`` blocks, a code fence or Llama 4's ``<|python_start|>`` wrapper are taken off). A
call list inside other text is not run: it is a ParseError that says to write the list alone.
"""

from __future__ import annotations

import ast
import math
import re
from typing import Any

from agentfly_cli.chat.parser_output import (
    MAX_ARGUMENT_DEPTH,
    BaseParser,
    ParsedResponse,
    ParseError,
    ToolCall,
    nested_too_deeply,
    strip_fence,
)
from agentfly_cli.files.surrogates import has_surrogates

_CALLS_START = re.compile(r"\[\s*[A-Za-z_][\w.]*\s*\(")  # "[name(": the reply meant calls
_EMBEDDED = re.compile(r"\[\s*[A-Za-z_][\w.]*\(\s*[A-Za-z_]\w*\s*=")  # "[name(key=" in text
_SURROGATE = re.compile("[\ud800-\udfff]")
_WRAPPERS = (("<|python_start|>", "<|python_end|>"), ("<|python_tag|>", ""))
_NAMES = {"true": True, "false": False, "null": None}  # JSON spellings, read as Python's
_SHOWN = 60
# Python's parser takes about 1 s per MB of dense code here, so a list longer than this, or with
# more brackets, commas, colons and "=", is refused before parsing: fewer, smaller calls.
MAX_CHARS = 200_000
MAX_SEPARATORS = 50_000
_SEPARATORS = "([{,:="


class _NotLiteral(Exception):
    """A value that is not a literal; the message says what it is instead."""


class _Source:
    """The parsed text, to cut nodes' own text out of it (ast gives UTF-8 byte columns), so
    that raw text and messages cost the length of their node, never a re-render of it."""

    def __init__(self, text: str) -> None:
        self.data = text.encode("utf-8")
        self.lines = [0]  # byte offset of each line's start
        at = self.data.find(b"\n")
        while at >= 0:
            self.lines.append(at + 1)
            at = self.data.find(b"\n", at + 1)

    def text(self, node: ast.AST) -> str:
        """The node's own text."""
        start, end = self._span(node)
        return self.data[start:end].decode("utf-8", "replace")

    def short(self, node: ast.AST) -> str:
        """At most :data:`_SHOWN` characters of the node's text, for a message."""
        start, end = self._span(node)
        text = self.data[start : min(end, start + 4 * _SHOWN)].decode("utf-8", "ignore")
        if len(text) <= _SHOWN and end - start <= 4 * _SHOWN:
            return text
        return text[: _SHOWN - 3] + "..."

    def _span(self, node: ast.AST) -> tuple[int, int]:
        start = self.lines[node.lineno - 1] + node.col_offset
        return start, self.lines[node.end_lineno - 1] + node.end_col_offset

    def literal(self, node: ast.AST) -> Any:
        """The JSON value of a literal: strings, numbers, True/False/None (or true/false/null),
        lists, tuples (as lists) and dicts with string keys. Python's parser allows 200 nested
        brackets at most, which bounds the recursion."""
        if isinstance(node, ast.Constant):
            value = node.value
            if value is None or isinstance(value, (bool, str, int)):
                return value
            if isinstance(value, float):
                if not math.isfinite(value):
                    raise _NotLiteral(f"the number {self.short(node)} is too large for JSON")
                return value
            kind = type(value).__name__
            raise _NotLiteral(f"{self.short(node)} is a {kind}, not a JSON value")
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
            operand = node.operand
            if isinstance(operand, ast.Constant) and type(operand.value) in (int, float):
                value = self.literal(operand)
                return -value if isinstance(node.op, ast.USub) else value
        if isinstance(node, (ast.List, ast.Tuple)):
            return [self.literal(item) for item in node.elts]
        if isinstance(node, ast.Dict):
            result = {}
            for key, value in zip(node.keys, node.values, strict=True):
                if key is None:
                    raise _NotLiteral(f"**{self.short(value)} unpacks a value")
                name = self.literal(key)
                if not isinstance(name, str):
                    raise _NotLiteral(f"the dict key {self.short(key)} is not a string")
                result[name] = self.literal(value)
            return result
        if isinstance(node, ast.Name) and node.id in _NAMES:
            return _NAMES[node.id]
        raise _NotLiteral(f"{self.short(node)} is not a literal")


def _callee(node: ast.AST) -> str | None:
    """``name`` or ``a.b.name`` of a call, else None."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    return ".".join([node.id, *reversed(parts)])


class PythonicParser(BaseParser):
    """Pythonic (Llama 3.2 / 4): ``[tool(a="x", b=2), other()]`` as the whole reply; keyword
    arguments of literals only."""

    name = "pythonic"
    # a reply that is a list of calls starts with one of these (after a fence or a wrapper)
    stream_markers = ("[", "`", "<|python_start|>", "<|python_tag|>")
    expected = (
        "Call tools with a python list of calls with keyword arguments, alone in the reply: "
        '[tool_name(argument="value", count=2)].'
    )

    def parse_body(self, body: str) -> ParsedResponse:
        text = strip_fence(_unwrap(body.strip()))
        if not (text.startswith("[") and text.endswith("]")):
            if _CALLS_START.match(text) and "]" not in text:
                problem = f"the list of calls is not closed with ]. {self.expected}"
                return ParsedResponse("", [], [ParseError(problem, text)])
            return self._text(body)
        separators = sum(text.count(mark) for mark in _SEPARATORS)
        if (len(text) > MAX_CHARS or separators > MAX_SEPARATORS) and _CALLS_START.match(text):
            problem = (
                f"the list of calls is too long to read ({len(text):,} characters, {separators:,} "
                f"brackets, commas, colons and '='; at most {MAX_CHARS:,} and "
                f"{MAX_SEPARATORS:,}): make fewer, smaller calls. {self.expected}"
            )
            return ParsedResponse("", [], [ParseError(problem, text)])
        source = _SURROGATE.sub(_escape, text) if has_surrogates(text) else text
        try:
            tree = ast.parse(source, mode="eval")
        except (SyntaxError, ValueError, RecursionError, MemoryError, UnicodeError) as exc:
            # MemoryError: CPython's parser gives up on deeply nested input with it
            if not _CALLS_START.match(text):
                return ParsedResponse(body.strip(), [])  # e.g. "[see above]": plain text
            why = _syntax(exc)
            message = f"the list of calls is not valid Python ({why}). {self.expected}"
            return ParsedResponse("", [], [ParseError(message, text)])
        if not isinstance(tree.body, ast.List):
            if not _CALLS_START.match(text):
                return ParsedResponse(body.strip(), [])
            problem = f"the reply is not one python list of calls. {self.expected}"
            return ParsedResponse("", [], [ParseError(problem, text)])
        items = tree.body.elts
        if not any(isinstance(item, ast.Call) for item in items):
            return ParsedResponse(body.strip(), [])  # a plain list, e.g. an answer [1, 2]
        calls: list[ToolCall] = []
        errors: list[ParseError] = []
        reader = _Source(source)
        for item in items:
            result = self._call(item, reader)
            (calls if isinstance(result, ToolCall) else errors).append(result)
        return ParsedResponse("", calls, errors)

    def _text(self, body: str) -> ParsedResponse:
        """A reply that is not a list: text, unless it holds a call list among other text."""
        content = body.strip()
        found = _EMBEDDED.search(content)
        if found is None:
            return ParsedResponse(content, [])
        problem = (
            f"tool calls must be the whole reply, with no text before or after the list "
            f"(found {found.group()!r} inside text). {self.expected}"
        )
        return ParsedResponse(content, [], [ParseError(problem, content)])

    def _call(self, node: ast.AST, source: _Source) -> ToolCall | ParseError:
        raw = source.text(node)
        if not isinstance(node, ast.Call):
            return ParseError(f"the list holds {source.short(node)}, which is not a call. "
                              f"{self.expected}", raw)  # fmt: skip
        name = _callee(node.func)
        if name is None:
            problem = f"{source.short(node.func)} is not a tool name. {self.expected}"
            return ParseError(problem, raw)
        if node.args:
            return ParseError(
                f"{name}() got a positional argument ({source.short(node.args[0])}); pass every "
                f"argument by keyword, e.g. {name}(argument=...). {self.expected}",
                raw,
            )
        arguments: dict[str, Any] = {}
        for keyword in node.keywords:
            if keyword.arg in arguments:
                return ParseError(
                    f"{name}() repeats the argument {keyword.arg!r}. {self.expected}", raw
                )
            if keyword.arg is None:
                return ParseError(
                    f"{name}() unpacks **{source.short(keyword.value)}; pass every argument by "
                    f"keyword. {self.expected}",
                    raw,
                )
            try:
                arguments[keyword.arg] = source.literal(keyword.value)
            except _NotLiteral as exc:
                return ParseError(
                    f"the value of {keyword.arg!r} in {name}() must be a literal: {exc}; use "
                    f"strings, numbers, True/False/None, lists and dicts. {self.expected}",
                    raw,
                )
        if nested_too_deeply(arguments):
            return ParseError(
                f"the arguments of {name}() nest more than {MAX_ARGUMENT_DEPTH} levels deep; "
                f"flatten them. {self.expected}",
                raw,
            )
        return ToolCall(name, arguments, "", raw)


def _unwrap(text: str) -> str:
    """The inside of Llama 4's ``<|python_start|>...<|python_end|>`` (or after
    ``<|python_tag|>``) when it wraps the whole reply."""
    for start, end in _WRAPPERS:
        if text.startswith(start) and text.endswith(end):
            return text[len(start) : len(text) - len(end)].strip()
    return text


def _escape(match: re.Match) -> str:
    """A lone surrogate as its ``\\uXXXX`` escape: inside a string literal the same value."""
    return f"\\u{ord(match.group()):04x}"


def _syntax(exc: BaseException) -> str:
    if isinstance(exc, SyntaxError):
        where = f" at line {exc.lineno}, column {exc.offset}" if exc.lineno else ""
        return f"{exc.msg}{where}"
    if isinstance(exc, (RecursionError, MemoryError)):
        return "nested too deeply"
    return str(exc) or type(exc).__name__
