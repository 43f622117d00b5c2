"""Plain-text tool-call formats: ReAct (``Action:`` / ``Action Input:``) and a line protocol."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from agentfly_cli.chat.parser_output import (
    BaseParser,
    ParsedResponse,
    ParseError,
    ToolCall,
    decode_json,
    nested_too_deeply,
    strip_fence,
)
from agentfly_cli.errors import UserError


class ReactParser(BaseParser):
    """ReAct: ``Action: <tool>`` then ``Action Input: <JSON object or plain text>``, or
    ``Final Answer: ...``. Keywords are case-insensitive and start a line.

    A JSON-object input becomes the arguments dict; anything else is passed as a str (a JSON
    string literal decoded first), and the engine decides what to do with it (a one-argument tool
    receives it as that argument). Text after an ``Observation:`` line is ignored: it is the
    model imagining a tool result.
    """

    name = "react"
    expected = (
        "Write 'Action: <tool name>' and on the next line 'Action Input: <JSON object>', "
        "or 'Final Answer: <answer>'."
    )
    _KEY = re.compile(
        r"^[ \t]*(thought|action[ _]input|action|observation|final[ _]answer)[ \t]*:",
        re.IGNORECASE | re.MULTILINE,
    )
    _NAME = re.compile(r"[\w.\-]+")

    def parse_body(self, body: str) -> ParsedResponse:
        matches = list(self._KEY.finditer(body))
        content = [body[: matches[0].start()] if matches else body]
        calls: list[ToolCall] = []
        errors: list[ParseError] = []
        answer: str | None = None
        pending: tuple[str, str] | None = None  # (action value, raw)
        for i, match in enumerate(matches):
            stop = matches[i + 1].start() if i + 1 < len(matches) else len(body)
            key = match.group(1).lower().replace("_", " ")
            value, raw = body[match.end() : stop], body[match.start() : stop]
            if key == "observation":
                break
            if key == "thought":
                content.append(raw)
            elif key == "final answer":
                answer = value.strip() if answer is None else answer
            elif key == "action":
                if pending is not None:
                    errors.append(self._no_input(pending))
                pending = (value, raw)
            elif pending is None:
                problem = f"'Action Input:' without an 'Action:'. {self.expected}"
                errors.append(ParseError(problem, raw))
            else:
                result = self._call(pending[0], value, pending[1] + raw)
                (calls if isinstance(result, ToolCall) else errors).append(result)
                pending = None
        if pending is not None:
            errors.append(self._no_input(pending))
        if answer is not None and (calls or errors):
            errors.append(
                ParseError(
                    "the response has both an Action and a Final Answer; write either an Action "
                    "with its Action Input, or a Final Answer alone"
                )
            )
            answer = None
        return ParsedResponse("".join(content).strip(), calls, errors, answer=answer)

    def _no_input(self, pending: tuple[str, str]) -> ParseError:
        name = pending[0].strip() or "?"
        problem = f"'Action: {name}' has no 'Action Input:' line. {self.expected}"
        return ParseError(problem, pending[1])

    def _call(self, action: str, text: str, raw: str) -> ToolCall | ParseError:
        lines = action.strip().splitlines()
        name = (lines[0] if lines else "").strip().strip("`*'\"").strip()
        if not self._NAME.fullmatch(name):
            return ParseError(
                f"'Action:' must be followed by a tool name alone, got {name[:60]!r}. "
                f"{self.expected}",
                raw,
            )
        return ToolCall(name, _react_arguments(strip_fence(text)), raw=raw.strip())


def _react_arguments(text: str) -> dict | str:
    if not text:
        return {}
    try:
        value = decode_json(text)
    except (ValueError, RecursionError):
        return text
    if isinstance(value, str) or (isinstance(value, dict) and not nested_too_deeply(value)):
        return value
    return text  # the tool reports it


@dataclass(frozen=True)
class LineCommand:
    """``PREFIX: value`` calls ``tool`` with ``{argument: value}``; no tool sets the answer; a
    tool without an argument is a command without a value (``PREFIX`` alone calls it with ``{}``).
    """

    prefix: str
    tool: str | None
    argument: str | None

    @property
    def takes_no_value(self) -> bool:
        return self.tool is not None and self.argument is None

    def matches(self, line: str) -> bool:
        """Whether a stripped line is this command."""
        if line.startswith(self.prefix + ":"):
            return True
        return self.takes_no_value and line == self.prefix


_EXAMPLE = (
    '{"commands": {"CALC": {"tool": "calculator", "argument": "expression"}, '
    '"ANSWER": {"tool": null}}}'
)


def _option_error(problem: str) -> UserError:
    return UserError(f"line parser options: {problem}; e.g. parser_options: {_EXAMPLE}")


class LineParser(BaseParser):
    """A line protocol defined by options: a line ``CALC: 2 + 3`` (prefix case-sensitive, at the
    start of the line, leading whitespace allowed) calls the command's tool with the rest of the
    line as its one argument. A command whose tool is null sets the answer instead; one whose
    argument is null takes no value: ``BOARD`` (or ``BOARD:``) alone on its line calls it."""

    name = "line"

    def __init__(self, commands: list[LineCommand]) -> None:
        self.commands = commands
        self._by_prefix = {c.prefix: c for c in commands}
        forms = [
            c.prefix if c.takes_no_value else f"{c.prefix}: <{c.argument or 'answer'}>"
            for c in commands
        ]
        self.expected = "Write one command per line: " + " or ".join(forms) + "."

    @classmethod
    def from_options(cls, options: dict | None = None) -> LineParser:
        if not isinstance(options, dict) or "commands" not in options:
            raise _option_error("the line parser needs a 'commands' table")
        unknown = sorted(set(options) - {"commands"})
        if unknown:
            raise _option_error(f"unknown option(s) {', '.join(map(str, unknown))}")
        table = options["commands"]
        if not isinstance(table, dict) or not table:
            raise _option_error("'commands' must be a non-empty table of PREFIX: {tool, argument}")
        return cls([_command(prefix, spec) for prefix, spec in table.items()])

    def parse_body(self, body: str) -> ParsedResponse:
        calls: list[ToolCall] = []
        errors: list[ParseError] = []
        content: list[str] = []
        answer: str | None = None
        for line in body.splitlines():
            stripped = line.strip()
            command = self._command_of(stripped) if stripped else None
            if command is None:
                content.append(line)
                continue
            value = stripped[len(command.prefix) + 1 :].strip()
            if command.takes_no_value:
                if value:
                    problem = f"'{command.prefix}' takes no value; write it alone on its line."
                    errors.append(ParseError(f"{problem} {self.expected}", stripped))
                else:
                    calls.append(ToolCall(command.tool, {}, raw=stripped))
            elif not value:
                errors.append(
                    ParseError(
                        f"'{command.prefix}:' needs a value on the same line. {self.expected}",
                        stripped,
                    )
                )
            elif command.tool is None:
                answer = value if answer is None else answer
            else:
                calls.append(ToolCall(command.tool, {command.argument: value}, raw=stripped))
        return ParsedResponse("\n".join(content).strip(), calls, errors, answer=answer)

    def _command_of(self, line: str) -> LineCommand | None:
        """The command a stripped line is (a prefix never holds ':', so one lookup decides)."""
        head, colon, _ = line.partition(":")
        command = self._by_prefix.get(head)
        if command is not None and (colon or command.takes_no_value):
            return command
        return None


def _command(prefix: Any, spec: Any) -> LineCommand:
    if not isinstance(prefix, str) or not prefix or any(c.isspace() or c == ":" for c in prefix):
        raise _option_error(f"command {prefix!r} must be a word without spaces or ':'")
    if not isinstance(spec, dict):
        raise _option_error(f"command {prefix!r} must map to {{tool, argument}}")
    unknown = sorted(set(spec) - {"tool", "argument"})
    if unknown:
        raise _option_error(f"command {prefix!r} has unknown key(s) {', '.join(map(str, unknown))}")
    if "tool" not in spec:
        raise _option_error(f"command {prefix!r} needs 'tool' (a tool name, or null: the answer)")
    tool, argument = spec["tool"], spec.get("argument")
    if tool is None:
        if argument is not None:
            raise _option_error(f"command {prefix!r} sets the answer (tool null); drop 'argument'")
        return LineCommand(prefix, None, None)
    if not isinstance(tool, str) or not tool.strip():
        raise _option_error(f"command {prefix!r}: 'tool' must be a tool name or null")
    if "argument" in spec and argument is None:
        return LineCommand(prefix, tool.strip(), None)  # a command without a value
    if not isinstance(argument, str) or not argument.strip():
        raise _option_error(
            f"command {prefix!r} needs 'argument': the tool argument that receives the line "
            "(argument: null for a command without a value)"
        )
    return LineCommand(prefix, tool.strip(), argument.strip())
