"""The multi-turn tool case of ``train_bench.py``: the ``calculator`` recipe trained by agentfly's
``Trainer`` and by TRL's ``GRPOTrainer`` with its tool calling, in one run.

Both sides get the same model, tasks (the recipe's first ``steps x tasks`` rows, in file
order), chat (the recipe's system prompt and few-shot turns), tool (``tools_builtin``'s
``calculator`` through agentfly's own tool call, so the same error observations), reward
(``exact_match`` on the answer), batch (tasks x chains, default 4 x 8), turns (3), tokens per
turn (24), temperature, optimizer and loss. TRL parses tool calls with a tokenizer
``response_template`` and renders tool results with the chat template: SmolLM2's tokenizer
gets a template that renders exactly what SmolLM2's own does for system/user/assistant turns plus
the recipe's line protocol (an assistant tool call is ``CALC: <expression>``, a tool result
is a user turn ``RESULT: <value>``), and a response template that reads ``CALC:`` lines as
calculator calls. ``ANSWER:`` is not a TRL tool: a turn without a call ends TRL's loop, as a
turn without a call (or with the terminal answer) ends agentfly's chain.

TRL lives only in ``.venv-bench`` (``make bench-venv``); everything else here runs without it.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from multiturn_protocol import (
    RECIPE,
    line_parser,
    line_protocol_tokenizer,
    prompt_messages,
    recipe_chat,
    recipe_rows,
    trl_calculator,
    trl_reward,
)
from trl_common import SHARED_GRPO_SETTINGS, step_timer

TASKS, GROUP, STEPS, MAX_NEW, MAX_TURNS, LR = 4, 8, 5, 24, 3, 8e-6
# TRL's budget for the whole multi-turn completion (sampled + tool tokens); agentfly's
# rollout.max_total_tokens (1024, prompt included) is as loose. Neither binds at 3 x 24.
TRL_MAX_COMPLETION = 512

NOTES = [
    "protocol: both sides use the calculator recipe's CALC:/ANSWER: line protocol on SmolLM2's "
    "own chat template; TRL through a chat template that renders the same tokens for "
    "system/user/assistant turns (checked: prompt_ids_equal) and a response_template that "
    "reads CALC: lines as calculator calls",
    "turn end: TRL ends a turn only at EOS (<|im_end|>) or its token cap, so agentfly runs "
    "with rollout.stop=[] here (the recipe stops at '\\n'); max 24 new tokens per turn in "
    "both (TRL: generation_kwargs max_new_tokens=24), 3 generations per chain at most "
    "(TRL: max_tool_calling_iterations=2)",
    "chain end: agentfly stops a chain at ANSWER: (the terminal answer tool), at a turn "
    "without a call, or at a turn cut by the token cap; TRL stops at a turn without a CALC: "
    "call and keeps generating after a cut turn that holds one, and after a turn with both "
    "CALC: and ANSWER:. The TRL reward reads the chain as agentfly would: the first ANSWER: "
    "value, else the text of the first turn without a call, else '' (no answer)",
    "tool: the same calculator Tool object for both (TRL gets an async wrapper returning its "
    "observation), so errors read the same; TRL counts no error budget (agentfly's "
    "rollout.max_errors=3 here, which cannot bind within 3 turns)",
    "masking: both train only on sampled tokens; tool results (the RESULT: user turn and the "
    "next assistant header) have loss mask 0 (TRL: tool_mask). TRL re-decodes nothing either: "
    "it appends the template's tool suffix ids to the sampled ids. TRL's parse of each turn "
    "(parse_response) only decides which tools to call",
    "generation: TRL calls model.generate once per tool iteration on the chains still going, "
    "left-padded, re-prefilling prompt + earlier turns (no KV cache across turns); agentfly's "
    "hf backend batches chains continuously on the policy's own model",
    "update: fp32 CPU, AdamW lr 8e-6 constant (no warm-up), grad clip 1.0, beta 0, "
    "token-mean loss (TRL dapo), clip 0.2, group-std advantages, one optimizer step per "
    "step, gradient checkpointing on in both (the recipe's setting, TRL's default). Memory "
    "is bounded per forward pass in both: agentfly by micro_batch_tokens=512 (the recipe), "
    "TRL by micro-batches of one group (per_device_train_batch_size = chains per task, "
    "gradient_accumulation_steps = tasks per step); TRL with a 4 x 8 batch in one pass and "
    "no checkpointing (in the process that had run agentfly's side first) passed 19 GiB and "
    "was OOM-killed on this 24 GiB machine",
    "flat groups: agentfly skips the forward and backward of groups whose rewards are all "
    "equal (trainer.skip_zero_advantage, its default); TRL runs them (its steps record "
    "groups_with_equal_rewards, agentfly's skipped_zero_advantage)",
    "isolation: each side runs in a process of its own, one after the other (agentfly "
    "first); 'machine' in each side gives the load average and the busy processes (ps "
    "pcpu: average %CPU over each process's life) before and after it, and its peak RSS",
    "sampled tokens differ from run to run (sampling, chain lengths), so tokens/s are "
    "reported beside seconds per step",
]


# ---- timings ----------------------------------------------------------------------------------


def timed_median(values: list[float]) -> float:
    return statistics.median(values[1:]) if len(values) > 1 else values[0]


def summarize(steps: list[dict]) -> dict:
    """Median seconds and tokens/s over the steps after the first (a warm-up), and the curve."""
    step_s = timed_median([s["step_s"] for s in steps])
    sampled = timed_median([s["sampled_tokens"] for s in steps])
    total = timed_median([s["tokens"] for s in steps])
    return {
        "step_s_median": round(step_s, 3),
        "sampled_tokens_per_step": sampled,
        "tokens_per_step": total,
        "sampled_tokens_per_s": round(sampled / step_s, 2),
        "tokens_per_s": round(total / step_s, 1),
        "sampled_tokens_per_s_of_steps": round(
            sum(s["sampled_tokens"] for s in steps[1:] or steps)
            / sum(s["step_s"] for s in steps[1:] or steps),
            2,
        ),
        "reward_per_step": [round(s["reward"], 4) for s in steps],
        "steps": [
            {k: round(v, 4) if isinstance(v, float) else v for k, v in s.items()} for s in steps
        ],
    }


def compare(ours: dict, theirs: dict) -> dict:
    return {
        "step_s_trl_over_agentfly": round(theirs["step_s_median"] / ours["step_s_median"], 2),
        "sampled_tokens_per_s_agentfly_over_trl": round(
            ours["sampled_tokens_per_s_of_steps"] / theirs["sampled_tokens_per_s_of_steps"], 2
        ),
    }


# ---- agentfly ---------------------------------------------------------------------------------


def agentfly_run(model_path: str, rows: list[dict], size: dict, workdir: Path, sets=()) -> dict:
    """Train with agentfly's Trainer on ``rows``; per-step records and the first prompt's ids."""
    from agentfly_cli.recipes.loader import load_config
    from agentfly_cli.train.trainer import Trainer

    data = workdir / "tasks.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    overrides = [
        "data.holdout=0",
        f"rollout.n={size['group']}",
        f"rollout.max_turns={size['max_turns']}",
        f"rollout.max_tokens_per_turn={size['max_new']}",
        "rollout.stop=[]",
        "rollout.max_errors=3",
        "rollout.temperature=1.0",
        f"trainer.steps={size['steps']}",
        f"trainer.tasks_per_step={size['tasks']}",
        "trainer.shuffle=false",
        f"trainer.backend.lr={LR}",
        "trainer.backend.warmup_steps=0",
        "trainer.backend.lr_schedule=constant",
        "trainer.backend.gradient_checkpointing=true",
        "trainer.backend.dtype=float32",
        "trainer.backend.device=cpu",
        "trainer.telemetry.sinks=[jsonl]",
        "trainer.save_trajectories=true",
        "trainer.algorithm.loss_agg=token-mean",
        *sets,
    ]
    config = load_config(RECIPE, overrides, model=model_path, **{"data.path": str(data)})
    run_dir = workdir / "agentfly-run"
    history = Trainer(config, run_dir=run_dir, console=False).fit().history
    chains = [_saved_chains(run_dir, step) for step in range(1, len(history) + 1)]
    steps = [
        {
            "step_s": h["time/step_s"],
            "rollout_s": h["time/rollout_s"],
            "update_s": h["time/train_s"],
            "reward": h["reward/mean"],
            "sampled_tokens": h["tokens/sampled"],
            "tokens": h["tokens/total"],
            "tool_calls_per_chain": c["calculator_calls_per_chain"],
            "turns_per_chain": h["turns/mean"],
            # chains of groups with equal rewards: agentfly skips their update (TRL runs it)
            "skipped_zero_advantage": h.get("train/skipped_zero_advantage"),
        }
        for h, c in zip(history, chains, strict=True)
    ]
    observation = next((c["observation"] for c in chains if c["observation"]), None)
    return {"steps": steps, "first_prompt_ids": chains[0]["prompt_ids"], "observation": observation}


def _saved_chains(run_dir: Path, step: int) -> dict:
    """From step ``step``'s saved trajectories: calculator calls per chain, the first chain's
    prompt ids and one observation after a turn closed by EOS (its text and ids)."""
    [path] = sorted(run_dir.rglob(f"step-{step:06d}*.jsonl"))
    chains = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    calls = sum(1 for c in chains for t in c["tool_calls"] if t["name"] == "calculator")
    prompt = chains[0]["turns"][0]
    observation = next(filter(None, map(_closed_calculator_observation, chains)), None)
    return {
        "calculator_calls_per_chain": calls / max(len(chains), 1),
        "prompt_ids": chain_ids(chains[0], prompt),
        "observation": observation,
    }


def chain_ids(chain: dict, turn: dict) -> list[int]:
    return chain["ids"][turn["start"] : turn["end"]]


def _closed_calculator_observation(chain: dict) -> dict | None:
    """The first observation that follows an EOS-closed turn with one calculator call."""
    turns = chain["turns"]
    assistant = [i for i, t in enumerate(turns) if t["role"] == "assistant"]
    for number, index in enumerate(assistant):
        after = turns[index + 1] if index + 1 < len(turns) else None
        made = [r for r in chain["tool_calls"] if r["turn"] == number]
        closed = turns[index].get("finish_reason") == "stop"
        if after and after["role"] == "observation" and closed and len(made) == 1:
            if made[0]["name"] == "calculator":
                return {"text": made[0]["observation"], "ids": chain_ids(chain, after)}
    return None


# ---- TRL --------------------------------------------------------------------------------------


def trl_run(
    model_path: str, rows: list[dict], size: dict, workdir: Path, ours_observation=None
) -> dict:
    """Train with TRL's GRPOTrainer and its tool loop on ``rows``; per-step records, and
    whether TRL's tool-result ids equal agentfly's observation ids for ``ours_observation``."""
    import torch
    from datasets import Dataset
    from transformers import AutoModelForCausalLM
    from trl import GRPOConfig, GRPOTrainer

    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    chat = recipe_chat()
    tokenizer = line_protocol_tokenizer(model_path)
    model = AutoModelForCausalLM.from_pretrained(model_path, dtype=torch.float32)
    dataset = Dataset.from_list(
        [{"prompt": prompt_messages(r["question"], chat), "answer": r["answer"]} for r in rows]
    )
    args = GRPOConfig(
        output_dir=str(workdir / "trl-run"),
        num_generations=size["group"],
        # one group per micro-batch, one optimizer step per generation of tasks x group chains
        per_device_train_batch_size=size["group"],
        gradient_accumulation_steps=size["tasks"],
        max_completion_length=TRL_MAX_COMPLETION,
        max_tool_calling_iterations=size["max_turns"] - 1,
        generation_kwargs={"max_new_tokens": size["max_new"]},
        max_steps=size["steps"],
        learning_rate=LR,
        gradient_checkpointing=True,
        **SHARED_GRPO_SETTINGS,
    )
    seconds: list[float] = []

    trainer = GRPOTrainer(
        model=model,
        reward_funcs=trl_reward(line_parser(chat)),
        args=args,
        train_dataset=dataset,
        processing_class=tokenizer,
        tools=[trl_calculator()],
        callbacks=[step_timer(seconds)],
    )
    rollouts: list[dict] = []
    inner = trainer._generate_and_score_completions

    def timed(*a, **k):
        started = time.perf_counter()
        out = inner(*a, **k)
        trained = out["completion_mask"] * out.get("tool_mask", 1)
        rollouts.append(
            {
                "rollout_s": time.perf_counter() - started,
                "sampled_tokens": float(trained.sum()),
                "tokens": float(out["prompt_mask"].sum() + out["completion_mask"].sum()),
            }
        )
        return out

    trainer._generate_and_score_completions = timed
    first_prompt = tokenizer.apply_chat_template(
        dataset[0]["prompt"], add_generation_prompt=True, tokenize=True, return_dict=False
    )
    trainer.train()
    logged = [e for e in trainer.state.log_history if "reward" in e]
    rewards = [e["reward"] for e in logged]
    tools = [e.get("tools/call_frequency") for e in logged]
    flat = [e.get("frac_reward_zero_std") for e in logged]
    steps = [
        {
            "step_s": s,
            "rollout_s": r["rollout_s"],
            "update_s": s - r["rollout_s"],
            "reward": reward,
            "sampled_tokens": r["sampled_tokens"],
            "tokens": r["tokens"],
            "tool_calls_per_chain": calls,
            "groups_with_equal_rewards": zero,  # their update still runs in TRL
        }
        for s, r, reward, calls, zero in zip(seconds, rollouts, rewards, tools, flat, strict=True)
    ]
    observation = None
    if ours_observation is not None:
        message = {"role": "tool", "name": "calculator", "content": ours_observation["text"]}
        observation = trainer._get_tool_suffix_ids([message]) == ours_observation["ids"]
    return {
        "steps": steps,
        "first_prompt_ids": list(first_prompt),
        "tool_suffix_ids_equal": observation,
    }


# ---- the case ---------------------------------------------------------------------------------


def run_case(model_path: str, size: dict, skip_trl: bool, sets=()) -> dict:
    """Both runs on the same tasks, one after the other, each in a process of its own (so
    that neither inherits the other's memory); the comparison."""
    rows = recipe_rows(size["steps"] * size["tasks"])
    case: dict[str, Any] = {"size": dict(size), "tasks": [r["id"] for r in rows]}
    with tempfile.TemporaryDirectory() as tmp:
        ours = run_side("agentfly", model_path, size, Path(tmp), sets)
        case["agentfly"] = {**summarize(ours["steps"]), "machine": ours["machine"]}
        if skip_trl:
            return case
        observation = Path(tmp) / "observation.json"
        observation.write_text(json.dumps(ours["observation"]))
        theirs = run_side("trl", model_path, size, Path(tmp), ["--observation", str(observation)])
    case["trl"] = {**summarize(theirs["steps"]), "machine": theirs["machine"]}
    case["prompt_ids_equal"] = ours["first_prompt_ids"] == theirs["first_prompt_ids"]
    case["tool_suffix_ids_equal"] = theirs["tool_suffix_ids_equal"]
    case["prompt_tokens"] = len(theirs["first_prompt_ids"])
    case["comparison"] = compare(case["agentfly"], case["trl"])
    return case


def run_side(side: str, model_path: str, size: dict, workdir: Path, extra=()) -> dict:
    """One side in a child process of this interpreter (``--side``); its JSON."""
    out = workdir / f"{side}.json"
    command = [sys.executable, __file__, "--side", side, "--model", model_path]
    command += ["--size", f"{size['tasks']}x{size['group']}", "--steps", str(size["steps"])]
    extras = list(extra) if side == "trl" else [a for s in extra for a in ("--set", s)]
    subprocess.run([*command, *extras, "--out", str(out)], check=True)
    return json.loads(out.read_text())


def side_main(argv: list[str] | None = None) -> int:
    """``--side agentfly|trl``: one side's run, its records as JSON (``run_side`` calls it)."""
    parser = argparse.ArgumentParser(description="one side of the multi-turn case")
    parser.add_argument("--side", choices=["agentfly", "trl"], required=True)
    parser.add_argument("--model", required=True)
    parser.add_argument("--size", required=True)
    parser.add_argument("--steps", type=int, required=True)
    parser.add_argument("--observation", help="trl: agentfly's observation (JSON) to compare")
    parser.add_argument("--set", action="append", default=[])
    parser.add_argument("--out", required=True)
    args = parser.parse_args(argv)
    size = parse_size(args.size, args.steps)
    rows = recipe_rows(size["steps"] * size["tasks"])
    with tempfile.TemporaryDirectory() as tmp, machine_watch() as watch:
        if args.side == "agentfly":
            result = agentfly_run(args.model, rows, size, Path(tmp), args.set)
        else:
            seen = json.loads(Path(args.observation).read_text()) if args.observation else None
            result = trl_run(args.model, rows, size, Path(tmp), seen)
    Path(args.out).write_text(json.dumps({**result, "machine": watch}))
    return 0


@contextlib.contextmanager
def machine_watch():
    """What else ran while one side ran: load averages and busy processes at both ends, and
    the peak memory of the process (the side's own: each runs in a process of its own)."""
    watch: dict[str, Any] = {"load_average_at_start": load_average(), "busy_at_start": busy()}
    cpu = cpu_seconds()
    yield watch
    watch["cpu_s"] = round(cpu_seconds() - cpu, 1)  # less sensitive to a busy machine than wall s
    watch["load_average_at_end"] = load_average()
    watch["busy_at_end"] = busy()
    watch["peak_rss_mib"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)


def cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def load_average() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def busy(limit: int = 5) -> list[str]:
    """Other processes using over 5% of a core (ps), as '%CPU command' lines; [] without ps."""
    try:
        lines = subprocess.run(
            ["ps", "-eo", "pid=,pcpu=,args=", "--sort=-pcpu"],
            capture_output=True,
            text=True,
            timeout=10,
            check=True,
        ).stdout.splitlines()
    except (OSError, subprocess.SubprocessError):
        return []
    found = []
    for line in lines:
        pid, cpu, command = (line.split(None, 2) + ["", ""])[:3]
        if pid.isdigit() and int(pid) != os.getpid() and float(cpu or 0) > 5.0:
            found.append(f"{cpu}% {command[:120]}")
    return found[:limit]


def default_size(steps: int | None = None) -> dict:
    return {
        "tasks": TASKS,
        "group": GROUP,
        "steps": steps or STEPS,
        "max_new": MAX_NEW,
        "max_turns": MAX_TURNS,
    }


def parse_size(text: str | None, steps: int | None) -> dict:
    """``TASKSxGROUP`` (default 4x8) and the step count as the case's size."""
    size = default_size(steps)
    if text:
        tasks, sep, group = text.lower().partition("x")
        if not (sep and tasks.isdigit() and group.isdigit() and int(tasks) and int(group) > 1):
            raise ValueError(
                f"--size: expected TASKSxGROUP with GROUP >= 2 (e.g. 4x8), got {text!r}"
            )
        size["tasks"], size["group"] = int(tasks), int(group)
    if size["steps"] < 1:
        raise ValueError("--steps: expected a positive number of steps")
    return size


def multiturn_report(args, machine: dict, size: dict) -> dict:
    """The multi-turn case of ``size`` for each model in ``args.models`` (default SmolLM2)."""
    from agentfly_cli.models import resolve_model

    report: dict[str, Any] = {
        "benchmark": "multiturn_tool_train_vs_trl",
        "machine": machine,
        "settings": {
            "recipe": RECIPE,
            "prompts_per_step": size["tasks"],
            "chains_per_prompt": size["group"],
            "steps": size["steps"],
            "max_new_tokens_per_turn": size["max_new"],
            "max_turns": size["max_turns"],
            "trl_max_completion_length": TRL_MAX_COMPLETION,
            "temperature": 1.0,
            "lr": LR,
            "dtype": "float32",
            "device": "cpu",
            "reward": "exact_match on the ANSWER: value",
            "warmup_steps_discarded_from_medians": 1 if size["steps"] > 1 else 0,
            "agentfly_overrides": args.set,
        },
        "notes": NOTES,
        "cases": {},
    }
    for name in (args.models or "smollm2").split(","):
        model_path = str(resolve_model(name))
        report["cases"][name] = run_case(model_path, size, args.skip_trl, args.set)
    machine["load_average_at_end"] = [round(x, 2) for x in os.getloadavg()]
    return report


if __name__ == "__main__":
    sys.exit(side_main())
