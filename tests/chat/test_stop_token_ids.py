"""Stop strings as token ids: every token whose text holds a stop, special tokens excepted. The
vocabulary is decoded once per tokenizer; each new stop list (the gateway gets one per request
shape) is a scan of those texts, not a decode of the whole vocabulary again."""

from __future__ import annotations

from agentfly_cli.chat.templates import ChatTemplate
from tests.helpers.realdata_paths import real_tokenizer


def _reference(tokenizer, stops):
    special = set(tokenizer.all_special_ids)
    return [
        i
        for i in range(len(tokenizer))
        if i not in special and any(s in tokenizer.decode([i]) for s in stops)
    ]


def test_stop_ids_on_a_real_tokenizer_are_every_token_holding_a_stop():
    chat = ChatTemplate.load(str(real_tokenizer("qwen3")))
    for stops in (["\n\n"], ["</answer>", "RESULT:"], ["é"]):
        assert chat.stop_token_ids(stops) == _reference(chat.tokenizer, stops), stops
    assert chat.stop_token_ids([]) == []


def test_a_new_stop_list_does_not_decode_the_vocabulary_again(tiny_model, monkeypatch):
    chat = ChatTemplate.load(str(tiny_model))
    first = chat.stop_token_ids(["\n"])
    decodes = []
    real_decode = type(chat.tokenizer).decode
    monkeypatch.setattr(
        type(chat.tokenizer),
        "decode",
        lambda self, *a, **k: decodes.append(1) or real_decode(self, *a, **k),
    )
    assert chat.stop_token_ids(["\n"]) == first
    assert chat.stop_token_ids(["ANSWER", "\n"]) == sorted(
        set(first) | set(chat.stop_token_ids(["ANSWER"]))
    )
    assert decodes == []
