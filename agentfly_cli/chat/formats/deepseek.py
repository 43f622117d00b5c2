"""DeepSeek-V3 tool calls: the special tokens its own chat template writes.

V3 writes ``<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>NAME`` then the
arguments in a ```json fence and ``<｜tool▁call▁end｜>``, calls separated by ``\\n``, then
``<｜tool▁calls▁end｜>``. V3.1 drops the type and the fence:
``<｜tool▁call▁begin｜>NAME<｜tool▁sep｜>{ARGS}<｜tool▁call▁end｜>``. Both are read.
"""

from __future__ import annotations

from agentfly_cli.chat.formats.tag_scan import scan_tags
from agentfly_cli.chat.parser_output import (
    BaseParser,
    ParsedResponse,
    ParseError,
    ToolCall,
    call_from_json,
    decode_json,
    json_error,
    strip_fence,
)

CALLS_BEGIN = "<｜tool▁calls▁begin｜>"
CALLS_END = "<｜tool▁calls▁end｜>"
CALL_BEGIN = "<｜tool▁call▁begin｜>"
CALL_END = "<｜tool▁call▁end｜>"
SEP = "<｜tool▁sep｜>"
EOS = "<｜end▁of▁sentence｜>"
_FENCE = "```"


class DeepSeekV3Parser(BaseParser):
    """DeepSeek-V3 / V3.1: ``<｜tool▁call▁begin｜>...<｜tool▁call▁end｜>`` blocks, any number.

    The ``<｜tool▁calls▁begin｜>`` / ``<｜tool▁calls▁end｜>`` wrapper may be missing: DeepSeek-V3's
    own template leaves out the end after a single call, and the begin in every tool-call turn
    but the first. Text outside the call blocks is the content.
    """

    name = "deepseek_v3"
    stream_markers = (CALLS_BEGIN, CALL_BEGIN, SEP, CALL_END, CALLS_END)
    expected = (
        f"Call tools as {CALLS_BEGIN}{CALL_BEGIN}function{SEP}<tool name>\n```json\n"
        f"{{...}}\n```{CALL_END}{CALLS_END}, one {CALL_BEGIN}...{CALL_END} per call "
        f"(several separated by a newline)."
    )

    def parse_body(self, body: str) -> ParsedResponse:
        body = _strip_eos(body)
        calls: list[ToolCall] = []
        errors: list[ParseError] = []
        content: list[str] = []
        for kind, start, end in scan_tags(body, CALL_BEGIN, CALL_END, reopen=True):
            if kind == "text":
                content.append(body[start:end])
            elif kind == "stray":
                raw = body[start:end].strip()
                errors.append(self._error(f"found {CALL_END} without {CALL_BEGIN}", raw))
            elif kind == "unclosed":
                raw = body[start:end]
                errors.append(self._error(f"{CALL_BEGIN} is not closed with {CALL_END}", raw))
            else:
                raw = body[start : end + len(CALL_END)]
                result = self._call(body[start + len(CALL_BEGIN) : end], raw)
                (calls if isinstance(result, ToolCall) else errors).append(result)
        text = "".join(content)
        begin = text.find(CALLS_BEGIN)
        if begin >= 0 and not calls and not errors:
            raw = text[begin : begin + 200]
            errors.append(self._error(f"{CALLS_BEGIN} is followed by no {CALL_BEGIN}", raw))
        text = text.replace(CALLS_BEGIN, "").replace(CALLS_END, "")
        return ParsedResponse(text.strip(), calls, errors)

    def _call(self, inner: str, raw: str) -> ToolCall | ParseError:
        sep = inner.find(SEP)
        if sep < 0:
            return self._error(f"a call has no {SEP} before the tool name", raw)
        head, tail = inner[:sep].strip(), inner[sep + len(SEP) :]
        if head == "function" and not tail.lstrip().startswith("{"):  # V3: type, name, fence
            name, _, arguments = tail.partition("\n")
        else:  # V3.1: the name, then the arguments
            name, arguments = head, tail
        name = name.strip()
        if not name:
            return self._error("a call has no tool name", raw)
        arguments = arguments.strip()
        if arguments.startswith(_FENCE) and (
            len(arguments) < 2 * len(_FENCE) or not arguments.endswith(_FENCE)
        ):
            return self._error(f"the {_FENCE}json fence of {name!r} is not closed", raw)
        arguments = strip_fence(arguments)
        if not arguments:
            return ToolCall(name, {}, raw=raw)
        try:
            value = decode_json(arguments)
        except ValueError as exc:
            return self._error(f"{json_error(exc, 0)} in the arguments of {name!r}", raw)
        except RecursionError:
            return self._error(f"the arguments of {name!r} nest too deeply", raw)
        return call_from_json({"name": name, "arguments": value}, raw, self.expected)

    def _error(self, problem: str, raw: str) -> ParseError:
        return ParseError(f"{problem}. {self.expected}", raw)


def _strip_eos(text: str) -> str:
    """Drop trailing end-of-sentence tokens (and whitespace) in one pass from the end."""
    end = len(text)
    while True:
        cut = end
        while cut and text[cut - 1].isspace():
            cut -= 1
        if text.endswith(EOS, 0, cut):
            end = cut - len(EOS)
        else:
            return text[:end]
