"""The tiny test model: a 2-layer Qwen2 with random weights and a locally trained BPE tokenizer.

It is deterministic (fixed corpus and seed), about 1 MB of weights, and builds in about a
second. Head dim 64 (hidden 128, 2 heads) so that vLLM accepts it as well as transformers.
"""

from __future__ import annotations

import json
from pathlib import Path

SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
# Tool-call tags are ordinary (non-special) added tokens, as in Qwen: they survive decoding.
TAG_TOKENS = [
    "<tool_call>",
    "</tool_call>",
    "<tool_response>",
    "</tool_response>",
    "<think>",
    "</think>",
]
VOCAB_SIZE = 1024

_CORPUS = [
    "You are a helpful assistant. Use the calculator tool to compute arithmetic.",
    "What is 12 + 30? CALC: 12 + 30 RESULT: 42 ANSWER: 42",
    "The answer is 7. The result of 3 * 4 is 12. Let me compute 2**10 + 3*7 = 1045.",
    '{"name": "calculator", "arguments": {"expression": "1 + 2"}}',
    '{"name": "answer", "arguments": {"answer": "3"}}',
    "system user assistant tool function tools arguments name expression answer",
    "Question: how many apples are left? Thought: I should call a tool. Action: calculator",
    "Action Input: 5 - 2 Observation: 3 Final Answer: 3",
    "0 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20 100 1000 + - * / ( ) = . , : ; ? !",
    "# Tools You may call one or more functions. Their signatures are in <tools></tools>",
    "For each call, write a JSON object with the function name and arguments inside tags",
    "the quick brown fox jumps over the lazy dog. THE QUICK BROWN FOX. Hello, world!",
]


def _chat_template() -> str:
    path = Path(__file__).resolve().parent.parent / "chat" / "template_files" / "chatml-tools.jinja"
    return path.read_text()


def build_tokenizer(path: Path):
    """Train the byte-level BPE tokenizer and save it (with the chat template) into ``path``."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE - len(TAG_TOKENS),
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(_CORPUS * 4, trainer=trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        bos_token=None,
        unk_token=None,
    )
    fast.add_tokens(TAG_TOKENS)
    fast.chat_template = _chat_template()
    fast.save_pretrained(str(path))
    return fast


def build_tiny_model(path: str | Path, seed: int = 0) -> Path:
    """Write the tiny model and its tokenizer into ``path`` and return it."""
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    tokenizer = build_tokenizer(path)
    config = Qwen2Config(
        vocab_size=len(tokenizer),
        hidden_size=128,
        intermediate_size=256,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=2,
        head_dim=64,
        max_position_embeddings=65536,  # real harnesses send 30k+ tokens of this tokenizer
        tie_word_embeddings=True,
        bos_token_id=None,
        eos_token_id=tokenizer.convert_tokens_to_ids("<|im_end|>"),
        pad_token_id=tokenizer.pad_token_id,
        torch_dtype="float32",
    )
    torch.manual_seed(seed)
    model = Qwen2ForCausalLM(config)
    model.generation_config.eos_token_id = config.eos_token_id
    model.generation_config.pad_token_id = config.pad_token_id
    model.save_pretrained(str(path), safe_serialization=True)
    (path / "agentfly_model.json").write_text(
        json.dumps({"alias": "tiny", "seed": seed, "builder": "agentfly_cli.models.tiny"}) + "\n"
    )
    return path
