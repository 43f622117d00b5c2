"""Fast, exact tokenization of template text.

Rollouts tokenize the same pieces again and again: the system prompt with its tool list, the
wrapping of every observation, the generation prompt. A fast tokenizer splits its input at added
tokens (``<|im_start|>``, ``<tool_call>``) before anything else, and tokenizes the pieces in
between on their own. So the ids of a text are the ids of its pieces, and each piece can be
cached. This holds for byte-level BPE tokenizers (Qwen, Llama-3, SmolLM2, GPT-2 style), and is
switched off where it may not: SentencePiece-style Metaspace pre-tokenizers (which treat the
first piece differently), added tokens that strip whitespace or match single words, and any
tokenizer that fails the probe check.
"""

from __future__ import annotations

import json
import logging
import re
from typing import Any

from agentfly_cli.chat import pretokens
from agentfly_cli.files.surrogates import replace_surrogates

log = logging.getLogger(__name__)

_CACHE_LIMIT = 200_000
_CHECK_FIRST, _CHECK_EVERY = 16, 64  # pre-token encodes checked against the Rust tokenizer
_LONG = 4096  # characters from which the Rust tokenizer runs without the GIL (encode_batch)
_PROBES = [
    "<|im_start|>system\nYou are helpful.<|im_end|>\n<|im_start|>user\nWhat is 2 + 3?<|im_end|>",
    '<tool_call>\n{"name": "calculator", "arguments": {"expression": "17 * 23"}}\n'
    "</tool_call><|im_end|>\n<|im_start|>user\n<tool_response>\n391\n</tool_response>",
    "  leading spaces, trailing spaces  \n\n\tTabs, ünïcödé, 日本語, emoji 🙂 and CRLF\r\n",
]


class TextEncoder:
    """Encodes like ``tokenizer.encode(text, add_special_tokens=False)``, only faster."""

    def __init__(self, tokenizer: Any) -> None:
        self.tokenizer = tokenizer
        self.backend = _fast_backend(tokenizer)
        spec = _spec(self.backend)
        self.splitter = _splitter(spec) if spec is not None else None
        # new ASCII pieces in Python, cached per pre-token (chat/pretokens.py); checked
        self.pretokens = pretokens.build(self.backend, spec) if self.splitter is not None else None
        self._pretoken_uses = 0
        self._pieces: dict[str, list[int]] = {}
        self._ids = _added_ids(tokenizer) if self.splitter is not None else {}
        if self.splitter is not None and not all(self.encode(p) == self._slow(p) for p in _PROBES):
            self.splitter = self.pretokens = None
            self._pieces.clear()

    @property
    def mode(self) -> str:
        """``pieces`` (cached per piece), ``backend`` (Rust tokenizer) or ``slow``."""
        if self.splitter is not None:
            return "pieces"
        return "backend" if self.backend is not None else "slow"

    def encode(self, text: str) -> list[int]:
        """Ids of ``text``; lone surrogates (which no tokenizer takes) count as U+FFFD."""
        text = replace_surrogates(text)
        if self.splitter is not None:
            ids: list[int] = []
            pieces = self._pieces
            for piece in self.splitter.split(text):
                if not piece:
                    continue
                cached = self._ids.get(piece)
                if cached is not None:
                    ids.append(cached)
                    continue
                cached_ids = pieces.get(piece)
                if cached_ids is None:
                    if len(pieces) >= _CACHE_LIMIT:
                        pieces.clear()
                    cached_ids = pieces[piece] = self._new_ids(piece)
                ids.extend(cached_ids)
            return ids
        if self.backend is not None:
            return self._backend_ids(text)
        return self._slow(text)

    def warm(self, texts: list[str]) -> int:
        """Encode the uncached pieces of ``texts`` in one ``encode_batch`` (every core, no GIL),
        so that a later :meth:`encode` of them is cache lookups. Returns the pieces encoded.
        The ids are the same: each piece is encoded on its own either way."""
        if self.splitter is None:
            return 0
        new: dict[str, None] = {}
        for text in texts:
            for piece in self.splitter.split(replace_surrogates(text)):
                if piece and piece not in self._ids and piece not in self._pieces:
                    new[piece] = None
        pieces = list(new)[: _CACHE_LIMIT - len(self._pieces)]
        rest = []
        for piece in pieces:  # ASCII pieces: cached pre-tokens (less CPU than the batch)
            ids = self._pretoken_ids(piece) if len(piece) < _LONG else None
            if ids is None:
                rest.append(piece)
            else:
                self._pieces[piece] = ids
        if rest:
            fast = getattr(self.backend, "encode_batch_fast", None) or self.backend.encode_batch
            for piece, encoding in zip(rest, fast(rest, add_special_tokens=False), strict=True):
                self._pieces[piece] = encoding.ids
        return len(pieces)

    def _new_ids(self, piece: str) -> list[int]:
        """Ids of a piece not in the cache: cached pre-tokens where they apply, else Rust."""
        if len(piece) < _LONG:
            ids = self._pretoken_ids(piece)
            if ids is not None:
                return ids
        return self._backend_ids(piece)

    def _pretoken_ids(self, piece: str) -> list[int] | None:
        """:mod:`pretokens`' ids of ``piece``, or None where it does not take it. Its first
        uses and every 64th are checked against the Rust tokenizer: one difference drops it
        (and every piece it encoded) for good."""
        if self.pretokens is None:
            return None
        ids = self.pretokens.encode(piece)
        if ids is None:
            return None
        self._pretoken_uses += 1
        if self._pretoken_uses <= _CHECK_FIRST or self._pretoken_uses % _CHECK_EVERY == 0:
            exact = self._backend_ids(piece)
            if exact != ids:
                log.warning(
                    "the per-pre-token encoder gave other ids than the tokenizer for %r; "
                    "tokenizing with the tokenizer alone from now on",
                    piece[:80],
                )
                self.pretokens = None
                self._pieces.clear()
                return None
        return ids

    def _backend_ids(self, text: str) -> list[int]:
        """The Rust tokenizer's ids; a long text through ``encode_batch``, which releases the
        GIL (``encode`` holds it: a 1 MB message would stop every other thread for 0.5 s)."""
        if len(text) >= _LONG:
            return self.backend.encode_batch([text], add_special_tokens=False)[0].ids
        return self.backend.encode(text, add_special_tokens=False).ids

    def decode(self, ids: list[int]) -> str:
        if self.backend is not None:
            return self.backend.decode(list(ids), skip_special_tokens=False)
        return self.tokenizer.decode(
            list(ids), skip_special_tokens=False, clean_up_tokenization_spaces=False
        )

    def _slow(self, text: str) -> list[int]:
        return list(self.tokenizer.encode(text, add_special_tokens=False))


def _fast_backend(tokenizer: Any):
    """The Rust ``tokenizers.Tokenizer`` behind a fast tokenizer, when it gives the same ids."""
    if not getattr(tokenizer, "is_fast", False):
        return None
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is None:
        return None
    try:
        for probe in _PROBES:
            ids = list(tokenizer.encode(probe, add_special_tokens=False))
            if backend.encode(probe, add_special_tokens=False).ids != ids:
                return None
            slow_text = tokenizer.decode(
                ids, skip_special_tokens=False, clean_up_tokenization_spaces=False
            )
            if backend.decode(ids, skip_special_tokens=False) != slow_text:
                return None
    except Exception:
        return None
    return backend


def _added_ids(tokenizer: Any) -> dict[str, int]:
    return {str(k): int(v) for k, v in tokenizer.get_added_vocab().items()}


def _spec(backend: Any) -> dict | None:
    """The Rust tokenizer's JSON, or None."""
    if backend is None:
        return None
    try:
        return json.loads(backend.to_str())
    except Exception:
        return None


def _splitter(spec: dict) -> re.Pattern | None:
    """A regex that splits text at the added tokens, keeping them; None where unsafe."""
    if "Metaspace" in json.dumps(spec.get("pre_tokenizer")) or "Prepend" in json.dumps(
        spec.get("normalizer")
    ):
        return None
    added = spec.get("added_tokens") or []
    if not added:
        return None
    for token in added:
        if token.get("lstrip") or token.get("rstrip") or token.get("single_word"):
            return None
    contents = sorted({t["content"] for t in added if t.get("content")}, key=len, reverse=True)
    return re.compile("(" + "|".join(re.escape(c) for c in contents) + ")")
