"""What a tool-call parser returns, and what every format shares (think blocks, JSON calls)."""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from typing import Any


@dataclass
class ToolCall:
    """One call the model asked for. ``arguments`` is a str when it was not a JSON object."""

    name: str
    arguments: dict | str
    id: str = ""  # the parser may leave it empty; the engine assigns ids
    raw: str = ""


@dataclass
class ParseError:
    """Markup the model got wrong. ``message`` is the observation the model will read."""

    message: str
    raw: str = ""


@dataclass
class ParsedResponse:
    """One assistant turn, parsed."""

    content: str
    calls: list[ToolCall] = field(default_factory=list)
    errors: list[ParseError] = field(default_factory=list)
    reasoning: str | None = None  # text inside <think>...</think>
    answer: str | None = None  # a final answer the format itself marks (ReAct, line protocol)


THINK_OPEN, THINK_CLOSE = "<think>", "</think>"
# End-of-turn markers that may trail decoded text; never part of the content.
_TRAILING_MARKERS = (
    "<|im_end|>",
    "<|eot_id|>",
    "<|eom_id|>",
    "<|endoftext|>",
    "</s>",
    "<end_of_turn>",
    "<|end|>",
)


def strip_trailing_markers(text: str) -> str:
    """Drop end-of-turn markers (and whitespace) at the end of ``text``.

    Works on an end index, so a turn of a million repeated markers costs one pass.
    """
    cut = len(text)
    while True:
        end = cut
        while end and text[end - 1].isspace():
            end -= 1
        for marker in _TRAILING_MARKERS:
            if text.endswith(marker, 0, end):
                cut = end - len(marker)
                break
        else:
            return text[:cut]


def split_think(text: str) -> tuple[str | None, str]:
    """Split ``text`` into (reasoning, the rest).

    ``<think>...</think>`` blocks are reasoning; an unclosed ``<think>`` swallows the rest. A
    ``</think>`` before any ``<think>`` closes a block that the prompt opened, so the text before
    it is reasoning too. Reasoning is None when the text has no think tags at all.
    """
    if THINK_OPEN not in text and THINK_CLOSE not in text:
        return None, text
    thoughts: list[str] = []
    rest: list[str] = []
    pos, size = 0, len(text)
    first_close, first_open = text.find(THINK_CLOSE), text.find(THINK_OPEN)
    if first_close >= 0 and (first_open < 0 or first_close < first_open):
        thoughts.append(text[:first_close])
        pos = first_close + len(THINK_CLOSE)
    while pos < size:
        start = text.find(THINK_OPEN, pos)
        if start < 0:
            rest.append(text[pos:])
            break
        rest.append(text[pos:start])
        end = text.find(THINK_CLOSE, start + len(THINK_OPEN))
        if end < 0:
            thoughts.append(text[start + len(THINK_OPEN) :])
            break
        thoughts.append(text[start + len(THINK_OPEN) : end])
        pos = end + len(THINK_CLOSE)
    content = "".join(rest).replace(THINK_CLOSE, "")
    return "\n".join(t.strip() for t in thoughts if t.strip()), content


_FENCE_MARK = "```"
_FENCE_LANGUAGE = re.compile(r"[A-Za-z0-9_-]*")


def strip_fence(text: str) -> str:
    """The inside of a Markdown code fence around the whole text, else the text stripped.

    The language tag after the opening fence is dropped. String operations only: the regex
    this replaced backtracked for minutes on a fence of a few thousand newlines.
    """
    stripped = text.strip()
    mark = len(_FENCE_MARK)
    if len(stripped) < 2 * mark or not (
        stripped.startswith(_FENCE_MARK) and stripped.endswith(_FENCE_MARK)
    ):
        return stripped
    inner = stripped[mark:-mark]
    return inner[_FENCE_LANGUAGE.match(inner).end() :].strip()


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON; write a number, a string or null")


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"the number {text[:40]} is too large")
    return value


# Strict JSON: NaN, Infinity and numbers that overflow to infinity are errors the model reads,
# so that every call's arguments can be written back as standard JSON.
JSON_DECODER = json.JSONDecoder(parse_constant=_no_constant, parse_float=_finite_float)


def decode_json(text: str) -> Any:
    """``json.loads`` under the strict rules of :data:`JSON_DECODER` (ValueError when not JSON,
    RecursionError when nested too deeply)."""
    return JSON_DECODER.decode(text)


MAX_ARGUMENT_DEPTH = 100  # deeper arguments are an error: records of them must stay writable


def nested_too_deeply(value: Any, limit: int = MAX_ARGUMENT_DEPTH) -> bool:
    """Whether lists and objects in ``value`` nest more than ``limit`` levels (no recursion)."""
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            children = item.values()
        elif isinstance(item, list):
            children = item
        else:
            continue
        if depth > limit:
            return True
        stack.extend((child, depth + 1) for child in children if isinstance(child, (dict, list)))
    return False


def json_error(exc: ValueError, pos: int) -> str:
    """Why a text is not JSON, for the model: the decoder's message and the position."""
    message = getattr(exc, "msg", None) or str(exc)
    return f"invalid JSON ({message} at character {getattr(exc, 'pos', pos)})"


def call_from_json(obj: Any, raw: str, fmt: str) -> ToolCall | ParseError:
    """A call from a decoded JSON object ``{"name": ..., "arguments"|"parameters": {...}}``.

    ``fmt`` is the format hint appended to error messages. A string ``arguments`` is decoded
    when it holds a JSON object and kept as a str otherwise (the tool then reports it).
    """
    if isinstance(obj, dict) and "name" not in obj and isinstance(obj.get("function"), dict):
        obj = obj["function"]  # OpenAI style {"type": "function", "function": {...}}
    if not isinstance(obj, dict):
        return ParseError(f"a tool call must be a JSON object, got {_kind(obj)}. {fmt}", raw)
    name = obj.get("name")
    if not isinstance(name, str) or not name.strip():
        return ParseError(f'the tool call has no "name" string. {fmt}', raw)
    key = next((k for k in ("arguments", "parameters") if k in obj), None)
    arguments = obj.get(key) if key else {}
    if arguments is None:
        arguments = {}
    if isinstance(arguments, str):
        try:
            decoded = decode_json(arguments)
        except (ValueError, RecursionError):
            decoded = None
        if isinstance(decoded, dict):
            arguments = decoded
    elif not isinstance(arguments, dict):
        return ParseError(
            f'the arguments of "{name.strip()}" must be a JSON object, got {_kind(arguments)}. '
            f"{fmt}",
            raw,
        )
    if isinstance(arguments, dict) and nested_too_deeply(arguments):
        return ParseError(
            f'the arguments of "{name.strip()}" nest more than {MAX_ARGUMENT_DEPTH} levels deep; '
            f"flatten them. {fmt}",
            raw,
        )
    call_id = obj.get("id")
    return ToolCall(name.strip(), arguments, call_id if isinstance(call_id, str) else "", raw)


def _kind(value: Any) -> str:
    names = {dict: "an object", list: "a list", str: "a string", bool: "a boolean"}
    if value is None:
        return "null"
    return names.get(type(value), "a number" if isinstance(value, (int, float)) else "a value")


def json_values(text: str) -> tuple[list[tuple[Any, str]], str | None]:
    """Decode the JSON values in ``text`` one after another (separated by whitespace, "," or ";").

    Returns the (value, raw) pairs and, where decoding stopped early, why.
    """
    values: list[tuple[Any, str]] = []
    pos, size = 0, len(text)
    while True:
        while pos < size and (text[pos].isspace() or text[pos] in ",;"):
            pos += 1
        if pos >= size:
            return values, None
        try:
            value, end = JSON_DECODER.raw_decode(text, pos)
        except ValueError as exc:
            return values, json_error(exc, pos)
        except RecursionError:
            return values, "invalid JSON (nested too deeply)"
        values.append((value, text[pos:end]))
        pos = end


class BaseParser:
    """Shared frame of every format: think blocks out, never raise, always a ParsedResponse."""

    name = ""
    expected = ""  # one sentence on the expected format, appended to error messages
    think_tags = True  # False where the format marks reasoning itself (<think> is then text)
    #: text that may begin this format's markup: a streamed reply (``agentfly serve``) shows
    #: its content up to the first of them; None holds the whole reply to the end
    stream_markers: tuple[str, ...] | None = None

    @classmethod
    def from_options(cls, options: dict | None = None) -> BaseParser:
        """Build from recipe options. Formats without options ignore them, so that a recipe's
        options for its own parser do not block ``--parser`` overriding it."""
        return cls()

    def parse(self, text: str) -> ParsedResponse:
        """Parse one assistant turn's text. Any input gives a ParsedResponse."""
        try:
            text = "" if text is None else str(text)
            body = strip_trailing_markers(text)
            reasoning, body = split_think(body) if self.think_tags else (None, body)
            result = self.parse_body(body)
            if reasoning is not None:  # else what parse_body found (None in most formats)
                result.reasoning = reasoning
            return result
        except Exception as exc:  # a parser bug must not end a rollout: report it as data
            return ParsedResponse(
                content="",
                errors=[
                    ParseError(
                        f"the response could not be parsed ({type(exc).__name__}). {self.expected}",
                        _safe_str(text),
                    )
                ],
            )

    def parse_body(self, body: str) -> ParsedResponse:
        """Parse text that has no think blocks left."""
        raise NotImplementedError


def _safe_str(value: Any) -> str:
    try:
        return str(value)
    except Exception:
        return ""
