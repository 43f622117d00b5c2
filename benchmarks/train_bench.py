"""Tokens/s of one GRPO step: agentfly's trainer against TRL's GRPOTrainer, side by side.

Same model, machine, process and thread count (CPU), same batch shape: 4 prompts (about 130
tokens each with SmolLM2's chat template) x 8 completions of at most 32 sampled tokens,
temperature 1, fp32, AdamW (lr 1e-6, grad-norm clip 1.0), one optimizer step per batch, no KL
(beta 0, no reference model), token-mean loss (TRL's ``dapo`` loss type), GRPO advantages
normalised by the group's std, PPO clip 0.2, no old-logprob pass (on-policy: both frameworks
use the detached current logprobs). The reward is the share of digits in the completion.

Three timings per case; each runs 1 warm-up step, then the median of the timed steps:
- full step: generation + reward + update, each framework's own loop. agentfly: ``Trainer``
  with its ``hf`` rollout backend (continuous batching on the policy's own model object);
  TRL: ``GRPOTrainer`` (``model.generate``). tokens = each run's own prompt + completion tokens.
- update in the loop: the same runs minus generation and scoring. agentfly: ``time/train_s``
  (batch building, advantages, logprob forward, backward, optimizer step); TRL: the step minus
  ``_generate_and_score_completions`` (timed by wrapping it).
- update on the same rows: identical token rows for both (the 4 chat-templated prompts, 8
  random 32-token completions each, fixed advantages). agentfly: ``plan_micro_batches`` ->
  ``sequence_logprobs`` -> ``scatter_rows`` -> ``ppo_loss`` -> ``aggregate_loss`` ->
  ``backend.backward``, then ``backend.step()``. TRL: its own training loop with
  ``_generate_and_score_completions`` replaced by a function returning those rows.
tokens/s = prompt + completion tokens of the step's 32 sequences / seconds.

``--case multiturn``: the calculator recipe's multi-turn tool chains instead, agentfly's trainer
against GRPOTrainer with its tool loop, seconds per step and the reward per step
(benchmarks/multiturn_case.py).

TRL lives only in the benchmark environment: ``make bench-venv`` builds ``.venv-bench``.
Run: .venv-bench/bin/python benchmarks/train_bench.py [--models tiny,smollm2] [--out FILE]
     .venv-bench/bin/python benchmarks/train_bench.py --case multiturn --models smollm2
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

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the sibling case modules
from trl_common import SHARED_GRPO_SETTINGS, step_timer  # noqa: E402

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("WANDB_DISABLED", "true")

PROMPTS = [
    "You are helping a teacher prepare a short arithmetic worksheet for a class of ten-year-old "
    "students. The worksheet opens with a warm-up line that lists the whole numbers from one to "
    "ten, written as digits and separated by single spaces, so that the students can check their "
    "counting before the harder exercises start. Keep the line short and plain: no heading, no "
    "commentary and no explanation before or after it, since the teacher will paste it straight "
    "into the document. Write the numbers from one to ten as digits, separated by spaces:",
    "A small puzzle club is collecting facts about numbers for its weekly newsletter. This week "
    "the theme is prime numbers: whole numbers greater than one whose only divisors are one and "
    "the number itself. The editor wants a compact list that readers can scan quickly, with the "
    "numbers written as digits and separated by commas, in increasing order, and nothing else on "
    "the line, because the layout leaves very little room for text. List five prime numbers "
    "below fifty, as digits separated by commas:",
    "A shop assistant is checking the till at the end of a long day and wants to double-check one "
    "addition before closing. The morning sales came to one hundred and twenty-three pounds and "
    "the afternoon sales to four hundred and fifty-six pounds. The assistant only needs the final "
    "figure written as digits, without the pound sign, without words and without any working "
    "shown, because the number goes straight into a spreadsheet cell that rejects text. What is "
    "123 + 456? Reply with the sum in digits only:",
    "A rocket club is rehearsing the countdown for its first model launch on the school field. "
    "The launch officer reads the numbers aloud from a card, and the card must show every number "
    "from twenty down to one, written as digits, separated by single spaces, in decreasing order, "
    "with no words in between, so that the officer never loses the place while reading. Write "
    "the text of that card now, counting down from twenty to one with digits and spaces only, "
    "and nothing else:",
]
TASKS, GROUP, MAX_NEW, LR = 4, 8, 32, 1e-6
REPEATS = {"tiny": 3}  # timed steps per case; other models: 2

FAIRNESS = [
    "same model files, fp32, CPU, same torch thread count, one process at a time",
    "same optimizer (torch AdamW, lr 1e-6, betas 0.9/0.999, eps 1e-8, no weight decay), "
    "grad-norm clip 1.0, one optimizer step per step, constant lr",
    "no KL and no reference model (beta 0); no old-logprob pass in either",
    "token-mean loss over the step's completion tokens (agentfly token-mean, TRL dapo)",
    "full step and update in the loop: generated lengths differ from run to run (sampling, "
    "EOS), so tokens are counted per run; tokens/s normalises for it",
    "update on the same rows: identical token ids, masks and advantages for both",
    "TRL's update-in-loop and same-rows figures include the HF Trainer loop's per-step "
    "overhead (callbacks, metric gathering); agentfly's same-rows figure is the bare update "
    "path, its update-in-loop figure includes batch building and advantages",
    "TRL on CPU scores every position with its chunked LM head (its Triton path that skips "
    "prompt positions is GPU-only); agentfly forwards each group's prompt once and runs the "
    "head on completion positions only: this is the main difference being measured",
    "TRL generates with model.generate (one padded batch of 32); agentfly with its hf backend "
    "(continuous batching, group prompt prefilled once)",
]


def digit_share(text: str) -> float:
    return sum(c.isdigit() for c in text) / max(len(text), 1)


def timed_median(values: list[float]) -> float:
    return statistics.median(values[1:])  # the first step is a warm-up


# ---- the same rows for both -------------------------------------------------------------------


def same_rows(model_path: str) -> dict:
    """4 chat-templated prompts x 8 random 32-token completions, and fixed advantages."""
    import torch
    from transformers import AutoTokenizer

    from agentfly_cli.algorithms.advantages import grpo_advantages
    from agentfly_cli.algorithms.interfaces import AdvantageInput
    from agentfly_cli.settings.algorithm import AlgorithmSettings

    tokenizer = AutoTokenizer.from_pretrained(model_path)
    prompts = []
    for text in PROMPTS:
        chat = tokenizer.apply_chat_template(
            [{"role": "user", "content": text}], tokenize=False, add_generation_prompt=True
        )
        prompts.append(tokenizer(chat, add_special_tokens=False)["input_ids"])
    generator = torch.Generator().manual_seed(0)
    n = TASKS * GROUP
    completions = torch.randint(0, len(tokenizer), (n, MAX_NEW), generator=generator)
    rewards = torch.rand(n, generator=generator)
    groups = [i // GROUP for i in range(n)]
    data = AdvantageInput(rewards=rewards, mask=torch.ones(n, MAX_NEW), group_ids=groups)
    advantages = grpo_advantages(data, AlgorithmSettings()).advantages[:, 0]
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    return {
        "prompts": [prompts[g] for g in groups],
        "completions": completions,
        "advantages": advantages,
        "pad": pad,
        "tokens": sum(len(prompts[g]) for g in groups) + n * MAX_NEW,
    }


def agentfly_same_rows(model_path: str, rows: dict, steps: int) -> list[float]:
    """Seconds per update of agentfly's update path on ``rows``."""
    import torch

    from agentfly_cli.algorithms import losses
    from agentfly_cli.settings.algorithm import AlgorithmSettings
    from agentfly_cli.settings.train import TrainerSettings
    from agentfly_cli.settings.train_backend import TrainBackendSettings
    from agentfly_cli.train.tensors.batch import (
        TrainRow,
        plan_micro_batches,
        scatter_rows,
        trained_mask,
    )
    from agentfly_cli.train.tensors.logprobs import sequence_logprobs
    from agentfly_cli.train_backends import build_train_backend

    config = TrainBackendSettings(device="cpu", dtype="float32", lr=LR, lr_schedule="constant")
    backend = build_train_backend(model_path, config)
    algo = AlgorithmSettings(loss_agg="token-mean")
    train_rows = [
        TrainRow(p + c.tolist(), [0] * len(p) + [1] * len(c), f"task{i // GROUP}")
        for i, (p, c) in enumerate(zip(rows["prompts"], rows["completions"], strict=True))
    ]
    mask = trained_mask(train_rows)
    advantages = rows["advantages"][:, None] * mask
    width, count = mask.shape[1], len(train_rows)
    budget = TrainerSettings().micro_batch_tokens
    seconds = []
    for _ in range(steps):
        started = time.perf_counter()
        backend.model.train()
        plans = plan_micro_batches(train_rows, range(count), max_tokens=budget)
        num_tokens = int(mask.sum())
        for plan in plans:
            index = torch.tensor(plan.rows)
            sub = [train_rows[i] for i in plan.rows]
            stats = sequence_logprobs(backend.model, plan.batch, entropy=True)
            logprobs = scatter_rows(stats.logprobs, sub, width)
            per_token, _ = losses.ppo_loss(
                logprobs, logprobs.detach(), advantages[index], mask[index], algo
            )
            loss = losses.aggregate_loss(
                per_token, mask[index], "token-mean", num_tokens=num_tokens, num_seqs=count
            )
            backend.backward(loss)
        backend.step()
        seconds.append(time.perf_counter() - started)
    return seconds


def trl_inputs(rows: dict) -> dict:
    """``rows`` as the dict TRL's ``_generate_and_score_completions`` returns."""
    import torch

    width = max(len(p) for p in rows["prompts"])
    n = len(rows["prompts"])
    prompt_ids = torch.full((n, width), rows["pad"], dtype=torch.long)
    prompt_mask = torch.zeros(n, width, dtype=torch.long)
    for i, p in enumerate(rows["prompts"]):  # left-padded, as TRL pads prompts
        prompt_ids[i, width - len(p) :] = torch.tensor(p)
        prompt_mask[i, width - len(p) :] = 1
    completion_mask = torch.ones_like(rows["completions"])
    return {
        "prompt_ids": prompt_ids,
        "prompt_mask": prompt_mask,
        "completion_ids": rows["completions"].clone(),
        "completion_mask": completion_mask,
        "advantages": rows["advantages"].clone(),
        "num_items_in_batch": completion_mask.sum().float(),
    }


# ---- agentfly's full step ---------------------------------------------------------------------


def agentfly_case(model_path: str, steps: int, workdir: Path, sets=()) -> list[dict]:
    from agentfly_cli.recipes.loader import load_config
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
            "trainer.backend.device=cpu",
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
            "completion_tokens": h["tokens/sampled"],
        }
        for h in history
    ]


# ---- TRL --------------------------------------------------------------------------------------


def trl_trainer(model_path: str, steps: int, workdir: Path):
    """A GRPOTrainer with the benchmark's settings; a callback records each step's seconds."""
    import torch
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer
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
        gradient_checkpointing=False,  # TRL 1.16's default is on; agentfly's side runs without
        **SHARED_GRPO_SETTINGS,
    )
    seconds: list[float] = []

    trainer = GRPOTrainer(
        model=model,
        reward_funcs=digits,
        args=args,
        train_dataset=dataset,
        processing_class=tokenizer,
        callbacks=[step_timer(seconds)],
    )
    return trainer, seconds


def trl_case(model_path: str, steps: int, workdir: Path) -> list[dict]:
    trainer, seconds = trl_trainer(model_path, steps, workdir)
    generation: list[tuple[float, float, float]] = []
    inner = trainer._generate_and_score_completions

    def timed(*a, **k):
        started = time.perf_counter()
        out = inner(*a, **k)
        prompt, completion = float(out["prompt_mask"].sum()), float(out["completion_mask"].sum())
        generation.append((time.perf_counter() - started, prompt + completion, completion))
        return out

    trainer._generate_and_score_completions = timed
    trainer.train()
    return [
        {"step_s": s, "update_s": s - g, "tokens": tokens, "completion_tokens": completion}
        for s, (g, tokens, completion) in zip(seconds, generation, strict=True)
    ]


def trl_same_rows(model_path: str, rows: dict, steps: int, workdir: Path) -> list[float]:
    """Seconds per step of TRL's training loop when 'generation' returns ``rows``."""
    trainer, seconds = trl_trainer(model_path, steps, workdir)
    inputs = trl_inputs(rows)
    trainer._generate_and_score_completions = lambda *a, **k: dict(inputs)
    trainer.train()
    return seconds


# ---- report -----------------------------------------------------------------------------------


def summarize(records: list[dict], same_rows_s: list[float], same_tokens: int) -> dict:
    step_s = timed_median([r["step_s"] for r in records])
    update_s = timed_median([r["update_s"] for r in records])
    tokens = timed_median([r["tokens"] for r in records])
    same_s = timed_median(same_rows_s)
    return {
        "full_step_s": round(step_s, 3),
        "update_in_loop_s": round(update_s, 3),
        "update_same_rows_s": round(same_s, 3),
        "tokens_per_step": tokens,
        "completion_tokens_per_step": timed_median([r["completion_tokens"] for r in records]),
        "full_step_tokens_per_s": round(tokens / step_s, 1),
        "update_in_loop_tokens_per_s": round(tokens / update_s, 1),
        "update_same_rows_tokens_per_s": round(same_tokens / same_s, 1),
        "steps": [{k: round(v, 3) for k, v in r.items()} for r in records],
        "same_rows_steps_s": [round(s, 3) for s in same_rows_s],
    }


def run_case(name: str, model_path: str, repeats: int, args) -> dict:
    steps = repeats + 1
    rows = same_rows(model_path)
    with tempfile.TemporaryDirectory() as tmp:
        records = agentfly_case(model_path, steps, Path(tmp), args.set)
    ours = summarize(records, agentfly_same_rows(model_path, rows, steps), rows["tokens"])
    case = {
        "repeats": repeats,
        "prompt_tokens": [len(p) for p in rows["prompts"][::GROUP]],
        "same_rows_tokens": rows["tokens"],
        "agentfly": ours,
    }
    if args.skip_trl:
        return case
    with tempfile.TemporaryDirectory() as tmp:
        records = trl_case(model_path, steps, Path(tmp))
    with tempfile.TemporaryDirectory() as tmp:
        same = trl_same_rows(model_path, rows, steps, Path(tmp))
    theirs = summarize(records, same, rows["tokens"])
    case["trl"] = theirs
    case["speedup"] = {
        key: round(ours[f"{key}_tokens_per_s"] / theirs[f"{key}_tokens_per_s"], 2)
        for key in ("full_step", "update_in_loop", "update_same_rows")
    }
    case["target_speedup"] = 1.5
    return case


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=None, help="default: tiny,smollm2 (multiturn: smollm2)")
    parser.add_argument(
        "--case",
        choices=["single", "multiturn"],
        default="single",
        help="single: the one-turn digits task; multiturn: the calculator recipe's tool chains",
    )
    parser.add_argument(
        "--steps", type=int, help="multiturn: training steps (the first is a warm-up; default 5)"
    )
    parser.add_argument(
        "--size", help="multiturn: TASKSxGROUP, e.g. 2x2 for a smoke run (default 4x8)"
    )
    parser.add_argument(
        "--repeats", type=int, help="timed steps per case (default: tiny 3, else 2)"
    )
    parser.add_argument("--out")
    parser.add_argument(
        "--set", action="append", default=[], help="agentfly config override (repeatable)"
    )
    parser.add_argument("--skip-trl", action="store_true", help="agentfly only")
    args = parser.parse_args(argv)
    import importlib
    import importlib.util

    import torch
    import transformers

    if importlib.util.find_spec("trl") is None and not args.skip_trl:
        parser.error("TRL is not installed here: run with .venv-bench/bin/python (make bench-venv)")
    trl_version = None if args.skip_trl else importlib.import_module("trl").__version__

    from agentfly_cli.models import resolve_model

    machine = {
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "load_average_at_start": [round(x, 2) for x in os.getloadavg()],
        "torch": torch.__version__,
        "torch_threads": torch.get_num_threads(),
        "transformers": transformers.__version__,
        "trl": trl_version,
    }
    if args.case == "multiturn":
        from multiturn_case import multiturn_report, parse_size

        try:
            size = parse_size(args.size, args.steps)
        except ValueError as exc:
            parser.error(str(exc))
        report = multiturn_report(args, machine, size)
        return _write(report, args.out)
    args.models = args.models or "tiny,smollm2"
    report = {
        "benchmark": "train_step_vs_trl",
        "machine": machine,
        "settings": {
            "prompts": TASKS,
            "completions_per_prompt": GROUP,
            "max_new_tokens": MAX_NEW,
            "temperature": 1.0,
            "dtype": "float32",
            "device": "cpu",
            "optimizer": "AdamW",
            "lr": LR,
            "max_grad_norm": 1.0,
            "kl": "none (beta 0)",
            "loss": "token-mean (TRL loss_type dapo), clip 0.2",
            "warmup_steps_discarded": 1,
            "agentfly_overrides": args.set,
        },
        "timings": {
            "full_step": "generation + reward + update, each framework's own loop",
            "update_in_loop": "the full step minus generation and scoring (agentfly "
            "time/train_s; TRL step minus _generate_and_score_completions)",
            "update_same_rows": "update alone on identical token rows (agentfly: "
            "plan_micro_batches + sequence_logprobs + ppo_loss + backend step; TRL: its "
            "training loop with generation replaced by the fixed rows)",
        },
        "fairness": FAIRNESS,
        "cases": {},
    }
    for name in args.models.split(","):
        repeats = args.repeats or REPEATS.get(name, 2)
        model_path = str(resolve_model(name))
        report["cases"][name] = run_case(name, model_path, repeats, args)
        print(f"{name}: done", file=sys.stderr, flush=True)
    machine["load_average_at_end"] = [round(x, 2) for x in os.getloadavg()]
    return _write(report, args.out)


def _write(report: dict, out: str | None) -> int:
    text = json.dumps(report, indent=2)
    print(text)
    if out:
        Path(out).write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
