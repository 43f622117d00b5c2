"""The per-pre-token encoder (chat/pretokens.py) gives exactly the Rust tokenizer's ids on ASCII
text, takes nothing else, and is dropped on its first difference."""

from __future__ import annotations

import json
import logging
import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentfly_cli.chat import pretokens
from agentfly_cli.chat.encoding import TextEncoder
from tests.helpers.realdata_paths import REALDATA

BYTE_LEVEL = ["qwen2.5", "qwen3", "smollm2", "gpt_oss"]  # four different pre-tokenizers
ascii_texts = st.text(alphabet=st.characters(max_codepoint=127), max_size=80)
pieces = st.sampled_from(['{"', '": "', "'s", "'LL", "  ", "\n\n", "\r\n", "\t", "123", "x_y.z"])
structured = st.lists(st.one_of(pieces, ascii_texts), max_size=10).map("".join)


def _load(name):
    from transformers import AutoTokenizer

    if not (REALDATA / name / "tokenizer.json").is_file():
        pytest.skip(f"{REALDATA / name} is absent (the real tokenizers come from ../shared)")
    return AutoTokenizer.from_pretrained(str(REALDATA / name))


@pytest.fixture(scope="module")
def encoders(tiny_model):
    from transformers import AutoTokenizer

    found = [AutoTokenizer.from_pretrained(str(tiny_model))]
    found += [_load(n) for n in BYTE_LEVEL if (REALDATA / n / "tokenizer.json").is_file()]
    return [(tok.backend_tokenizer, TextEncoder(tok)) for tok in found]


def test_byte_level_tokenizers_get_the_pre_token_encoder(encoders):
    assert len(encoders) >= 2, "the tiny model and at least one real tokenizer"
    for backend, encoder in encoders:
        assert encoder.pretokens is not None, backend.pre_tokenizer


@settings(
    max_examples=400, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(text=structured)
def test_ascii_text_gets_the_rust_tokenizers_ids(encoders, text):
    for backend, encoder in encoders:
        for piece in encoder.splitter.split(text):  # the text between added tokens
            if piece and piece not in encoder._ids:
                expected = backend.encode(piece, add_special_tokens=False).ids
                assert encoder.pretokens.encode(piece) == expected
        assert encoder.encode(text) == backend.encode(text, add_special_tokens=False).ids
        assert encoder.pretokens is not None  # no difference seen by its own checks either


def test_tool_lists_and_code_get_the_same_ids_and_share_pre_tokens(encoders):
    rng = random.Random(0)
    texts = []
    for row in range(200):
        tool = {"type": "function", "function": {
            "name": f"weather.get_{rng.choice(['forecast', 'rate'])}_{row}",
            "description": f"Case {row}: it's the {rng.random():.4f} one.\n\tReturns JSON.",
            "parameters": {"type": "dict", "properties": {"city": {"type": "string"}},
                           "required": ["city"]}}}  # fmt: skip
        texts.append(json.dumps(tool) + "\n" + f"def f_{row}(x):\n    return x ** {row}  # ok\n")
    for backend, encoder in encoders:
        before, tokens = len(encoder.pretokens._ids), 0
        for text in texts:
            ids = encoder.pretokens.encode(text)
            assert ids == backend.encode(text).ids
            tokens += len(ids)
        # 200 rows of about 100 tokens: a few hundred new pre-tokens, the rest lookups
        assert tokens > 15_000 and len(encoder.pretokens._ids) - before < 700


def test_non_ascii_text_is_left_to_the_tokenizer(encoders):
    for backend, encoder in encoders:
        assert encoder.pretokens.encode("café 日本 🙂") is None
        text = "Tool ünï: 日本語 🙂 {'a': 1}"
        assert encoder.encode(text) == backend.encode(text, add_special_tokens=False).ids


def test_a_difference_drops_the_encoder_for_good(tiny_model, caplog):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(tiny_model))
    encoder = TextEncoder(tokenizer)
    assert encoder.pretokens is not None

    class Wrong:  # a model that merges nothing: other ids than the tokenizer's
        def tokenize(self, text):
            return [type("T", (), {"id": 0})() for _ in text]

    encoder.pretokens._model = Wrong()
    text = "a new piece of plain text"
    with caplog.at_level(logging.WARNING, logger="agentfly_cli.chat.encoding"):
        ids = encoder.encode(text)
    assert ids == list(tokenizer.encode(text, add_special_tokens=False))
    assert encoder.pretokens is None
    assert "other ids than the tokenizer" in caplog.text
    assert encoder.encode("more text") == list(
        tokenizer.encode("more text", add_special_tokens=False)
    )


def test_unicode_classes_become_their_ascii_members():
    pattern = pretokens.ascii_pattern(r"[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|\s+(?!\S)")
    assert pattern is not None
    assert pattern.pattern == r"[^\r\na-zA-Z0-9]?[a-zA-Z]+|[0-9]{1,3}|\s+(?!\S)"
    assert pattern.findall("'Hello 12345") == ["'Hello", "123", "45"]
    # Unicode's White_Space (the tokenizer's \s) has no \x1c-\x1f; Python's str.isspace does
    assert pretokens.ascii_pattern(r"\s+").findall("a\x1c\x1f b\t\n") == [" ", "\t\n"]
    cased = pretokens.ascii_pattern(r"[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}]+")
    assert cased.pattern == "[A-Z]*[a-z]+"


@pytest.mark.parametrize(
    "pattern", [r"\p{P}+", r"\P{L}", r"[\p{Lo}]", r"\p{Lo}", r"[\p{S}a]", r"(unclosed"]
)
def test_classes_without_an_ascii_form_keep_the_regex_module(pattern):
    assert pretokens.ascii_pattern(pattern) is None


@pytest.mark.parametrize(
    "change",
    [
        {"normalizer": {"type": "Lowercase"}},
        {"pre_tokenizer": {"type": "Metaspace", "replacement": "▁", "prepend_scheme": "always"}},
        {"pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": True, "use_regex": True}},
        {"pre_tokenizer": {"type": "Whitespace"}},
        {"model": {"type": "WordPiece"}},
        {"model": {"type": "BPE", "dropout": 0.1}},
    ],
)
def test_pipelines_it_does_not_reproduce_are_refused(tiny_model, change):
    from transformers import AutoTokenizer

    backend = AutoTokenizer.from_pretrained(str(tiny_model)).backend_tokenizer
    spec = json.loads(backend.to_str())
    assert pretokens.build(backend, spec) is not None
    assert pretokens.build(backend, {**spec, **change}) is None


def test_a_pattern_python_reads_otherwise_fails_the_probes(tiny_model):
    from transformers import AutoTokenizer

    backend = AutoTokenizer.from_pretrained(str(tiny_model)).backend_tokenizer
    spec = json.loads(backend.to_str())
    # the same pipeline with another split: the probes see other ids than the tokenizer's
    other = {"type": "Sequence", "pretokenizers": [
        {"type": "Split", "pattern": {"Regex": r"\s"}, "behavior": "Isolated", "invert": False},
        {"type": "ByteLevel", "add_prefix_space": False, "use_regex": False}]}  # fmt: skip
    assert pretokens.build(backend, {**spec, "pre_tokenizer": other}) is None
