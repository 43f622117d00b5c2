"""Peak memory of token logprobs + backward at a 150k vocabulary: chunked against naive.

The naive way materialises fp32 logits for every position of the batch, then log-softmax
(what a plain ``model(...).logits`` training step does). agentfly's way
(:func:`agentfly_cli.train.logprobs.sequence_logprobs`) runs the output head only on trained
positions, a chunk at a time under activation checkpointing.

Method: each variant runs in a fresh subprocess. The model and batch are built, one warm-up
pass runs, then the peak resident memory (``ru_maxrss``) is read; the measured pass (forward +
backward of the summed trained-token logprobs) follows and the peak is read again. The
difference is the extra memory the pass needed at its peak. On CUDA the same is done with
``torch.cuda.max_memory_allocated``.

Run: python benchmarks/logprob_memory_bench.py [--out FILE.json]
"""

from __future__ import annotations

import argparse
import json
import platform
import resource
import subprocess
import sys

VOCAB = 151_936  # Qwen2/Qwen3
CONFIG = {"vocab": VOCAB, "hidden": 256, "layers": 2, "batch": 8, "seq": 512, "prompt": 256}


def build(device: str):
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(0)
    config = Qwen2Config(
        vocab_size=CONFIG["vocab"],
        hidden_size=CONFIG["hidden"],
        intermediate_size=CONFIG["hidden"] * 2,
        num_hidden_layers=CONFIG["layers"],
        num_attention_heads=4,
        num_key_value_heads=4,
        head_dim=64,
        tie_word_embeddings=True,
    )
    model = Qwen2ForCausalLM(config).to(device)
    batch, seq, prompt = CONFIG["batch"], CONFIG["seq"], CONFIG["prompt"]
    ids = torch.randint(0, CONFIG["vocab"], (batch, seq), device=device)
    mask = torch.zeros(batch, seq, dtype=torch.bool, device=device)
    mask[:, prompt:] = True  # the prompt is untrained, the rest was sampled
    return model, ids, mask


def naive(model, ids, mask):
    from agentfly_cli.train.logprobs import naive_sequence_logprobs

    logprobs = naive_sequence_logprobs(model, ids, mask.new_ones(mask.shape, dtype=int))
    return logprobs[mask[:, 1:]]


def chunked(model, ids, mask):
    import torch

    from agentfly_cli.train.logprobs import SequenceBatch, sequence_logprobs

    batch = SequenceBatch.unshared(
        ids[:, :-1], torch.ones_like(ids[:, :-1]), ids[:, 1:], mask[:, 1:]
    )
    return sequence_logprobs(model, batch).logprobs


def peak_bytes(device: str) -> int:
    import torch

    if device == "cuda":
        return torch.cuda.max_memory_allocated()
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # KiB on Linux


def run_variant(name: str, device: str) -> dict:
    """One variant in this process: the peak extra memory of one forward + backward."""
    import torch

    model, ids, mask = build(device)
    function = {"naive": naive, "chunked": chunked}[name]
    # warm-up on a small slice: allocator pools and lazy init, without the full peak
    function(model, ids[:1, -64:], mask[:1, -64:]).sum().backward()
    model.zero_grad(set_to_none=False)
    if device == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
    before = peak_bytes(device)
    logprobs = function(model, ids, mask)
    logprobs.sum().backward()
    if device == "cuda":
        torch.cuda.synchronize()
    after = peak_bytes(device)
    return {
        "variant": name,
        "peak_extra_mib": round((after - before) / 2**20, 1),
        "logprobs": logprobs.detach().float().cpu().tolist()[:64],
        "trained_positions": int(mask[:, 1:].sum()),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", help="also write the JSON here")
    parser.add_argument("--variant", help=argparse.SUPPRESS)  # internal: one subprocess
    args = parser.parse_args()
    import torch

    device = "cuda" if torch.cuda.is_available() else "cpu"
    if args.variant:
        print(json.dumps(run_variant(args.variant, device)))
        return 0
    results = {}
    for name in ("naive", "chunked"):
        done = subprocess.run(
            [sys.executable, __file__, "--variant", name],
            capture_output=True,
            text=True,
            check=True,
        )
        results[name] = json.loads(done.stdout.strip().splitlines()[-1])
    diff = max(
        abs(a - b)
        for a, b in zip(results["naive"]["logprobs"], results["chunked"]["logprobs"], strict=True)
    )
    naive_mib = results["naive"]["peak_extra_mib"]
    chunked_mib = results["chunked"]["peak_extra_mib"]
    b, t, v = CONFIG["batch"], CONFIG["seq"], CONFIG["vocab"]
    report = {
        "benchmark": "logprob_memory",
        "device": device,
        "machine": {"platform": platform.platform(), "torch": torch.__version__},
        "config": CONFIG,
        "method": "peak extra resident memory (ru_maxrss; cuda: max_memory_allocated) of one "
        "forward + backward of the summed trained-token logprobs, each variant in a fresh process",
        "naive_peak_extra_mib": naive_mib,
        "chunked_peak_extra_mib": chunked_mib,
        "ratio": round(chunked_mib / naive_mib, 4) if naive_mib else None,
        "target_ratio": 0.25,
        "fp32_logits_of_the_batch_mib": round(b * t * v * 4 / 2**20, 1),
        "max_abs_logprob_diff": diff,
    }
    text = json.dumps(report, indent=2)
    print(text)
    if args.out:
        with open(args.out, "w") as out:
            out.write(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
