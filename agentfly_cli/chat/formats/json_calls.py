"""JSON tool-call formats: Hermes/Qwen ``<tool_call>``, Llama-3 JSON, Mistral ``[TOOL_CALLS]``."""

from __future__ import annotations

import json
import re
from typing import Any

from agentfly_cli.chat.formats.json_extent import value_end
from agentfly_cli.chat.formats.tag_scan import scan_tags
from agentfly_cli.chat.parser_output import (
    JSON_DECODER,
    BaseParser,
    ParsedResponse,
    ParseError,
    ToolCall,
    call_from_json,
    json_error,
    json_values,
    strip_fence,
)


def _add_calls(
    value: Any, raw: str, fmt: str, calls: list[ToolCall], errors: list[ParseError]
) -> None:
    """A decoded value is one call, or a list of calls. Each item of a list keeps its own JSON
    as its raw text, so that a list of many items does not repeat the whole list per item."""
    if not isinstance(value, list):
        result = call_from_json(value, raw, fmt)
        (calls if isinstance(result, ToolCall) else errors).append(result)
        return
    for item in value:
        result = call_from_json(item, _compact_json(item), fmt)
        (calls if isinstance(result, ToolCall) else errors).append(result)


def _compact_json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def _decode_one(text: str, pos: int = 0) -> tuple[Any, int, str | None]:
    """One JSON value at ``pos`` (after whitespace): ``(value, end, None)``, or ``(None, end,
    why it is not JSON)`` where ``end`` is just past where it broke, which bounds the text that
    the error covers."""
    while pos < len(text) and text[pos].isspace():
        pos += 1
    try:
        value, end = JSON_DECODER.raw_decode(text, pos)
    except ValueError as exc:
        broke = getattr(exc, "pos", None)
        end = broke + 1 if broke is not None else value_end(text, pos)
        return None, end, json_error(exc, pos)
    except RecursionError:
        return None, value_end(text, pos), "invalid JSON (nested too deeply)"
    return value, end, None


class HermesParser(BaseParser):
    """Hermes / Qwen: ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>``, any number."""

    name = "hermes"
    expected = (
        'Write each tool call as <tool_call>{"name": "<tool name>", "arguments": {...}}'
        "</tool_call>."
    )
    OPEN, CLOSE = "<tool_call>", "</tool_call>"
    stream_markers = (OPEN, CLOSE)

    def parse_body(self, body: str) -> ParsedResponse:
        calls: list[ToolCall] = []
        errors: list[ParseError] = []
        content: list[str] = []
        for kind, start, end in scan_tags(body, self.OPEN, self.CLOSE):
            if kind == "text":
                content.append(body[start:end])
            elif kind == "stray":
                message = f"found {self.CLOSE} without an opening {self.OPEN}. {self.expected}"
                errors.append(ParseError(message, body[start:end].strip()))
            elif kind == "unclosed":
                message = f"{self.OPEN} is not closed with {self.CLOSE}. {self.expected}"
                errors.append(ParseError(message, body[start:end]))
            else:
                raw = body[start : end + len(self.CLOSE)]
                inner = strip_fence(body[start + len(self.OPEN) : end])
                self._decode(inner, raw, calls, errors)
        return ParsedResponse("".join(content).strip(), calls, errors)

    def _decode(
        self, inner: str, raw: str, calls: list[ToolCall], errors: list[ParseError]
    ) -> None:
        if not inner:
            errors.append(ParseError(f"empty {self.OPEN}. {self.expected}", raw))
            return
        if inner.startswith("<function="):  # Qwen3-Coder's XML call: the qwen3_coder parser's
            problem = f"{self.OPEN} holds an XML <function=...> call; this format writes JSON"
            errors.append(ParseError(f"{problem}. {self.expected}", raw))
            return
        values, problem = json_values(inner)
        for value, _ in values:
            _add_calls(value, raw, self.expected, calls, errors)
        if problem:
            errors.append(ParseError(f"{problem} inside {self.OPEN}. {self.expected}", raw))


class Llama3JsonParser(BaseParser):
    """Llama 3.x: ``{"name": ..., "parameters": {...}}``, optionally after ``<|python_tag|>``;
    several calls separated by ``;``."""

    name = "llama3_json"
    expected = (
        'Call a tool with a JSON object {"name": "<tool name>", "parameters": {...}}; '
        'separate several calls with ";".'
    )
    TAG = "<|python_tag|>"
    stream_markers = (TAG, "{", "`")
    _START = re.compile(r'\{\s*"name"\s*:')

    def parse_body(self, body: str) -> ParsedResponse:
        tag = body.find(self.TAG)
        if tag >= 0:
            return self._after_tag(body[:tag], body[tag + len(self.TAG) :])
        calls: list[ToolCall] = []
        errors: list[ParseError] = []
        gaps: list[str] = []
        pos = scan = 0
        for match in self._START.finditer(body):
            if match.start() < scan:
                continue
            value, end, problem = _decode_one(body, match.start())
            if problem is not None:
                # the broken text up to where it broke is one error and stays text; a call
                # nested in it is not tried again, so a deep nest costs one pass, not one each
                errors.append(
                    ParseError(
                        f"{problem} in a tool call. {self.expected}", body[match.start() : end]
                    )
                )
                gaps.append(body[pos:end])
                pos = scan = end
                continue
            scan = end
            if not self._is_call(value):
                continue  # JSON that merely has a "name" field stays text
            gaps.append(body[pos : match.start()])
            _add_calls(value, body[match.start() : end], self.expected, calls, errors)
            pos = end
        gaps.append(body[pos:])
        content = "".join(g for g in gaps if g.strip(" \t\r\n;"))
        return ParsedResponse(content.strip(), calls, errors)

    @staticmethod
    def _is_call(value: Any) -> bool:
        if not isinstance(value, dict) or not isinstance(value.get("name"), str):
            return False
        return "parameters" in value or "arguments" in value or len(value) == 1

    def _after_tag(self, before: str, region: str) -> ParsedResponse:
        calls: list[ToolCall] = []
        errors: list[ParseError] = []
        values, problem = json_values(strip_fence(region.replace(self.TAG, ";")))
        for value, raw in values:
            _add_calls(value, raw, self.expected, calls, errors)
        if problem:
            errors.append(ParseError(f"{problem} after {self.TAG}. {self.expected}", region))
        return ParsedResponse(before.strip(), calls, errors)


class MistralParser(BaseParser):
    """Mistral: ``[TOOL_CALLS] [{"name": ..., "arguments": {...}}, ...]`` (also the newer
    ``[TOOL_CALLS]name[ARGS]{...}``)."""

    name = "mistral"
    expected = (
        "Call tools with [TOOL_CALLS] and a JSON list: "
        '[TOOL_CALLS] [{"name": "<tool name>", "arguments": {...}}].'
    )
    MARK = "[TOOL_CALLS]"
    stream_markers = (MARK,)
    _NAMED = re.compile(r"\s*([A-Za-z0-9_.\-]+)(?:\[CALL_ID\]([A-Za-z0-9_\-]*))?\[ARGS\]")

    def parse_body(self, body: str) -> ParsedResponse:
        calls: list[ToolCall] = []
        errors: list[ParseError] = []
        parts = body.split(self.MARK)
        content = [parts[0]]
        for part in parts[1:]:
            named = self._NAMED.match(part)
            value, end, problem = _decode_one(part, named.end() if named else 0)
            if problem is not None:
                errors.append(ParseError(f"{problem} after {self.MARK}. {self.expected}", part))
                continue
            raw = self.MARK + part[:end]
            if named:
                value = {"name": named.group(1), "arguments": value, "id": named.group(2) or ""}
            _add_calls(value, raw, self.expected, calls, errors)
            content.append(part[end:])
        return ParsedResponse("".join(content).strip(), calls, errors)
