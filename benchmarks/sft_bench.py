"""Seconds per ``agentfly sft`` optimizer step, with and without sharing the prompt prefix.

The chains are code_math's packaged solutions, played by the scripted backend in the model's
own tokens (one chain per task: a system prompt and three worked examples of about 250 tokens
that every chain shares, then the problem, a ``PYTHON:`` line, its output and ``ANSWER:``).
Both variants train the same batches of 8 chains from the same initial weights (a fresh model
per variant), one process, fp32, and must give the same losses. Each runs 1 warm-up step, then
the median of the timed steps.

- shared: what ``agentfly sft`` does. The prefix that all chains of a micro-batch share is
  forwarded once, with gradients flowing through it.
- unshared: ``share_prefix: false``, every chain forwarded whole.

Run: .venv/bin/python benchmarks/sft_bench.py [--model smollm2] [--steps 3] [--out FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "agentfly_cli" / "recipes" / "data" / "code_math.jsonl"
BATCH = 8


def make_chains(model: str, tasks: int, folder: Path) -> Path:
    """The packaged solutions of the first ``tasks`` problems as trajectories."""
    rows = [json.loads(line) for line in DATA.read_text().splitlines()[:tasks]]
    script = folder / "script.jsonl"
    script.write_text(
        "".join(
            json.dumps({"responses": [f"PYTHON: {r['solution']}", f"ANSWER: {r['answer']}"]}) + "\n"
            for r in rows
        )
    )
    out = folder / "chains.jsonl"
    command = [
        sys.executable, "-m", "agentfly_cli", "rollout", "code_math", "--model", model,
        "--backend", "scripted", "--script", str(script), "--n", "1", "--limit", str(tasks),
        "--out", str(out), "--quiet",
    ]  # fmt: skip
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL)
    return out


def run_variant(model_dir: Path, rows, batches, *, share_prefix: bool) -> dict:
    import torch

    from agentfly_cli.train.sft.fine_tune import SFTRunner, build_settings

    torch.manual_seed(0)
    settings = build_settings([f"backend.total_steps={len(batches)}"], share_prefix=share_prefix)
    runner = SFTRunner(model_dir, settings)
    seconds, losses = [], []
    for batch in batches:
        began = time.perf_counter()
        metrics = runner.step(rows, batch)
        seconds.append(time.perf_counter() - began)
        losses.append(metrics["sft/loss"])
    timed = seconds[1:]  # the first step warms up
    forwarded = [sum(len(rows[i].ids) for i in batch) for batch in batches[1:]]
    trained = [sum(rows[i].num_trained for i in batch) for batch in batches[1:]]
    median = statistics.median(timed)
    return {
        "seconds_per_step_median": round(median, 3),
        "seconds_per_step": [round(s, 3) for s in timed],
        "tokens_per_s": round(statistics.median(forwarded) / median, 1),
        "trained_tokens_per_s": round(statistics.median(trained) / median, 1),
        "losses": [round(x, 6) for x in losses],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2")
    parser.add_argument("--steps", type=int, default=3, help="timed steps (plus one warm-up)")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()

    import torch

    from agentfly_cli.models.resolve import resolve_model
    from agentfly_cli.train.sft.fine_tune import load_chains, train_rows

    model_dir = resolve_model(args.model)
    with tempfile.TemporaryDirectory() as folder:
        chains = load_chains([make_chains(str(model_dir), BATCH * (args.steps + 1), Path(folder))])
    rows = train_rows(chains)
    batches = [list(range(i, i + BATCH)) for i in range(0, len(rows), BATCH)]
    shared = run_variant(model_dir, rows, batches, share_prefix=True)
    unshared = run_variant(model_dir, rows, batches, share_prefix=False)
    result = {
        "benchmark": "sft_bench",
        "model": args.model,
        "chains_per_step": BATCH,
        "tokens_per_chain_mean": round(sum(len(r.ids) for r in rows) / len(rows), 1),
        "trained_tokens_per_chain_mean": round(sum(r.num_trained for r in rows) / len(rows), 1),
        "shared": shared,
        "unshared": unshared,
        "speedup": round(
            unshared["seconds_per_step_median"] / shared["seconds_per_step_median"], 2
        ),
        "max_loss_difference": max(
            abs(a - b) for a, b in zip(shared["losses"], unshared["losses"], strict=True)
        ),
        "machine": {
            "platform": platform.platform(),
            "cpu_count": os.cpu_count(),
            "torch_threads": torch.get_num_threads(),
            "torch": torch.__version__,
        },
    }
    text = json.dumps(result, indent=2)
    print(text)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text + "\n")


if __name__ == "__main__":
    main()
