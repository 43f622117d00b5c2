"""Tokens/s of one GRPO step: agentfly's trainer against TRL's GRPOTrainer, side by side.

Same model, same machine, same process and thread count, same batch shape: 4 prompts x 8
completions of at most 32 sampled tokens, temperature 1, fp32, AdamW (lr 1e-6), one optimizer
step per batch, no KL (beta 0, no reference model), token-mean loss (TRL's ``dapo`` loss
type), GRPO advantages normalised by the group's std, PPO clip 0.2. The reward is the share of
digits in the completion (it has spread, so both update).

Each case runs 1 warm-up step, then ``--repeats`` timed steps; the median is reported.
- full step: generation + reward + update. agentfly generates with its ``hf`` backend
  (continuous batching, the policy's own model object); TRL with ``model.generate``.
- update: the step minus generation and scoring. agentfly: its ``time/train_s`` metric
  (batch building, logprob forward, backward, optimizer step). TRL: the step time minus
  ``_generate_and_score_completions`` (timed by wrapping it).
tokens/s = prompt + completion tokens of the step's 32 sequences / seconds.

TRL lives only in the benchmark environment: ``make bench-venv`` builds ``.venv-bench``.
Run: .venv-bench/bin/python benchmarks/train_bench.py [--models tiny,smollm2] [--out FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("WANDB_DISABLED", "true")

PROMPTS = [
    "Write the numbers from one to ten as digits, separated by spaces:",
    "List five prime numbers below fifty:",
    "What is 123 + 456? Show the sum:",
    "Count down from twenty with digits:",
]
TASKS, GROUP, MAX_NEW, LR = 4, 8, 32, 1e-6


def digit_share(text: str) -> float:
    return sum(c.isdigit() for c in text) / max(len(text), 1)


# ---- agentfly ---------------------------------------------------------------------------------


def agentfly_case(model_path: str, steps: int, workdir: Path, sets=()) -> list[dict]:
    from agentfly_cli.config import load_config
    from agentfly_cli.train.trainer import Trainer

    data = workdir / "tasks.jsonl"
    data.write_text("".join(json.dumps({"question": p}) + "\n" for p in PROMPTS))
    reward = workdir / "bench_reward.py"
    reward.write_text(
        "def digits(prediction, trajectory=None, **fields):\n"
        "    text = prediction or ''\n"
        "    return sum(c.isdigit() for c in text) / max(len(text), 1)\n"
    )
    config = load_config(
        None,
        [
            f"rollout.n={GROUP}",
            "rollout.max_turns=1",
            f"rollout.max_tokens_per_turn={MAX_NEW}",
            "rollout.max_total_tokens=4096",
            "rollout.temperature=1.0",
            f"trainer.steps={steps}",
            f"trainer.tasks_per_step={TASKS}",
            f"trainer.backend.lr={LR}",
            "trainer.backend.dtype=float32",
            "trainer.telemetry.sinks=[jsonl]",
            "trainer.save_trajectories=false",
            "trainer.algorithm.loss_agg=token-mean",
            *sets,
        ],
        model=model_path,
        **{"data.path": str(data), "reward": f"{reward}:digits"},
    )
    history = Trainer(config, run_dir=workdir / "agentfly-run", console=False).fit().history
    return [
        {
            "step_s": h["time/step_s"],
            "update_s": h["time/train_s"],
            "tokens": h["tokens/total"],
        }
        for h in history
    ]


# ---- TRL --------------------------------------------------------------------------------------


def trl_case(model_path: str, steps: int, workdir: Path) -> list[dict]:
    import torch
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    tokenizer = AutoTokenizer.from_pretrained(model_path)
    tokenizer.padding_side = "left"
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    model = AutoModelForCausalLM.from_pretrained(model_path, dtype=torch.float32)
    prompts = [
        tokenizer.apply_chat_template(
            [{"role": "user", "content": p}], tokenize=False, add_generation_prompt=True
        )
        for p in PROMPTS
    ]
    dataset = Dataset.from_list([{"prompt": p} for p in prompts] * steps)

    def digits(completions, **kwargs):
        return [digit_share(c) for c in completions]

    args = GRPOConfig(
        output_dir=str(workdir / "trl-run"),
        num_generations=GROUP,
        per_device_train_batch_size=TASKS * GROUP,
        gradient_accumulation_steps=1,
        max_completion_length=MAX_NEW,
        max_steps=steps,
        learning_rate=LR,
        lr_scheduler_type="constant",
        warmup_steps=0,
        beta=0.0,
        loss_type="dapo",
        temperature=1.0,
        use_cpu=True,
        bf16=False,
        report_to="none",
        logging_steps=1,
        save_strategy="no",
        shuffle_dataset=False,
        max_grad_norm=1.0,
        seed=0,
    )
    records: list[dict] = []
    generation: dict[str, float] = {"s": 0.0, "tokens": 0.0}

    class StepTimer(TrainerCallback):
        def on_step_begin(self, *a, **k):
            generation.update(s=0.0, tokens=0.0)
            self.started = time.perf_counter()

        def on_step_end(self, *a, **k):
            total = time.perf_counter() - self.started
            records.append(
                {
                    "step_s": total,
                    "update_s": total - generation["s"],
                    "tokens": generation["tokens"],
                }
            )

    trainer = GRPOTrainer(
        model=model,
        reward_funcs=digits,
        args=args,
        train_dataset=dataset,
        processing_class=tokenizer,
        callbacks=[StepTimer()],
    )
    inner = trainer._generate_and_score_completions

    def timed(*a, **k):
        started = time.perf_counter()
        out = inner(*a, **k)
        generation["s"] += time.perf_counter() - started
        generation["tokens"] += float(out["prompt_mask"].sum() + out["completion_mask"].sum())
        return out

    trainer._generate_and_score_completions = timed
    trainer.train()
    return records


# ---- report -----------------------------------------------------------------------------------


def summarize(records: list[dict]) -> dict:
    timed = records[1:]  # the first step is a warm-up
    step_s = statistics.median(r["step_s"] for r in timed)
    update_s = statistics.median(r["update_s"] for r in timed)
    tokens = statistics.median(r["tokens"] for r in timed)
    return {
        "full_step_s": round(step_s, 3),
        "update_s": round(update_s, 3),
        "tokens_per_step": tokens,
        "full_step_tokens_per_s": round(tokens / step_s, 1),
        "update_tokens_per_s": round(tokens / update_s, 1),
        "steps": [{k: round(v, 3) for k, v in r.items()} for r in records],
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="tiny,smollm2")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out")
    parser.add_argument(
        "--set", action="append", default=[], help="agentfly config override (repeatable)"
    )
    parser.add_argument("--skip-trl", action="store_true", help="agentfly only")
    args = parser.parse_args()
    import importlib.util

    import torch
    import transformers

    if importlib.util.find_spec("trl") is None and not args.skip_trl:
        parser.error("TRL is not installed here: run with .venv-bench/bin/python (make bench-venv)")
    trl_version = None if args.skip_trl else importlib.import_module("trl").__version__

    from agentfly_cli.models import resolve_model

    report = {
        "benchmark": "train_step_vs_trl",
        "machine": {
            "platform": platform.platform(),
            "cpus": os.cpu_count(),
            "torch": torch.__version__,
            "torch_threads": torch.get_num_threads(),
            "transformers": transformers.__version__,
            "trl": trl_version,
        },
        "settings": {
            "prompts": TASKS,
            "completions_per_prompt": GROUP,
            "max_new_tokens": MAX_NEW,
            "dtype": "float32",
            "lr": LR,
            "kl": "none (beta 0)",
            "loss": "token-mean (TRL loss_type dapo)",
            "repeats": args.repeats,
            "agentfly_overrides": args.set,
        },
        "cases": {},
    }
    for name in args.models.split(","):
        model_path = str(resolve_model(name))
        steps = args.repeats + 1
        with tempfile.TemporaryDirectory() as tmp:
            ours = summarize(agentfly_case(model_path, steps, Path(tmp), args.set))
        if args.skip_trl:
            report["cases"][name] = {"agentfly": ours}
            continue
        with tempfile.TemporaryDirectory() as tmp:
            theirs = summarize(trl_case(model_path, steps, Path(tmp)))
        report["cases"][name] = {
            "agentfly": ours,
            "trl": theirs,
            "speedup_full_step": round(
                ours["full_step_tokens_per_s"] / theirs["full_step_tokens_per_s"], 2
            ),
            "speedup_update": round(ours["update_tokens_per_s"] / theirs["update_tokens_per_s"], 2),
            "target_speedup": 1.5,
        }
        print(f"{name}: done", file=sys.stderr, flush=True)
    text = json.dumps(report, indent=2)
    print(text)
    if args.out:
        Path(args.out).write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
