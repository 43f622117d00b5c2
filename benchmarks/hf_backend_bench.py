"""The hf backend's continuous batching against plain transformers ``generate``. Prints JSON.

  python benchmarks/hf_backend_bench.py [--model tiny|smollm2|qwen-0.5b-random|PATH]
      [--device cpu|cuda] [--dtype float32|bfloat16] [--requests 64 [128 ...]] [--max-tokens 64]

Three ways to produce ``requests`` responses of exactly ``max-tokens`` tokens (no stop ids):
the hf backend with all requests concurrent, ``model.generate`` one request at a time (what a
naive loop does), and ``model.generate`` on one padded batch. ``qwen-0.5b-random`` builds a
Qwen2-0.5B-shaped model with random weights (no download), for GPU timings.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")


def _model_folder(name: str, scratch: Path) -> str:
    if name == "qwen-0.5b-random":
        import torch
        from transformers import Qwen2Config, Qwen2ForCausalLM

        from agentfly_cli.models.tiny import build_tokenizer

        folder = scratch / "qwen-0.5b-random"
        tokenizer = build_tokenizer(folder)
        config = Qwen2Config(
            vocab_size=len(tokenizer),
            hidden_size=896,
            intermediate_size=4864,
            num_hidden_layers=24,
            num_attention_heads=14,
            num_key_value_heads=2,
            max_position_embeddings=4096,
            tie_word_embeddings=True,
            eos_token_id=tokenizer.convert_tokens_to_ids("<|im_end|>"),
            pad_token_id=tokenizer.pad_token_id,
        )
        torch.manual_seed(0)
        Qwen2ForCausalLM(config).save_pretrained(str(folder))
        return str(folder)
    from agentfly_cli.models import resolve_model

    return str(resolve_model(name))


def _prompts(tokenizer, count: int) -> list[list[int]]:
    prompts = []
    for i in range(count):
        messages = [{"role": "user", "content": f"Question {i}: what is {i} + {2 * i + 7}?"}]
        text = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
        prompts.append(tokenizer(text, add_special_tokens=False)["input_ids"])
    return prompts


def run(model: str, device: str, dtype: str, requests: int, max_tokens: int) -> dict:
    """One model, one request count (see :func:`run_many`)."""
    return run_many(model, device, dtype, [requests], max_tokens)[0]


def run_many(model: str, device: str, dtype: str, counts: list[int], max_tokens: int) -> list:
    """One result per request count; the model folder is built once."""
    from transformers import AutoTokenizer

    with tempfile.TemporaryDirectory() as scratch:
        folder = _model_folder(model, Path(scratch))
        tokenizer = AutoTokenizer.from_pretrained(folder)
        return [
            _measure(model, folder, tokenizer, device, dtype, requests, max_tokens)
            for requests in counts
        ]


def _measure(model, folder, tokenizer, device, dtype, requests, max_tokens) -> dict:
    import torch

    from agentfly_cli.backends.base import SamplingParams
    from agentfly_cli.backends.hf import HFBackend
    from agentfly_cli.settings.rollout import BackendSettings

    prompts = _prompts(tokenizer, requests)
    config = BackendSettings(name="hf", model=folder, device=device, dtype=dtype)
    backend = HFBackend(config, tokenizer)
    backend.eos_ids = frozenset()  # every response runs to max_tokens
    params = SamplingParams(max_tokens=max_tokens, temperature=1.0, seed=1)

    async def concurrent() -> float:
        started = time.perf_counter()
        results = await asyncio.gather(*(backend.generate(p, params) for p in prompts))
        assert all(len(r.token_ids) == max_tokens for r in results)
        return time.perf_counter() - started

    async def both() -> float:
        await backend.generate(prompts[0], SamplingParams(max_tokens=4))  # warm-up
        wall = await concurrent()
        await backend.close()
        return wall

    hf_model = backend.model
    backend_device, backend_dtype, pad_id = backend.device, backend.dtype, backend.pad_id
    backend_s = asyncio.run(both())
    options = dict(
        max_new_tokens=max_tokens,
        min_new_tokens=max_tokens,
        do_sample=True,
        pad_token_id=pad_id,
    )
    sync = torch.cuda.synchronize if str(backend_device).startswith("cuda") else (lambda: None)
    one = min(requests, 8)  # sequential generate is slow: time a few, scale up
    started = time.perf_counter()
    with torch.inference_mode():
        for p in prompts[:one]:
            hf_model.generate(torch.tensor([p], device=backend_device), **options)
    sync()
    sequential_s = (time.perf_counter() - started) * requests / one
    tokenizer.padding_side = "left"
    if tokenizer.pad_token_id is None:  # SmolLM2's converted tokenizer names no pad token
        tokenizer.pad_token_id = pad_id
    batch = tokenizer.pad({"input_ids": prompts}, return_tensors="pt").to(backend_device)
    started = time.perf_counter()
    with torch.inference_mode():
        hf_model.generate(**batch, **options)
    sync()
    batched_s = time.perf_counter() - started
    tokens = requests * max_tokens
    return {
        "benchmark": "hf_backend_bench",
        "model": model,
        "device": backend_device,
        "dtype": str(backend_dtype),
        "requests": requests,
        "max_tokens": max_tokens,
        "hf_backend_concurrent": {
            "wall_s": round(backend_s, 3),
            "tokens_per_s": round(tokens / backend_s, 1),
        },
        "generate_sequential": {
            "wall_s": round(sequential_s, 3),
            "tokens_per_s": round(tokens / sequential_s, 1),
            "timed_requests": one,
        },
        "generate_one_padded_batch": {
            "wall_s": round(batched_s, 3),
            "tokens_per_s": round(tokens / batched_s, 1),
        },
        "backend_stats": dict(backend.stats),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="tiny")
    parser.add_argument("--device", default="auto")
    parser.add_argument("--dtype", default="auto")
    parser.add_argument(
        "--requests", type=int, nargs="+", default=[64], help="one or more request counts"
    )
    parser.add_argument("--max-tokens", type=int, default=64)
    args = parser.parse_args()
    print(
        json.dumps(
            run_many(args.model, args.device, args.dtype, args.requests, args.max_tokens)
            if len(args.requests) > 1
            else run(args.model, args.device, args.dtype, args.requests[0], args.max_tokens),
            indent=2,
            default=str,
        )
    )


if __name__ == "__main__":
    main()
