"""Chat templates: the first prompt, and the exact token delta of each tool-result turn.

The rollout never re-renders a whole conversation. It renders the first prompt once, appends the
ids the model sampled, and after each assistant turn appends the template's *delta*: the text the
template puts between that turn's end-of-turn token and the next generation prompt. The delta is
found by rendering a fixed canonical conversation with and without the new messages, so it is
right even for templates that rewrite earlier turns (Qwen3 drops old ``<think>`` blocks).
"""

from __future__ import annotations

import logging
import os
import threading
import weakref
from typing import Any

from agentfly_cli.chat.encoding import TextEncoder
from agentfly_cli.chat.frames import NOT_TOOL_INDEPENDENT, TextFrame, shape
from agentfly_cli.chat.sources import TemplateSource, guess_parser, resolve_template
from agentfly_cli.chat.tokenizer_loading import load_tokenizer
from agentfly_cli.errors import UserError
from agentfly_cli.settings.chat import ObservationSettings

# Canonical conversation used to measure deltas. The sentinel is plain ASCII so that every
# template passes it through unchanged and no tokenizer merges it with its neighbours.
SENTINEL = "AGENTFLYSENTINELREPLY"
_CANONICAL_USER = "AGENTFLYSENTINELQUERY"
log = logging.getLogger(__name__)
_PROMPT_CACHE_SIZE = 4096
SET_FRAMES = 256  # frames measured for one tool list each (templates that write tools otherwise)
_SEEN_ONCE = object()  # such a tool list rendered once: measured on its second use
# Turns that end one way when sampled and another in history, by the end-of-turn text that a
# template writes after a conversation's last assistant message. Harmony (gpt-oss) samples
# <|return|> (a final answer) or <|call|> (a tool call); once more messages follow, history ends
# a final answer with <|end|>, which also closes each message inside a sampled turn (analysis,
# then final), so it never stops sampling.
OTHER_SAMPLED_ENDS = {"<|return|>": ("<|call|>",)}
HISTORY_ENDS = {"<|return|>": "<|end|>"}


class ChatTemplateError(UserError):
    """A chat template that cannot render, or whose turns cannot be cut into exact deltas."""


class ChatTemplate:
    """A tokenizer plus the chat template that renders its conversations."""

    def __init__(
        self,
        tokenizer,
        source: TemplateSource,
        observation: ObservationSettings | None = None,
        chat_template_kwargs: dict | None = None,
    ) -> None:
        self.tokenizer = tokenizer
        self.name = source.name
        self.source = source.text
        self.observation = observation or ObservationSettings()
        self.chat_template_kwargs = dict(chat_template_kwargs or {})
        self.default_parser = guess_parser(source.text)
        self._canonical = [
            {"role": "user", "content": _CANONICAL_USER},
            {"role": "assistant", "content": SENTINEL},
        ]
        self._frames: dict[tuple, tuple[Any, Any]] = {}  # (kind, shape, tool count) -> frame
        self._set_frames: dict[tuple, tuple[Any, TextFrame | None]] = {}  # ... id(tools)
        self._prompts: dict[tuple, tuple[Any, list[int]]] = {}
        self._encoder = TextEncoder(tokenizer)
        self._eot_text, self._before_eot = self._find_turn_end()
        eot_id = self._single_id(self._eot_text)
        self.eot_token_ids: list[int] = [eot_id]
        self._end_texts = [self._eot_text]  # every text that ends a sampled turn
        for text in OTHER_SAMPLED_ENDS.get(self._eot_text, ()):
            if len(ids := self.encode_text(text)) == 1 and ids[0] not in self.eot_token_ids:
                self.eot_token_ids.append(ids[0])
                self._end_texts.append(text)
        # what history writes in place of the end-of-turn token (harmony: <|end|>), else None
        self.history_end = HISTORY_ENDS.get(self._eot_text)
        if self.history_end is not None and len(self.encode_text(self.history_end)) != 1:
            self.history_end = None
        eos_id = getattr(tokenizer, "eos_token_id", None)
        if isinstance(eos_id, int) and eos_id not in self.eot_token_ids:
            self.eot_token_ids.append(eos_id)

    @classmethod
    def load(
        cls,
        tokenizer,
        template: str | os.PathLike | None = None,
        observation: ObservationSettings | None = None,
        chat_template_kwargs: dict | None = None,
        *,
        tokenizer_loader: str = "auto",
    ) -> ChatTemplate:
        """Load from a tokenizer (or a tokenizer folder) and an optional template override.

        ``template``: None for the tokenizer's own, a packaged name, or a path to a .jinja file.
        ``tokenizer_loader`` reads a folder (chat/tokenizer_loading.py): auto, transformers or
        tokenizer.json.
        """
        if isinstance(tokenizer, (str, os.PathLike)):
            tokenizer = load_tokenizer(tokenizer, tokenizer_loader)
        source = resolve_template(tokenizer, template)
        return cls(tokenizer, source, observation, chat_template_kwargs)

    def __repr__(self) -> str:
        return f"ChatTemplate(name={self.name!r}, eot={self._eot_text!r})"

    # -- rendering -----------------------------------------------------------------------------
    def render_text(
        self,
        messages: list[dict[str, Any]],
        tools: list[dict] | None = None,
        add_generation_prompt: bool = False,
    ) -> str:
        """The template's text for ``messages`` (tools as OpenAI function schemas)."""
        try:
            text = self.tokenizer.apply_chat_template(
                list(messages),
                tools=tools or None,
                chat_template=self.source,
                add_generation_prompt=add_generation_prompt,
                tokenize=False,
                **self.chat_template_kwargs,
            )
        except Exception as exc:  # Jinja errors, raise_exception(), type errors in the template
            raise ChatTemplateError(
                f"chat template {self.name!r} failed to render the conversation "
                f"({type(exc).__name__}: {exc}); fix the messages or pass another --template"
            ) from exc
        return text

    def render_prompt(
        self, messages: list[dict[str, Any]], tools: list[dict] | None = None
    ) -> list[int]:
        """Token ids of the first prompt, ending with the generation prompt.

        The ``n`` chains of a task share their prompt, so recent prompts are cached.
        """
        key = _prompt_key(messages, tools)
        cached = self._prompts.get(key) if key is not None else None
        if cached is not None and cached[0] is tools:
            return list(cached[1])
        text = self._framed("prompt", messages, tools, self._render_prompt_text)
        ids = self.encode_text(text)
        self._keep_prompt(key, tools, ids)
        return list(ids)

    def warm_prompts(self, prompts: list[tuple[list[dict[str, Any]], list[dict] | None]]) -> int:
        """Tokenize the first prompts of many chains ahead of the rollout (their new text, e.g.
        each row's tool list, in one pass) and cache their ids: :meth:`render_prompt` of the
        same messages and tool list is then one lookup, with the same ids. Returns the pieces
        newly encoded."""
        new = []
        for messages, tools in prompts:
            key = _prompt_key(messages, tools)
            cached = self._prompts.get(key) if key is not None else None
            if cached is None or cached[0] is not tools:
                new.append((key, messages, tools))
        texts = [self._framed("prompt", m, t, self._render_prompt_text) for _, m, t in new]
        encoded = self._encoder.warm(texts)
        for (key, _, tools), text in zip(new, texts, strict=True):
            self._keep_prompt(key, tools, self.encode_text(text))
        return encoded

    def _keep_prompt(self, key: tuple | None, tools: list[dict] | None, ids: list[int]) -> None:
        if key is not None:
            if len(self._prompts) >= _PROMPT_CACHE_SIZE:
                self._prompts.pop(next(iter(self._prompts)))
            self._prompts[key] = (tools, ids)

    def _render_prompt_text(self, messages, tools) -> str:
        return self.render_text(messages, tools, add_generation_prompt=True)

    def encode_text(self, text: str) -> list[int]:
        """Tokenize template text as is (special tokens written in it count; none are added)."""
        return self._encoder.encode(text)

    def decode(self, ids: list[int]) -> str:
        """Text of ``ids``, special tokens included."""
        return self._encoder.decode(ids)

    def encode_response(self, text: str) -> list[int]:
        """Ids "as if sampled" for a scripted assistant turn: the text, then the end-of-turn id."""
        if any(text.endswith(end) for end in self._end_texts):
            return self.encode_text(text)
        return self.encode_text(text + self._before_eot) + [self.eot_token_ids[0]]

    # -- tool results --------------------------------------------------------------------------
    def observation_messages(
        self, results: list[tuple[str | None, str | None, str]]
    ) -> list[dict[str, Any]]:
        """Messages for one turn's results ``(tool name, tool call id, observation text)``."""
        fmt = self.observation
        if fmt.role == "tool":
            messages = []
            for name, call_id, text in results:
                message: dict[str, Any] = {
                    "role": "tool",
                    "content": fmt.format(name, text),
                    "name": name or "",
                }
                if call_id is not None:
                    message["tool_call_id"] = call_id
                messages.append(message)
            return messages
        if not results:
            return []
        joined = "\n".join(fmt.format(name, text) for name, _, text in results)
        return [{"role": fmt.role, "content": joined}]

    def observation_delta(
        self, messages: list[dict[str, Any]], tools: list[dict] | None = None, closed: bool = True
    ) -> list[int]:
        """Ids that follow an assistant turn ended by its end-of-turn token: the template's text
        after that token, then ``messages``, then the next generation prompt. With ``closed``
        False (the turn ended on a stop token), the end-of-turn token comes first."""
        # Tokenized behind the end-of-turn token, as in the full conversation, so that tokenizers
        # which treat the start of a text specially (a SentencePiece dummy prefix) agree.
        text = self.delta_text(messages, tools)
        ids = self.encode_text(self._eot_text + text)
        if ids[:1] != self.eot_token_ids[:1]:
            ids = self.eot_token_ids[:1] + self.encode_text(text)
        if closed:
            return ids[1:]
        # The turn ended on a stop token, not on its end-of-turn token: close it first, as
        # history closes a turn (harmony: <|end|>; <|return|> only ever ends sampling).
        close = self.encode_text(self.history_end) if self.history_end else ids[:1]
        return (self.encode_text(self._before_eot) if self._before_eot else []) + close + ids[1:]

    def stop_token_ids(self, stops: list[str]) -> list[int]:
        """Ids of every vocabulary token whose text contains one of ``stops`` (e.g. a newline),
        special tokens excepted: sampling one ends the turn."""
        if not stops:
            return []
        texts = token_texts(self.tokenizer)
        return [
            i for i, text in enumerate(texts) if text is not None and any(s in text for s in stops)
        ]

    def delta_text(self, messages: list[dict[str, Any]], tools: list[dict] | None = None) -> str:
        """The text of :meth:`observation_delta`.

        Rendering twice per turn is the slow part of a rollout, so the delta of each message
        shape (roles, names, tool count) is measured once as a frame with the contents left as
        slots. A frame is used only when the template is shown to copy contents verbatim (a
        probe with whitespace, quotes and markup renders identically); else every turn renders.
        """
        return self._framed("delta", messages, tools, self._render_delta)

    def _framed(self, kind: str, messages, tools, render_with_tools) -> str:
        """``render_with_tools(messages, tools)`` through a cached frame of this shape.

        Frames are kept per message shape and tool count, whatever the tools say, where the
        template writes each tool as its JSON or not at all (:mod:`agentfly_cli.chat.frames`);
        else per tool list (the last :data:`SET_FRAMES`), from the list's second use on (a
        task's own tool list may be used only once)."""
        message_shape = shape(messages)
        key: tuple = (kind, message_shape, len(tools) if tools else 0)
        frames: dict = self._frames
        entry = frames.get(key)
        if entry is None:
            if tools:
                frame = TextFrame.measure_for_any_tools(render_with_tools, messages, len(tools))
            else:
                frame = TextFrame.measure(render_with_tools, messages)
            entry = frames[key] = (None, frame)
        if entry[1] is NOT_TOOL_INDEPENDENT:
            key, frames = (kind, message_shape, id(tools)), self._set_frames
            entry = frames.get(key)
            if entry is None or entry[0] is not tools:  # a list seen once is not measured
                if len(frames) >= SET_FRAMES:
                    frames.pop(next(iter(frames)))
                frames[key] = (tools, _SEEN_ONCE)
                return render_with_tools(messages, tools)
            if entry[1] is _SEEN_ONCE:
                entry = frames[key] = (tools, TextFrame.measure(render_with_tools, messages, tools))
        frame = entry[1]
        if frame is None:
            return render_with_tools(messages, tools)
        try:
            text = frame.fill(frame.values(messages, tools))
        except (KeyError, TypeError, ValueError, AttributeError):  # a tool it cannot write
            return render_with_tools(messages, tools)
        if frame.due_for_check():
            rendered = render_with_tools(messages, tools)
            if rendered != text:
                log.warning(
                    "chat template %r renders some %s contents differently from its probe; "
                    "rendering every %s of this shape in full from now on",
                    self.name,
                    kind,
                    kind,
                )
                frames[key] = (entry[0], None)
                return rendered
        return text

    def _render_delta(self, messages: list[dict[str, Any]], tools: list[dict] | None) -> str:
        before = self.render_text(self._canonical, tools)
        after = self.render_text(
            self._canonical + list(messages), tools, add_generation_prompt=True
        )
        start_before, token_before, _ = self._assistant_turn(before)
        start_after, token_after, end_after = self._assistant_turn(after)
        # the text up to the end token must agree; the token itself may be its history form
        if before[start_before:token_before] != after[start_after:token_after]:
            raise ChatTemplateError(
                f"chat template {self.name!r} ends an assistant turn differently once "
                f"{_roles(messages)} follow ({before[start_before:token_before]!r} vs "
                f"{after[start_after:token_after]!r}), so sampled turns cannot be kept as "
                "sampled; pass another --template"
            )
        return after[end_after:]

    # -- internals -----------------------------------------------------------------------------
    def _assistant_turn(self, text: str) -> tuple[int, int, int]:
        """Where the canonical assistant content starts, and where the token that ends its turn
        (the end-of-turn token, or its history form) starts and ends."""
        start = text.find(SENTINEL)
        if start < 0 or text.count(SENTINEL) != 1:
            raise ChatTemplateError(
                f"chat template {self.name!r} does not write an assistant message's content "
                "verbatim, so turn deltas cannot be found; pass another --template"
            )
        ends = [self._eot_text] + ([self.history_end] if self.history_end else [])
        found = [(at, end) for end in ends if (at := text.find(end, start + len(SENTINEL))) >= 0]
        if not found:
            raise ChatTemplateError(
                f"chat template {self.name!r} does not end an assistant turn with "
                f"{' or '.join(map(repr, ends))} once tool results follow; pass another --template"
            )
        at, end = min(found)
        return start, at, at + len(end)

    def _find_turn_end(self) -> tuple[str, str]:
        """The end-of-turn token text after an assistant turn, and any text the template puts
        between the content and it."""
        text = self.render_text(self._canonical)
        start = text.find(SENTINEL)
        if start < 0:
            raise ChatTemplateError(
                f"chat template {self.name!r} does not write an assistant message's content "
                "verbatim; pass another --template"
            )
        tail = text[start + len(SENTINEL) :]
        best: tuple[int, int, str] | None = None
        for tokens in _added_tokens(self.tokenizer):  # special tokens first, then other added ones
            for token in tokens:
                pos = tail.find(token)
                if pos >= 0 and (best is None or (pos, -len(token)) < best[:2]):
                    best = (pos, -len(token), token)
            if best is not None:
                break
        if best is None:
            raise ChatTemplateError(
                f"chat template {self.name!r} ends assistant turns with no special token of the "
                "tokenizer, so the model cannot stop a turn; pass --template (e.g. chatml)"
            )
        return best[2], tail[: best[0]]

    def _single_id(self, token: str) -> int:
        ids = self.encode_text(token)
        if len(ids) != 1:
            raise ChatTemplateError(
                f"end-of-turn text {token!r} of template {self.name!r} is not one token; "
                "pass another --template"
            )
        return ids[0]


def _added_tokens(tokenizer) -> tuple[list[str], list[str]]:
    """The tokenizer's special tokens, and its other added tokens (e.g. Qwen's <tool_call>)."""
    special = set(getattr(tokenizer, "all_special_tokens", None) or [])
    decoder = getattr(tokenizer, "added_tokens_decoder", None) or {}
    special.update(t.content for t in decoder.values() if getattr(t, "special", False))
    added = set(tokenizer.get_added_vocab()) - special
    return sorted(t for t in special if t), sorted(t for t in added if t)


def _roles(messages: list[dict[str, Any]]) -> str:
    roles = sorted({str(m.get("role")) for m in messages})
    return " and ".join(f"{r!r} messages" for r in roles) if roles else "no messages"


_TOKEN_TEXTS: dict[int, list[str | None]] = {}  # id(tokenizer) -> each token's text
_TOKEN_TEXTS_LOCK = threading.Lock()


def token_texts(tokenizer: Any) -> list[str | None]:
    """Each vocabulary token's text (``None`` for special tokens), decoded once per tokenizer
    (0.66 s for Qwen3's 151k tokens), so that each new stop list is a scan of strings (0.07 s)
    instead of a decode of the whole vocabulary."""
    key = id(tokenizer)
    with _TOKEN_TEXTS_LOCK:
        cached = _TOKEN_TEXTS.get(key)
        if cached is None or len(cached) != len(tokenizer):
            special = set(getattr(tokenizer, "all_special_ids", []) or [])
            cached = [
                None if i in special else tokenizer.decode([i]) for i in range(len(tokenizer))
            ]
            _TOKEN_TEXTS[key] = cached
            weakref.finalize(tokenizer, _TOKEN_TEXTS.pop, key, None)
        return cached


def _prompt_key(messages: list[dict[str, Any]], tools: list[dict] | None) -> tuple | None:
    """The prompt cache's key: the messages' text and the tool list's identity (the cached
    entry keeps the list, so the identity cannot be reused); None for unprintable messages."""
    try:
        return (repr(messages), id(tools))
    except Exception:
        return None
