"""Weight sync: the tripwire's probe gaps (benign and corrupted) and delta sync's bytes.

Part 1, ``gaps``: the trainer (fp32, torch backend) and an hf rollout backend (fp32 or bf16)
score the tripwire's probe; then one weight of the backend is corrupted, or the backend is left
with the weights from before one optimizer step (a push that failed). Part 2, ``delta``: a
LoRA-merged and a partly frozen model push into an hf backend after each of a few optimizer
steps, delta sync on and off: bytes and seconds per push.

    .venv/bin/python benchmarks/weight_sync_bench.py --model smollm2 --out results/sync.json
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time

import torch

from agentfly_cli.backends.hf import HFBackend
from agentfly_cli.chat.templates import ChatTemplate
from agentfly_cli.models.resolve import resolve_model
from agentfly_cli.settings.rollout import BackendSettings
from agentfly_cli.settings.train import SyncCheckSettings
from agentfly_cli.train.sync_check import SyncTripwire
from agentfly_cli.train_backends import build_train_backend
from agentfly_cli.train_backends.base import LoraSettings, TrainBackendSettings
from agentfly_cli.train_backends.weight_sync import FullPush

CPU = {"device": "cpu", "dtype": "float32"}


def train_step(train, seed: int, tokens: int = 32) -> None:
    vocab = train.unwrapped().config.vocab_size
    ids = torch.randint(0, vocab, (2, tokens), generator=torch.Generator().manual_seed(seed))
    train.backward(train.model(input_ids=ids, labels=ids, use_cache=False).loss)
    train.step()


def corruptions(model):
    """What can go wrong with the rollout backend's weights, one at a time."""
    layers = model.model.layers

    def noise(weight):
        scale = weight.float().std()
        weight.add_((torch.randn_like(weight.float()) * scale).to(weight.dtype))

    return {
        "zero layers.0.mlp.down_proj": lambda: layers[0].mlp.down_proj.weight.zero_(),
        "zero last layer's self_attn.o_proj": lambda: layers[-1].self_attn.o_proj.weight.zero_(),
        "noise of 1 std on layers.0.mlp.up_proj": lambda: noise(layers[0].mlp.up_proj.weight),
    }


async def gaps(path: str, chat) -> list[dict]:
    rows = []
    train = build_train_backend(path, TrainBackendSettings(**CPU, lr=1e-5))
    for dtype in ("float32", "bfloat16"):
        backend = HFBackend(BackendSettings(name="hf", model=path, dtype=dtype), chat.tokenizer)
        check = SyncTripwire(SyncCheckSettings(), train, backend, chat, shared=False)
        await check.start()
        rows.append({"backend": dtype, "case": "benign (same weights)", "gap": check.baseline})
        state = {k: v.clone() for k, v in backend.model.state_dict().items()}
        for case, corrupt in corruptions(backend.model).items():
            with torch.no_grad():
                corrupt()
            gap = (await check._gap())[0]
            rows.append({"backend": dtype, "case": case, "gap": gap, "limit": check.limit})
            backend.model.load_state_dict(state)
        await backend.close()
    # a push that failed: the trainer stepped once (lr 1e-5), the backend kept the old weights
    backend = HFBackend(BackendSettings(name="hf", model=path, dtype="float32"), chat.tokenizer)
    check = SyncTripwire(SyncCheckSettings(), train, backend, chat, shared=False)
    await check.start()
    train_step(train, 0)
    gap = (await check._gap())[0]
    rows.append({"backend": "float32", "case": "stale: one step (lr 1e-5) not pushed", "gap": gap})
    await backend.close()
    return rows


async def delta(path: str, steps: int) -> list[dict]:
    layers = None
    rows = []
    for kind in ("lora-merge", "frozen"):
        for on in (False, True):
            settings = TrainBackendSettings(**CPU, lr=1e-4, delta_sync=on)
            if kind == "lora-merge":
                settings.lora = LoraSettings(r=16, alpha=32)
            else:
                layers = layers or _layer_count(path)
                settings.freeze = ["model.embed_tokens.*"] + [
                    f"model.layers.{i}.*" for i in range(layers // 2)
                ]
            train = build_train_backend(path, settings)
            backend = HFBackend(BackendSettings(name="hf", model=path, dtype="float32"))
            sync = FullPush(train, backend, delta=on)
            for version in range(steps + 1):
                if version:
                    train_step(train, version)
                started = time.perf_counter()
                await sync.publish(version)
                metrics = sync.metrics()
                rows.append(
                    {
                        "model": kind,
                        "delta_sync": on,
                        "push": version,
                        **metrics,
                        "publish_s": time.perf_counter() - started,
                    }  # fmt: skip
                )
            await backend.close()
            train.close()
    return rows


def checksum_cost(path: str) -> dict:
    """Seconds to checksum every weight once (what delta sync adds to a push)."""
    from agentfly_cli.train_backends.delta_sync import checksum

    train = build_train_backend(path, TrainBackendSettings(**CPU))
    weights = list(train.sync_weights())
    times = []
    for _ in range(3):
        started = time.perf_counter()
        for _, tensor in weights:
            checksum(tensor)
        times.append(time.perf_counter() - started)
    train.close()
    total = sum(t.numel() * t.element_size() for _, t in weights)
    return {"bytes": total, "seconds_min": min(times), "gb_per_s": total / min(times) / 1e9}


def summary(rows: list[dict]) -> list[dict]:
    """Per model and mode: the first push, and the median of the later ones."""
    out = []
    for kind in sorted({r["model"] for r in rows}):
        for on in (False, True):
            mine = [r for r in rows if r["model"] == kind and r["delta_sync"] == on]
            later = mine[1:]
            out.append(
                {
                    "model": kind,
                    "delta_sync": on,
                    "first_push_bytes": mine[0]["sync/bytes_pushed"],
                    "later_push_bytes": statistics.median(r["sync/bytes_pushed"] for r in later),
                    "later_push_s_median": statistics.median(r["sync/seconds"] for r in later),
                }
            )
    return out


def _layer_count(path: str) -> int:
    from transformers import AutoConfig

    return AutoConfig.from_pretrained(path).num_hidden_layers


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="tiny")
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--out")
    args = parser.parse_args()
    path = str(resolve_model(args.model))
    chat = ChatTemplate.load(path)
    pushes = asyncio.run(delta(path, args.steps))
    result = {
        "model": args.model,
        "gaps": asyncio.run(gaps(path, chat)),
        "delta_summary": summary(pushes),
        "checksum": checksum_cost(path),
        "delta": pushes,
    }
    text = json.dumps(result, indent=1)
    if args.out:
        with open(args.out, "w") as handle:
            handle.write(text)
    print(text)


if __name__ == "__main__":
    main()
