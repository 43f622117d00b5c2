"""Qwen3-Coder XML tool calls: ``<function=NAME>`` with one ``<parameter=KEY>`` block per argument.

```
<tool_call>
<function=calculator>
<parameter=expression>
2 + 3
</parameter>
</function>
</tool_call>
```

Values are text. With the tools' JSON schemas (the engine hands them over through
:meth:`Qwen3CoderParser.with_tools`) a value becomes the type its parameter declares: a
``string`` parameter keeps the text as written (``42``, ``{"a": 1}``), other types are decoded as
JSON when the text is JSON of that type, else kept as text for the tool to report. Without a
schema, a value that is a JSON number, ``true``/``false``, an object or an array is decoded, and
anything else (``null`` included) stays text.
"""

from __future__ import annotations

from typing import Any

from agentfly_cli.chat.formats.tag_scan import scan_tags
from agentfly_cli.chat.parser_output import (
    MAX_ARGUMENT_DEPTH,
    BaseParser,
    ParsedResponse,
    ParseError,
    ToolCall,
    decode_json,
    nested_too_deeply,
)

OPEN, CLOSE = "<tool_call>", "</tool_call>"
FUNCTION, FUNCTION_END = "<function=", "</function>"
PARAMETER, PARAMETER_END = "<parameter=", "</parameter>"
_MAX_NAME = 200  # a longer name is malformed markup, not a name (and bounds each tag's scan)
_GUESSED = (dict, list, int, float, bool)  # what a value without a schema may decode to
_JSON_TYPES: dict[str, tuple[type, ...]] = {
    "object": (dict,),
    "array": (list,),
    "integer": (int,),
    "number": (int, float),
    "boolean": (bool,),
    "null": (type(None),),
}


class Qwen3CoderParser(BaseParser):
    """Qwen3-Coder: ``<tool_call>`` blocks of ``<function=NAME>`` with ``<parameter=KEY>`` values.

    A ``<function=...>`` block without the ``<tool_call>`` around it is read too. A
    ``<tool_call>`` that holds anything else (e.g. Hermes JSON) is an error.
    """

    name = "qwen3_coder"
    stream_markers = (OPEN, CLOSE, FUNCTION, FUNCTION_END, "<parameter=")
    expected = (
        "Call each tool as <tool_call>\n<function=TOOL_NAME>\n<parameter=ARGUMENT_NAME>\nvalue\n"
        "</parameter>\n</function>\n</tool_call>, with one <parameter=...> block per argument."
    )

    def __init__(self, tools: list[dict] | None = None) -> None:
        self._types = _parameter_types(tools or [])

    def with_tools(self, tools: list[dict] | None) -> Qwen3CoderParser:
        """A parser that types values by these tools' JSON schemas (OpenAI function schemas)."""
        parser = type(self)(tools)
        parser.name = self.name
        return parser

    def parse_body(self, body: str) -> ParsedResponse:
        calls: list[ToolCall] = []
        errors: list[ParseError] = []
        content: list[str] = []
        for kind, start, end in scan_tags(body, OPEN, CLOSE):
            if kind == "text":
                content += self._functions(body[start:end], calls, errors)
            elif kind == "stray":
                raw = body[start:end].strip()
                errors.append(self._error(f"found {CLOSE} without an opening {OPEN}", raw))
            elif kind == "unclosed":
                errors.append(self._error(f"{OPEN} is not closed with {CLOSE}", body[start:end]))
            else:
                raw = body[start : end + len(CLOSE)]
                self._block(body[start + len(OPEN) : end], raw, calls, errors)
        return ParsedResponse("".join(content).strip(), calls, errors)

    def _block(self, inner: str, raw: str, calls: list, errors: list) -> None:
        """One ``<tool_call>`` block: function blocks and nothing else."""
        found = len(calls) + len(errors)
        rest = "".join(self._functions(inner, calls, errors)).strip()
        if len(calls) + len(errors) == found:
            kind = "JSON" if rest.startswith(("{", "[")) else "no <function=TOOL_NAME> block"
            errors.append(self._error(f"{OPEN} holds {kind}; this format writes XML", raw))
        elif rest:
            errors.append(self._error(f"{OPEN} holds text outside its function block", raw))

    def _functions(self, text: str, calls: list, errors: list) -> list[str]:
        """Read the ``<function=...>`` blocks of ``text`` into calls or errors; the text
        around them."""
        rest: list[str] = []
        pos = 0
        next_end = text.find(FUNCTION_END)
        while True:
            start = text.find(FUNCTION, pos)
            if start < 0:
                rest.append(text[pos:])
                return rest
            rest.append(text[pos:start])
            name, after = _tag_name(text, start + len(FUNCTION))
            if name is None:
                window = text[after : after + _MAX_NAME]  # up to the next tag: spans never overlap
                cut = window.find("<")
                raw = text[start:after] + (window[:cut] if cut >= 0 else window)
                errors.append(self._error("a malformed <function=TOOL_NAME> tag", raw))
                pos = after
                continue
            if 0 <= next_end < after:
                next_end = text.find(FUNCTION_END, after)
            following = text.find(FUNCTION, after)
            if next_end < 0 or 0 <= following < next_end:
                stop = following if following >= 0 else len(text)
                problem = f"<function={name}> is not closed with {FUNCTION_END}"
                errors.append(self._error(problem, text[start:stop]))
                if following < 0:
                    return rest
                pos = following
                continue
            raw = text[start : next_end + len(FUNCTION_END)]
            result = self._call(name, text[after:next_end], raw)
            (calls if isinstance(result, ToolCall) else errors).append(result)
            pos = next_end + len(FUNCTION_END)

    def _call(self, name: str, body: str, raw: str) -> ToolCall | ParseError:
        arguments: dict[str, Any] = {}
        pos = 0
        while True:
            start = body.find(PARAMETER, pos)
            if body[pos : start if start >= 0 else len(body)].strip():
                return self._error(f"<function={name}> holds text outside <parameter=...>", raw)
            if start < 0:
                return ToolCall(name, arguments, raw=raw)
            key, after = _tag_name(body, start + len(PARAMETER))
            if key is None:
                return self._error(f"<function={name}> has a malformed <parameter=...> tag", raw)
            end = body.find(PARAMETER_END, after)
            following = body.find(PARAMETER, after)
            if end < 0 or 0 <= following < end:
                return self._error(f"<parameter={key}> is not closed with {PARAMETER_END}", raw)
            if key in arguments:
                return self._error(f"<function={name}> sets <parameter={key}> twice", raw)
            value = self._value(name, key, _unwrap(body[after:end]))
            if isinstance(value, (dict, list)) and nested_too_deeply(value):
                problem = f"<parameter={key}> nests more than {MAX_ARGUMENT_DEPTH} levels deep"
                return self._error(problem, raw)
            arguments[key] = value
            pos = end + len(PARAMETER_END)

    def _value(self, tool: str, key: str, text: str) -> Any:
        types = self._types.get(tool, {}).get(key)
        if types is not None and "string" in types:
            return text
        try:
            value = decode_json(text.strip())
        except (ValueError, RecursionError):
            return text
        if types is None:
            return value if isinstance(value, _GUESSED) else text
        return value if _has_type(value, types) else text

    def _error(self, problem: str, raw: str) -> ParseError:
        return ParseError(f"{problem}. {self.expected}", raw)


def _tag_name(text: str, start: int) -> tuple[str | None, int]:
    """The name in ``<function=NAME>`` whose ``NAME`` starts at ``start``, and the index after
    the ``>``; (None, where the scan stopped) when there is no short one-line name."""
    end = text.find(">", start, start + _MAX_NAME + 1)
    if end < 0:
        return None, start
    name = text[start:end].strip()
    if not name or "\n" in name or "<" in name:
        return None, start
    return name, end + 1


def _unwrap(value: str) -> str:
    """The value without the newline after its opening tag and before its closing tag."""
    if value.startswith("\n"):
        value = value[1:]
    if value.endswith("\n"):
        value = value[:-1]
    return value


def _has_type(value: Any, types: set[str]) -> bool:
    if isinstance(value, bool) and "boolean" not in types:
        return False  # JSON true is not a number
    return any(isinstance(value, _JSON_TYPES.get(t, ())) for t in types)


def _parameter_types(tools: list[dict]) -> dict[str, dict[str, set[str] | None]]:
    """tool name -> parameter name -> the JSON types its schema allows (None: any)."""
    types: dict[str, dict[str, set[str] | None]] = {}
    for tool in tools:
        function = tool.get("function", tool) if isinstance(tool, dict) else None
        if not isinstance(function, dict) or not isinstance(function.get("name"), str):
            continue
        parameters = function.get("parameters")  # a client's tools may be malformed: any
        properties = parameters.get("properties") if isinstance(parameters, dict) else None
        if not isinstance(properties, dict):  # shape reads as "no schema", never a crash
            properties = {}
        types[function["name"]] = {key: _schema_types(schema) for key, schema in properties.items()}
    return types


def _schema_types(schema: Any) -> set[str] | None:
    """The JSON types a (cleaned) JSON schema allows; None when it does not say."""
    if not isinstance(schema, dict):
        return None
    declared = schema.get("type")
    if isinstance(declared, str):
        return {declared}
    if isinstance(declared, list):
        return {t for t in declared if isinstance(t, str)} or None
    found: set[str] = set()
    for key in ("anyOf", "oneOf"):
        options = schema.get(key)
        for option in options if isinstance(options, list) else []:
            option_types = _schema_types(option)
            if option_types is None:
                return None
            found |= option_types
    values = schema.get("enum") or ([schema["const"]] if "const" in schema else [])
    if not isinstance(values, list):
        values = []
    for value in values:
        found.add("string" if isinstance(value, str) else "number")
    return found or None
