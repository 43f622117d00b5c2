"""Byte-level BPE in Python with a cache per pre-token: exact, and faster than the Rust call.

A byte-level BPE tokenizer (Qwen, Llama-3, SmolLM2, GPT-2 style) cuts its text into pre-tokens
with regexes, maps each pre-token's bytes to characters, and merges each pre-token on its own.
So a text's ids are the ids of its pre-tokens, and a pre-token's ids never change: a thousand
rows that each bring their own tool list share nearly all their pre-tokens (``{"``, ``type``,
``":``, `` "string``), and a cache per pre-token turns most of their tokenizing into lookups.
Splitting in Python (the ``regex`` module) and looking up costs about a third of the Rust
tokenizer's ``encode`` on such text, whose fixed cost per call (offsets, token strings, the
Encoding object) is most of its time.

Exactness is measured, not assumed. Only ASCII text takes this path, where Unicode's letter,
number and space classes, case folding and every normalizer that does not change case agree
between Python's ``regex`` and the Rust tokenizer's Oniguruma; only the pipelines
:func:`build` recognises (normalizers NFC/NFD/NFKC/NFKD, pre-tokenizers Split (Isolated),
Digits and ByteLevel, a BPE model without dropout) are taken; and the tokenizer must give the
same ids for every ASCII character in many contexts, and for structured text, before the path
is used (:class:`TextEncoder` also checks its first uses and every 64th against the Rust
tokenizer, and drops the path for good on one difference).
"""

from __future__ import annotations

import re
import string
from itertools import chain
from typing import Any

try:
    import regex
except ImportError:  # a dependency of transformers: absent only in an unusual install
    regex = None

_GPT2_PATTERN = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""
_IDENTITY_ON_ASCII = {"NFC", "NFD", "NFKC", "NFKD"}
_CACHE_LIMIT = 200_000


def _byte_chars() -> dict[int, str]:
    """GPT-2's map from bytes to printable characters (what ByteLevel writes each byte as)."""
    printable = [*range(ord("!"), ord("~") + 1), *range(0xA1, 0xAD), *range(0xAE, 0x100)]
    chars = dict(zip(printable, map(chr, printable), strict=True))
    extra = 0
    for byte in range(256):
        if byte not in chars:
            chars[byte] = chr(256 + extra)
            extra += 1
    return chars


_ASCII_TO_BYTE_CHARS = {b: c for b, c in _byte_chars().items() if b < 128}


# Unicode classes as their ASCII members: inside a character class, and on their own
_ASCII_CLASSES = {"L": "a-zA-Z", "N": "0-9", "Lu": "A-Z", "Ll": "a-z", "Nd": "0-9"}
_NO_ASCII_MEMBERS = {"Lt", "Lm", "Lo", "M", "Mn", "Mc", "Me"}


def ascii_pattern(pattern: str) -> re.Pattern | None:
    r"""``pattern`` for the stdlib ``re`` on ASCII text (2-3x faster than ``regex``): each
    ``\p{...}`` written as its ASCII members, ``re.ASCII`` for ``\s``, ``\w``, ``\d``; None
    where a class has no such form (then ``regex`` runs the pattern as written)."""
    out, depth, i = [], 0, 0
    while i < len(pattern):
        c = pattern[i]
        if c == "\\" and pattern.startswith(("\\p{", "\\P{"), i):
            end = pattern.find("}", i)
            name = pattern[i + 3 : end]
            if pattern[i + 1] == "P" or end < 0:
                return None
            if name in _ASCII_CLASSES:
                members = _ASCII_CLASSES[name]
                out.append(members if depth else f"[{members}]")
            elif name in _NO_ASCII_MEMBERS and depth:
                pass  # nothing in ASCII: drop it from its class
            else:
                return None
            i = end + 1
            continue
        if c == "\\":
            out.append(pattern[i : i + 2])
            i += 2
            continue
        if c == "[" and not depth:
            depth = 1
        elif c == "]" and depth:
            depth = 0
        out.append(c)
        i += 1
    text = "".join(out)
    if re.search(r"(?<!\\)\[\^?\]", text):  # a class left empty
        return None
    try:
        return re.compile(text, re.ASCII)
    except re.error:
        return None


class _Split:
    """One Split pre-tokenizer, behaviour Isolated: each match and each gap is a piece."""

    def __init__(self, pattern: str) -> None:
        self.pattern = ascii_pattern(pattern) or regex.compile(pattern)

    def __call__(self, text: str) -> list[str]:
        found = self.pattern.findall(text)
        if sum(map(len, found)) == len(text):  # the pattern covers the text: no gaps
            return [piece for piece in found if piece]
        pieces, position = [], 0
        for match in self.pattern.finditer(text):
            start, end = match.span()
            if start == end:
                continue
            if start > position:
                pieces.append(text[position:start])
            pieces.append(text[start:end])
            position = end
        if position < len(text):
            pieces.append(text[position:])
        return pieces


def _whole(text: str) -> list[str]:
    """No split: the text is one pre-token."""
    return [text] if text else []


def _steps(spec: dict | None) -> list[Any] | None:
    """The pre-tokenizer as splitting steps, the last being ByteLevel's; None if unsupported."""
    if not isinstance(spec, dict):
        return None
    parts = spec.get("pretokenizers") if spec.get("type") == "Sequence" else [spec]
    if not parts or not isinstance(parts, list):
        return None
    steps: list[Any] = []
    for index, part in enumerate(parts):
        kind = part.get("type")
        if kind == "ByteLevel":
            if index != len(parts) - 1 or part.get("add_prefix_space"):
                return None
            if part.get("use_regex", True):
                steps.append(_Split(_GPT2_PATTERN))
            return steps or [_whole]
        if kind == "Split":
            pattern = part.get("pattern") or {}
            if part.get("behavior") != "Isolated" or part.get("invert"):
                return None
            if "Regex" in pattern:
                steps.append(_Split(pattern["Regex"]))
            elif "String" in pattern:
                steps.append(_Split(regex.escape(pattern["String"])))
            else:
                return None
        elif kind == "Digits":
            steps.append(_Split(r"\p{N}" if part.get("individual_digits") else r"\p{N}+"))
        else:
            return None
    return None  # no ByteLevel step: not byte-level BPE


def _supported_normalizer(spec: dict | None) -> bool:
    if spec is None:
        return True
    if spec.get("type") == "Sequence":
        return all(_supported_normalizer(part) for part in spec.get("normalizers") or [])
    return spec.get("type") in _IDENTITY_ON_ASCII


def _supported_model(spec: dict | None) -> bool:
    if not isinstance(spec, dict) or spec.get("type") != "BPE":
        return False
    return (
        not spec.get("dropout")
        and not spec.get("continuing_subword_prefix")
        and not spec.get("end_of_word_suffix")
    )


class PreTokenEncoder:
    """Ids of ASCII text through the tokenizer's own pre-tokenizer steps and BPE model, with a
    cache per pre-token; :meth:`encode` answers None for text it does not take."""

    def __init__(self, steps: list[Any], model: Any) -> None:
        self._steps = steps
        self._model = model
        self._table = str.maketrans(_ASCII_TO_BYTE_CHARS)
        self._ids: dict[str, list[int]] = {}

    def encode(self, text: str) -> list[int] | None:
        if not text.isascii():
            return None
        first, *rest = self._steps
        pieces = first(text)
        for step in rest:
            pieces = [part for piece in pieces for part in step(piece)]
        found = list(map(self._ids.get, pieces))
        if None in found:
            for index, known in enumerate(found):
                if known is None:
                    found[index] = self._learn(pieces[index])
        return list(chain.from_iterable(found))

    def _learn(self, piece: str) -> list[int]:
        """The BPE model's ids of a new pre-token, cached."""
        if len(self._ids) >= _CACHE_LIMIT:
            self._ids.clear()
        mapped = piece.translate(self._table)
        ids = self._ids[piece] = [token.id for token in self._model.tokenize(mapped)]
        return ids


def build(backend: Any, spec: dict) -> PreTokenEncoder | None:
    """The encoder for the Rust tokenizer ``backend`` (its JSON ``spec``), or None where its
    pipeline is not one this module reproduces, or any probe gives other ids."""
    if regex is None or not _supported_normalizer(spec.get("normalizer")):
        return None
    if not _supported_model(spec.get("model")):
        return None
    try:
        steps = _steps(spec.get("pre_tokenizer"))
        if steps is None:
            return None
        encoder = PreTokenEncoder(steps, backend.model)
        for probe in probes():
            if encoder.encode(probe) != backend.encode(probe, add_special_tokens=False).ids:
                return None
    except Exception:  # an unusual pattern or model: the Rust tokenizer alone
        return None
    encoder._ids.clear()  # the probes' pre-tokens are not worth the room
    return encoder


def probes() -> list[str]:
    """ASCII texts (no added token in them) on which a pipeline must agree with the Rust
    tokenizer: every character alone, doubled and between letters, digits and spaces;
    contractions in any case; runs of spaces, newlines and digits; JSON, code and prose."""
    texts = []
    for code in range(128):
        c = chr(code)
        texts.append(f"{c}|a{c}b| {c}{c} |9{c}9|{c}\n|\n{c}  {c}x|x {c}")
    texts += [
        "I'm, you'RE, it's, we'LL, they'Ve, he'D, O'Neil's 'S 't'",
        "   leading\n\n\n  lines \r\n\r\n\t\t tabs   \n   trailing   ",
        "12345 1234567890 3.14159 -42 1e-9 0x1F 007 a1b22c333",
        '{"type": "function", "function": {"name": "weather.get_forecast_12_3", '
        '"parameters": {"type": "dict", "properties": {"city": {"type": "string", '
        '"enum": ["low", "high"]}}, "required": ["city"]}}}',
        "def f(x):\n    return {'a': [1, 2], \"b\": x ** 2}  # done\n\n\nclass A:\n\tpass\n",
        string.printable * 2,
    ]
    return texts
