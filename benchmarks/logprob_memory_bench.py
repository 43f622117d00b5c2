"""Peak memory of token logprobs + backward at a 150k vocabulary: chunked against naive.

The naive way materialises fp32 logits for every position of the batch, then log-softmax
(what a plain ``model(...).logits`` training step does). agentfly's way
(:func:`agentfly_cli.train.tensors.logprobs.sequence_logprobs`) runs the output head only on trained
positions, a chunk at a time under activation checkpointing.

Method (CPU): each variant runs in a fresh subprocess. The model and batch are built and one
small warm-up pass runs (gradient buffers allocated, lazy init done); freed heap goes back to
the OS (``malloc_trim``) and the kernel's peak-RSS counter is reset (``/proc/self/clear_refs``
"5"), then the measured pass (forward + backward of the summed trained-token logprobs) runs.
The figure is the peak RSS during the pass (``VmHWM``) minus the RSS just before it. Where the
peak cannot be reset, the ``ru_maxrss`` delta is used instead (a lower bound). On CUDA:
``torch.cuda.max_memory_allocated`` after ``reset_peak_memory_stats``, minus the memory
allocated before the pass.

Run: python benchmarks/logprob_memory_bench.py [--dtype float32|bfloat16] [--out FILE.json]
"""

from __future__ import annotations

import argparse
import ctypes
import json
import platform
import re
import resource
import subprocess
import sys
import time

VOCAB = 151_936  # Qwen2/Qwen3
CONFIG = {"vocab": VOCAB, "hidden": 256, "layers": 2, "batch": 8, "seq": 512, "prompt": 256}


def build(device: str, dtype: str = "float32"):
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
    model = Qwen2ForCausalLM(config).to(device=device, dtype=getattr(torch, dtype))
    batch, seq, prompt = CONFIG["batch"], CONFIG["seq"], CONFIG["prompt"]
    ids = torch.randint(0, CONFIG["vocab"], (batch, seq), device=device)
    mask = torch.zeros(batch, seq, dtype=torch.bool, device=device)
    mask[:, prompt:] = True  # the prompt is untrained, the rest was sampled
    return model, ids, mask


def naive(model, ids, mask):
    from agentfly_cli.train.tensors.logprobs import naive_sequence_logprobs

    logprobs = naive_sequence_logprobs(model, ids, mask.new_ones(mask.shape, dtype=int))
    return logprobs[mask[:, 1:]]


def chunked(model, ids, mask):
    import torch

    from agentfly_cli.train.tensors.logprobs import SequenceBatch, sequence_logprobs

    batch = SequenceBatch.unshared(
        ids[:, :-1], torch.ones_like(ids[:, :-1]), ids[:, 1:], mask[:, 1:]
    )
    return sequence_logprobs(model, batch).logprobs


def _status_kib(field: str) -> int:
    with open("/proc/self/status") as status:
        return int(re.search(rf"^{field}:\s+(\d+) kB", status.read(), re.M).group(1))


class PeakMeter:
    """Peak extra memory of a code region: CUDA allocator stats, else the process's RSS."""

    def __init__(self, device: str) -> None:
        self.device = device
        self.how = "cuda max_memory_allocated"

    def start(self) -> None:
        import torch

        if self.device == "cuda":
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
            self.base = torch.cuda.memory_allocated()
            return
        try:
            ctypes.CDLL("libc.so.6").malloc_trim(0)  # freed heap back to the OS
        except OSError:
            pass
        self.base = _status_kib("VmRSS") * 1024
        try:
            with open("/proc/self/clear_refs", "w") as refs:
                refs.write("5")  # resets VmHWM (and ru_maxrss) to the current RSS
            self.how = "VmHWM after clear_refs 5, minus VmRSS before"
        except OSError:
            self.base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
            self.how = "ru_maxrss delta (peak not resettable: a lower bound)"

    def stop(self) -> int:
        import torch

        if self.device == "cuda":
            torch.cuda.synchronize()
            return torch.cuda.max_memory_allocated() - self.base
        if self.how.startswith("VmHWM"):
            return _status_kib("VmHWM") * 1024 - self.base
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 - self.base


def run_variant(name: str, device: str, dtype: str = "float32") -> dict:
    """One variant in this process: the peak extra memory of one forward + backward."""
    model, ids, mask = build(device, dtype)
    function = {"naive": naive, "chunked": chunked}[name]
    # warm-up on a small slice: gradient buffers and lazy init, without the full peak
    function(model, ids[:1, -64:], mask[:1, -64:]).sum().backward()
    model.zero_grad(set_to_none=False)
    meter = PeakMeter(device)
    meter.start()
    started = time.perf_counter()
    logprobs = function(model, ids, mask)
    logprobs.sum().backward()
    peak = meter.stop()
    return {
        "variant": name,
        "peak_extra_mib": round(peak / 2**20, 1),
        "seconds": round(time.perf_counter() - started, 2),
        "how": meter.how,
        "logprobs": logprobs.detach().float().cpu().tolist(),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", help="also write the JSON here")
    parser.add_argument("--variant", help=argparse.SUPPRESS)  # internal: one subprocess
    parser.add_argument(
        "--dtype", default="float32", choices=["float32", "bfloat16"], help="model dtype"
    )
    args = parser.parse_args()
    import torch

    from agentfly_cli.train.tensors.logprobs import AUTO_CHUNK_LOGITS

    device = "cuda" if torch.cuda.is_available() else "cpu"
    if args.variant:
        print(json.dumps(run_variant(args.variant, device, args.dtype)))
        return 0
    results = {}
    for name in ("naive", "chunked"):
        done = subprocess.run(
            [sys.executable, __file__, "--variant", name, "--dtype", args.dtype],
            capture_output=True,
            text=True,
            check=True,
        )
        results[name] = json.loads(done.stdout.strip().splitlines()[-1])
    naive_lp, chunked_lp = results["naive"].pop("logprobs"), results["chunked"].pop("logprobs")
    diff = max(abs(a - b) for a, b in zip(naive_lp, chunked_lp, strict=True))
    naive_mib = results["naive"]["peak_extra_mib"]
    chunked_mib = results["chunked"]["peak_extra_mib"]
    b, t, v = CONFIG["batch"], CONFIG["seq"], CONFIG["vocab"]
    chunk = max(16, AUTO_CHUNK_LOGITS // v)
    mib = 2**20
    report = {
        "benchmark": "logprob_memory",
        "device": device,
        "machine": {
            "platform": platform.platform(),
            "torch": torch.__version__,
            "threads": torch.get_num_threads(),
        },
        "config": {**CONFIG, "dtype": args.dtype, "tie_embeddings": True},
        "method": "peak extra memory of one forward + backward of the summed trained-token "
        "logprobs, each variant in a fresh process after a small warm-up pass; "
        + results["naive"]["how"],
        "naive_peak_extra_mib": naive_mib,
        "chunked_peak_extra_mib": chunked_mib,
        "ratio": round(chunked_mib / naive_mib, 4) if naive_mib else None,
        "target_ratio": 0.25,
        "seconds": {"naive": results["naive"]["seconds"], "chunked": results["chunked"]["seconds"]},
        "logits_theory_mib": {
            "naive_fp32_logits_all_positions": round(b * t * v * 4 / mib, 1),
            "naive_logits_plus_log_softmax_saved": round(2 * b * t * v * 4 / mib, 1),
            "chunked_trained_positions": len(chunked_lp),
            "chunked_positions_per_chunk": chunk,
            "chunked_fp32_logits_one_chunk": round(chunk * v * 4 / mib, 1),
        },
        "trained_positions": len(chunked_lp),
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
