"""Seconds of one GRPO update with ``trainer.skip_zero_advantage`` on against off, same rows.

The batch is shaped like a ``chess_puzzles`` step on SmolLM2 (the recipe whose RL ran over its
time budget): 8 tasks x 8 chains, a 690-token prompt per task, one or two model turns of up to
12 sampled tokens with a 160-token observation between them. A share of the groups is flat
(every chain the same reward, so GRPO gives them advantage 0): in the chess runs
``reward/groups_with_spread`` was 0.12-0.88, mean 0.5. Each case builds two train backends
from the same weights, runs one update with skipping and one without, interleaved, and
reports the seconds of the updates after a first one (a warm-up, whose gradient norm, loss
and resulting weights both ways are reported too: they differ by float rounding only).

Run: .venv/bin/python benchmarks/skip_zero_advantage_bench.py [--model smollm2] [--out FILE]
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import random
import statistics
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")

TASKS, CHAINS, PROMPT, OBSERVATION, TURN = 8, 8, 690, 160, 12
FLAT_SHARES = (0.0, 0.5, 0.75)


def make_batch(vocab: int, flat_share: float, seed: int = 0):
    """A StepBatch of TASKS groups; the first ``flat_share`` of them get equal rewards."""
    from agentfly_cli.train.tensors.step_batch import StepBatch

    rng = random.Random(seed)
    flat = round(TASKS * flat_share)
    trajectories = []
    for task in range(TASKS):
        prompt = [rng.randrange(vocab) for _ in range(PROMPT)]
        for chain in range(CHAINS):
            ids, mask = list(prompt), [0] * PROMPT
            for turn in range(rng.choice((1, 2))):  # mates in 1 and in 2
                if turn:
                    ids += [rng.randrange(vocab) for _ in range(OBSERVATION)]
                    mask += [0] * OBSERVATION
                length = rng.randint(4, TURN)
                ids += [rng.randrange(vocab) for _ in range(length)]
                mask += [1] * length
            reward = 0.0 if task < flat else float(chain % 2)
            trajectories.append(_Row(ids, mask, f"task{task}", reward))
    return StepBatch.of(trajectories)


class _Row:
    """What StepBatch.of reads of a trajectory."""

    def __init__(self, ids, mask, group, reward):
        self.ids, self.loss_mask, self.group_id, self.reward = ids, mask, group, reward
        self.logprobs = [None] * len(ids)
        self.turns, self.meta = [], {}


def build_update(model_dir, skip: bool):
    from agentfly_cli.algorithms.interfaces import get_advantage_estimator, get_policy_loss
    from agentfly_cli.settings.run import RunSettings
    from agentfly_cli.train.update import PolicyUpdate
    from agentfly_cli.train_backends import build_train_backend

    config = RunSettings.model_validate(
        {
            "model": str(model_dir),
            "trainer": {
                "skip_zero_advantage": skip,
                "micro_batch_tokens": 4096,
                "backend": {"device": "cpu", "dtype": "float32", "lr": 1e-5},
            },
        }
    )
    train = build_train_backend(str(model_dir), config.trainer.backend)
    update = PolicyUpdate(
        config,
        train,
        eot_token_id=0,
        reference=None,
        share_prefix=True,
        chunk=4096,
        temperature=1.0,
        advantage_fn=get_advantage_estimator("grpo"),
        policy_loss_fn=get_policy_loss("ppo"),
    )
    return update, train


def one_update(update, batch, step: int) -> tuple[float, dict]:
    started = time.perf_counter()
    metrics: dict = {}
    update._advantages(batch, metrics)
    out = update.optimize(step, batch)
    return time.perf_counter() - started, out


def run_case(model_dir, flat_share: float, repeats: int) -> dict:
    on, train_on = build_update(model_dir, skip=True)
    off, train_off = build_update(model_dir, skip=False)
    batch = make_batch(train_on.unwrapped().config.vocab_size, flat_share)
    # the first update of each: the same update? (AdamW's first step is nearly sign(g), so
    # the gradient norms tell more than the weights)
    _, full_first = one_update(off, batch, 1)
    _, skip_first = one_update(on, batch, 1)
    a, b = train_on.model.state_dict(), train_off.model.state_dict()
    difference = max(float((a[k] - b[k]).abs().max()) for k in a)
    seconds = {"skip": [], "full": []}
    for step in range(2, repeats + 2):  # timed, interleaved, after that warm-up
        for name, update in (("full", off), ("skip", on)):
            elapsed, _ = one_update(update, batch, step)
            seconds[name].append(elapsed)
    del on, off, train_on, train_off
    gc.collect()
    full, skip = statistics.median(seconds["full"]), statistics.median(seconds["skip"])
    return {
        "flat_share": flat_share,
        "rows": len(batch.rows),
        "rows_skipped": skip_first.get("train/skipped_zero_advantage", 0.0),
        "trained_tokens": int(batch.mask.sum()),
        "full_s": seconds["full"],
        "skip_s": seconds["skip"],
        "speedup": full / skip,
        "grad_norm_full": full_first["grad_norm"],
        "grad_norm_skip": skip_first["grad_norm"],
        "loss_full": full_first["loss/policy"],
        "loss_skip": skip_first["loss/policy"],
        "max_weight_difference_after_one_update": difference,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument(
        "--shares", default=",".join(map(str, FLAT_SHARES)), help="flat shares, comma-separated"
    )
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    import torch

    from agentfly_cli.models.resolve import resolve_model

    model_dir = resolve_model(args.model)
    shares = [float(share) for share in args.shares.split(",")]
    cases = [run_case(model_dir, share, args.repeats) for share in shares]
    result = {
        "benchmark": "skip_zero_advantage",
        "model": args.model,
        "machine": {
            "cpu_count": os.cpu_count(),
            "torch_threads": torch.get_num_threads(),
            "platform": platform.platform(),
        },
        "batch": f"{TASKS} tasks x {CHAINS} chains, {PROMPT}-token prompt, 1-2 turns",
        "cases": cases,
    }
    text = json.dumps(result, indent=2)
    print(text)
    if args.out:
        with open(args.out, "w") as handle:
            handle.write(text + "\n")


if __name__ == "__main__":
    main()
