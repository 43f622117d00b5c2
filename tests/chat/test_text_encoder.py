"""The cached piece-wise encoder gives exactly the tokenizer's own ids (property-tested)."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentfly_cli.chat.encoding import TextEncoder

FRAGMENTS = [
    "<|im_start|>",
    "<|im_end|>",
    "<tool_call>",
    "</tool_call>",
    "<think>",
    "</think>",
    "<|endoftext|>",
    "\n",
    " ",
    "  ",
    "user",
    "assistant",
    '{"a": 1}',
    "RESULT: ",
    "42",
    "é",
    "日本",
    "🙂",
    "\r\n",
    "\t",
]
texts = st.lists(st.one_of(st.sampled_from(FRAGMENTS), st.text(max_size=12)), max_size=12).map(
    "".join
)


def tokenizers(realdata_root, tiny_model):
    from transformers import AutoTokenizer

    folders = [tiny_model]
    if realdata_root is not None:
        folders += [realdata_root / "qwen3", realdata_root / "smollm2"]
    return [AutoTokenizer.from_pretrained(str(f)) for f in folders]


@pytest.fixture(scope="module")
def encoders(tiny_model):
    from tests.helpers.realdata_paths import REALDATA

    root = REALDATA if REALDATA.is_dir() else None
    return [(tok, TextEncoder(tok)) for tok in tokenizers(root, tiny_model)]


def test_byte_level_tokenizers_use_cached_pieces(encoders):
    assert all(encoder.mode == "pieces" for _, encoder in encoders)


@settings(
    max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(text=texts)
def test_encode_and_decode_match_the_tokenizer(encoders, text):
    for tokenizer, encoder in encoders:
        ids = list(tokenizer.encode(text, add_special_tokens=False))
        assert encoder.encode(text) == ids
        assert encoder.encode(text) == ids  # again, from the cache
        assert encoder.decode(ids) == tokenizer.decode(
            ids, skip_special_tokens=False, clean_up_tokenization_spaces=False
        )


def test_metaspace_tokenizers_do_not_use_pieces(tmp_path):
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    raw = Tokenizer(models.BPE(unk_token="<unk>"))
    raw.pre_tokenizer = pre_tokenizers.Metaspace(prepend_scheme="first")
    raw.train_from_iterator(
        ["hello world", "user says hi"] * 10,
        trainers.BpeTrainer(vocab_size=200, special_tokens=["<unk>", "<s>", "</s>"]),
    )
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=raw, eos_token="</s>")
    encoder = TextEncoder(tokenizer)
    assert encoder.mode == "backend"
    text = "hello</s> world user"
    assert encoder.encode(text) == list(tokenizer.encode(text, add_special_tokens=False))
