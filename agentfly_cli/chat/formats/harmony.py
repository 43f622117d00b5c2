"""gpt-oss's harmony format: a sampled turn of ``<|start|>ROLE<|channel|>...<|message|>...``
messages; reasoning on ``analysis``, tool calls on ``commentary`` to ``functions.NAME``, the
answer on ``final`` (spec: openai/harmony docs/format.md).

The generation prompt ends with ``<|start|>assistant``, so a sampled turn starts inside the
first message's header (``<|channel|>analysis<|message|>...<|end|>``), and every later message
opens with ``<|start|>assistant``. Sampling stops at ``<|call|>`` or ``<|return|>``.
"""

from __future__ import annotations

from dataclasses import dataclass

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

START, END, MESSAGE = "<|start|>", "<|end|>", "<|message|>"
CHANNEL, CONSTRAIN, CALL, RETURN = "<|channel|>", "<|constrain|>", "<|call|>", "<|return|>"
CHANNELS = ("analysis", "commentary", "final")
NAMESPACE = "functions."
_SHOWN = 80  # characters of a bad header or recipient quoted back to the model


@dataclass
class Header:
    """What a message header says: ``ROLE to=RECIPIENT<|channel|>CHANNEL <|constrain|>TYPE``."""

    role: str = ""
    recipient: str = ""
    channel: str = ""
    content_type: str = ""


def read_header(header: str, role: str = "") -> Header:
    """The fields of a header (the text between ``<|start|>`` and ``<|message|>``). ``role`` is
    the role of a header that the prompt opened (the sampled turn's first message)."""
    words = header.replace(CHANNEL, f" {CHANNEL} ").replace(CONSTRAIN, f" {CONSTRAIN} ").split()
    found = Header(role=role)
    after = ""  # the marker the next word belongs to
    for position, word in enumerate(words):
        if word in (CHANNEL, CONSTRAIN):
            after = word
            continue
        if after == CHANNEL:
            found.channel = word
        elif after == CONSTRAIN or word == "json":
            found.content_type = word
        elif word.startswith("to="):
            found.recipient = word[3:]
        elif position == 0 and not found.role:
            found.role = word
        elif position == 0 and word == found.role:
            pass  # the sampled turn repeated the role the prompt wrote
        after = ""
    return found


class HarmonyParser(BaseParser):
    """gpt-oss harmony: calls to ``functions.NAME`` with JSON arguments, ``analysis`` as
    reasoning, ``final`` (and tool-call preambles on ``commentary``) as content."""

    name = "harmony"
    think_tags = False  # reasoning is the analysis channel; <think> is plain text here
    expected = (
        "Call a tool with <|start|>assistant<|channel|>commentary to=functions.<tool name> "
        "<|constrain|>json<|message|>{JSON arguments}<|call|>, and answer with "
        "<|start|>assistant<|channel|>final<|message|><answer><|return|>."
    )

    def parse_body(self, body: str) -> ParsedResponse:
        if START not in body and MESSAGE not in body and CHANNEL not in body:
            return ParsedResponse(body.strip(), [])  # plain text: no harmony markup at all
        calls: list[ToolCall] = []
        errors: list[ParseError] = []
        content: list[str] = []
        reasoning: list[str] = []
        start, first = 0, True
        while start <= len(body):
            stop = body.find(START, start)
            stop = len(body) if stop < 0 else stop
            role = "assistant" if first else ""  # the prompt opened the first message
            if not self._message(body, start, stop, role, calls, errors, content, reasoning):
                break
            start, first = stop + len(START), False
        if not (calls or errors or content):
            errors.append(
                ParseError(
                    f"the reply has no final answer and no tool call. {self.expected}",
                    body.strip()[:_SHOWN],
                )
            )
        return ParsedResponse(
            "\n".join(content),
            calls,
            errors,
            reasoning="\n".join(reasoning) if reasoning else None,
        )

    def _message(self, body, start, stop, role, calls, errors, content, reasoning) -> bool:
        """Read the message in ``body[start:stop]``; False when the turn must not be read on."""
        opened = body.find(MESSAGE, start, stop)
        if opened < 0:
            if body[start:stop].strip():
                errors.append(
                    ParseError(
                        f"a message header without {MESSAGE}: "
                        f"{body[start:stop].strip()[:_SHOWN]!r}. {self.expected}",
                        body[start:stop],
                    )
                )
            return True
        header = read_header(body[start:opened], role)
        begin = start if role else start - len(START)  # raw text includes its <|start|>
        text_start = opened + len(MESSAGE)
        ends = [at for end in (END, CALL, RETURN) if (at := body.find(end, text_start, stop)) >= 0]
        closed = min(ends) if ends else stop
        text = body[text_start:closed]
        end_length = next((len(e) for e in (END, CALL, RETURN) if body.startswith(e, closed)), 0)
        raw = body[begin : closed + end_length]
        trailing = body[closed + end_length : stop]
        if header.role != "assistant":
            errors.append(
                ParseError(
                    f"the reply contains a message from {header.role[:_SHOWN]!r}: write only "
                    "assistant messages, and end a tool call with <|call|> to get its result. "
                    f"{self.expected}",
                    raw,
                )
            )
            return False  # the model is imagining what comes back: the rest is not its turn
        if header.recipient:
            self._call(header, text, raw, calls, errors)
        elif header.channel == "analysis":
            reasoning.append(text.strip())
        elif header.channel in ("", "final", "commentary"):  # commentary: a preamble
            if text.strip():
                content.append(text.strip())
        else:
            errors.append(
                ParseError(
                    f"unknown channel {header.channel[:_SHOWN]!r}; the channels are "
                    f"{', '.join(CHANNELS)}. {self.expected}",
                    raw,
                )
            )
        if trailing.strip():
            errors.append(
                ParseError(
                    f"text after the end of a message: {trailing.strip()[:_SHOWN]!r}; start "
                    f"every message with <|start|>assistant. {self.expected}",
                    trailing,
                )
            )
        return True

    def _call(self, header: Header, text: str, raw: str, calls, errors) -> None:
        recipient = header.recipient
        name = recipient[len(NAMESPACE) :] if recipient.startswith(NAMESPACE) else ""
        if not name.strip():
            errors.append(
                ParseError(
                    f"the message is addressed to {recipient[:_SHOWN]!r}, which is not one of "
                    f"the functions (to=functions.<tool name>). {self.expected}",
                    raw,
                )
            )
            return
        inner = strip_fence(text)
        if not inner:
            arguments = {}
        else:
            try:
                arguments = decode_json(inner)
            except ValueError as exc:
                errors.append(
                    ParseError(
                        f'{json_error(exc, 0)} in the arguments of "{name}". {self.expected}', raw
                    )
                )
                return
            except RecursionError:
                errors.append(
                    ParseError(
                        f'invalid JSON (nested too deeply) in the arguments of "{name}". '
                        f"{self.expected}",
                        raw,
                    )
                )
                return
        result = call_from_json({"name": name, "arguments": arguments}, raw, self.expected)
        (calls if isinstance(result, ToolCall) else errors).append(result)
