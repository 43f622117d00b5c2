"""Text frames: a template's rendering of one message shape, with the varying parts cut out.

A frame is literal text around numbered slots. The slots are the messages' contents (and tool
call ids) and, where the template writes each tool schema as its JSON (``tool | tojson``), the
tools' JSON too: one frame then serves every tool set of that size, so a thousand rows that
bring a thousand tool sets cost a thousand fills, not a thousand renders. A frame exists only
when probe values (whitespace, quotes, markup; tools with nested, escaped and empty schemas)
render exactly as it fills them; :class:`ChatTemplate` also checks its first uses and every
64th against a full render and drops it for good on one mismatch.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any

SLOT = "AGENTFLYSLOT{}X"
PROBE = "  \n<probe {} & 'q' \"x\" {{y}} \\ >\n  "
_TOOL_MARKS = ("AGENTFLYTOOL", "AGENTFLYARG")  # text of the marker tools (never in a literal)


def _dumps(value: Any, indent: int | None = None) -> str:
    # what transformers' chat-template `tojson` filter writes (json.dumps, ensure_ascii=False)
    return json.dumps(value, ensure_ascii=False, indent=indent)


def _coder_xml(tool: Any) -> str:
    """A tool as agentfly's ``qwen3_coder`` template writes it (its name, trimmed description,
    each parameter's keys as tags, the required list as JSON)."""
    function = tool["function"] if "function" in tool else tool
    parts = [f"<function>\n<name>{function['name']}</name>"]
    if function.get("description"):
        parts.append(f"\n<description>{str(function['description']).strip()}</description>")
    parameters = function.get("parameters") or {}
    parts.append("\n<parameters>")
    for name, schema in (parameters.get("properties") or {}).items():
        parts.append(f"\n<parameter>\n<name>{name}</name>")
        for key, value in schema.items():
            text = value if isinstance(value, str) else _dumps(value)
            parts.append(f"\n<{key}>{text}</{key}>")
        parts.append("\n</parameter>")
    if parameters.get("required"):
        parts.append(f"\n<required>{_dumps(parameters['required'])}</required>")
    parts.append("\n</parameters>\n</function>")
    return "".join(parts)


# How a template may write each tool: its whole schema or its "function" part, as `tojson`
# writes them (Qwen2.5, Qwen3, agentfly's chatml-tools: the whole schema; Llama 3.1: indent=4),
# or as agentfly's qwen3_coder template writes it in XML. Each is only a candidate: a frame
# takes the one that writes the marker tools and renders the probe tools exactly.
TOOL_FORMATS: dict[str, Callable[[Any], str]] = {
    "json": lambda tool: _dumps(tool),
    "json-function": lambda tool: _dumps(tool["function"]),
    "json-indent4": lambda tool: _dumps(tool, 4),
    "json-function-indent4": lambda tool: _dumps(tool["function"], 4),
    "json-indent2": lambda tool: _dumps(tool, 2),
    "coder-xml": _coder_xml,
}


def _marker_tool(i: int) -> dict[str, Any]:
    return {
        "type": "function",
        "function": {
            "name": f"AGENTFLYTOOL{i}X",
            "description": f"AGENTFLYTOOLDESC{i}X",
            "parameters": {
                "type": "object",
                "properties": {f"AGENTFLYARG{i}X": {"type": "string", "description": "d"}},
                "required": [f"AGENTFLYARG{i}X"],
            },
        },
    }


def _probe_tool(i: int, variant: int) -> dict[str, Any]:
    """Tools unlike the markers: escapes, unicode, nesting, enums (variant 0); nothing to say,
    no arguments (variant 1)."""
    if variant:
        return {
            "type": "function",
            "function": {
                "name": f"p{i}",
                "description": "",
                "parameters": {"type": "object", "properties": {}},
            },
        }
    return {
        "type": "function",
        "function": {
            "name": f"probe.tool_{i}-x",
            "description": f'Say "hi" & <b>{i}</b> \\ {{x}}\n  ünï 🙂',
            "parameters": {
                "type": "object",
                "properties": {
                    "q": {"type": "string", "enum": ["a", "b'c"], "description": "</tools>"},
                    "n": {
                        "type": "object",
                        "properties": {"deep": {"type": "array", "items": {"type": "number"}}},
                    },
                    "k": {"type": "integer", "default": 3},
                },
                "required": ["q"],
                "additionalProperties": False,
            },
        },
    }


def slot_fields(message: dict[str, Any]) -> list[str]:
    """The string fields of a message whose values vary from call to call."""
    # empty values stay in the shape, not in a slot: templates often test `if message.content`
    return [
        k for k in ("content", "tool_call_id") if isinstance(message.get(k), str) and message[k]
    ]


def shape(messages: list[dict[str, Any]]) -> tuple:
    """What a frame depends on: everything but the slot values."""
    parts = []
    for message in messages:
        slots = slot_fields(message)
        rest = tuple(sorted((k, repr(v)) for k, v in message.items() if k not in slots))
        parts.append((tuple(slots), rest))
    return tuple(parts)


def slot_values(messages: list[dict[str, Any]]) -> list[str]:
    return [m[k] for m in messages for k in slot_fields(m)]


def with_slots(messages: list[dict[str, Any]], values: list[str]) -> list[dict[str, Any]]:
    out, it = [], iter(values)
    for message in messages:
        copy = dict(message)
        for key in slot_fields(message):
            copy[key] = next(it)
        out.append(copy)
    return out


class NotToolIndependent:
    """Measured: this template writes tools in a form other than their JSON (e.g. as Python
    signatures), so a frame must be measured per tool set."""


NOT_TOOL_INDEPENDENT = NotToolIndependent()


class TextFrame:
    """A measured rendering with its slot values cut out: literal text around numbered slots.

    ``tool_format`` names how the tools' JSON fills the slots after the messages' (a key of
    :data:`TOOL_FORMATS`), or is None when the text holds no tool (a turn delta).
    """

    CHECK_FIRST = 4
    CHECK_EVERY = 64

    def __init__(self, literals: list[str], order: list[int], tool_format: str | None = None):
        self.literals = literals  # len(order) + 1 pieces
        self.order = order  # which slot value goes between literals[i] and literals[i + 1]
        self.tool_format = tool_format
        self.uses = 0

    def fill(self, values: list[str]) -> str:
        parts = [self.literals[0]]
        for slot, literal in zip(self.order, self.literals[1:], strict=True):
            parts.append(values[slot])
            parts.append(literal)
        return "".join(parts)

    def values(self, messages: list[dict[str, Any]], tools: Sequence[Any] | None) -> list[str]:
        """The slot values of ``messages`` and ``tools``; raises (KeyError, TypeError, ...)
        for a tool its format cannot write, which then renders in full."""
        values = slot_values(messages)
        if self.tool_format is not None and tools:
            write = TOOL_FORMATS[self.tool_format]
            values.extend(write(tool) for tool in tools)
        return values

    def due_for_check(self) -> bool:
        self.uses += 1
        return self.uses <= self.CHECK_FIRST or self.uses % self.CHECK_EVERY == 0

    @classmethod
    def measure(cls, render, messages, tools=None) -> TextFrame | None:
        """The frame of ``render(messages, tools)`` for this message shape, or None when
        contents are not copied verbatim. ``render`` is called with the given ``tools``: the
        frame is for that tool list only."""
        count = len(slot_values(messages))
        marks = [SLOT.format(i) for i in range(count)]
        text = render(with_slots(messages, marks), tools)
        frame = _cut(text, marks)
        if frame is None:
            return None
        probes = [PROBE.format(i) for i in range(count)]
        if render(with_slots(messages, probes), tools) != frame.fill(probes):
            return None
        return frame

    @classmethod
    def measure_for_any_tools(
        cls, render, messages, tool_count: int
    ) -> TextFrame | NotToolIndependent | None:
        """A frame for every list of ``tool_count`` tools: the tools' JSON are slots, or the
        text holds no tool. :data:`NOT_TOOL_INDEPENDENT` when the template writes tools some
        other way; None when it does not copy message contents verbatim."""
        try:
            return cls._measure_for_any_tools(render, messages, tool_count)
        except Exception:  # a template that fails on made-up tools: measure each tool list
            return NOT_TOOL_INDEPENDENT

    @classmethod
    def _measure_for_any_tools(cls, render, messages, tool_count: int):
        count = len(slot_values(messages))
        marks = [SLOT.format(i) for i in range(count)]
        markers = [_marker_tool(i) for i in range(tool_count)]
        text = render(with_slots(messages, marks), markers)
        tool_format = None
        if any(mark in text for mark in _TOOL_MARKS):
            tool_format = _tool_format(text, markers)
            if tool_format is None:
                return NOT_TOOL_INDEPENDENT
            marks += [TOOL_FORMATS[tool_format](tool) for tool in markers]
        frame = _cut(text, marks, tool_format)
        if frame is None:
            return None
        if any(mark in literal for literal in frame.literals for mark in _TOOL_MARKS):
            return NOT_TOOL_INDEPENDENT  # tool names or texts written outside their JSON too
        probed = with_slots(messages, [PROBE.format(i) for i in range(count)])
        if render(probed, markers) != frame.fill(frame.values(probed, markers)):
            return None  # message contents are not copied verbatim: no frame helps
        for variant in (0, 1):
            tools = [_probe_tool(i, variant) for i in range(tool_count)]
            if render(probed, tools) != frame.fill(frame.values(probed, tools)):
                return NOT_TOOL_INDEPENDENT
        return frame


def _tool_format(text: str, markers: list[dict[str, Any]]) -> str | None:
    """The format in which ``text`` holds every marker tool, once each."""
    for name, write in TOOL_FORMATS.items():
        if all(text.count(write(tool)) == 1 for tool in markers):
            return name
    return None


def _cut(text: str, marks: list[str], tool_format: str | None = None) -> TextFrame | None:
    """``text`` cut at each mark (each present at most once), or None."""
    found = sorted((text.find(m), i) for i, m in enumerate(marks) if m in text)
    if any(text.count(marks[i]) != 1 for _, i in found):
        return None
    literals, order, position = [], [], 0
    for start, slot in found:
        if start < position:  # overlapping marks
            return None
        literals.append(text[position:start])
        order.append(slot)
        position = start + len(marks[slot])
    literals.append(text[position:])
    return TextFrame(literals, order, tool_format)
