"""`agentfly train` as 2 DeepSpeed ranks on CPU (gloo, torchrun): rollouts split over the ranks,
ZeRO passes kept in step, checkpoints written together, and --resume. Slow: the first launch
compiles DeepSpeed's shm op (about 47 s, then cached)."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

pytestmark = [
    pytest.mark.slow,
    pytest.mark.timeout(20 * 60),
    pytest.mark.skipif(
        importlib.util.find_spec("deepspeed") is None,
        reason="deepspeed is not installed (make install-deepspeed)",
    ),
]

REWARD = """
def digits(prediction, trajectory=None, **fields):
    text = "".join(m.get("content") or "" for m in trajectory.messages if m["role"] == "assistant")
    return sum(c.isdigit() for c in text) / max(len(text), 1)
"""


TORCHRUN = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "-m"]
# the deepspeed launcher adds --local_rank=N after the module name
DEEPSPEED = [str(Path(sys.executable).parent / "deepspeed"), "--num_gpus", "2", "--module"]


def launch(tmp_path, tiny_model, run_dir, *extra, launcher=TORCHRUN):
    reward = tmp_path / "reward.py"
    reward.write_text(REWARD)
    command = [
        *launcher,
        "agentfly_cli", "train", "calculator", "--model", str(tiny_model),
        "--reward", f"{reward}:digits", "--out", str(run_dir), "--quiet",
        "--set", "trainer.tasks_per_step=2", "--set", "rollout.n=3",
        "--set", "rollout.max_tokens_per_turn=6", "--set", "rollout.max_total_tokens=4096",
        "--set", "trainer.backend.name=deepspeed", "--set", "trainer.backend.lr=0.003",
        "--set", "trainer.telemetry.sinks=[jsonl]", *extra,
    ]  # fmt: skip
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
    done = subprocess.run(command, capture_output=True, text=True, timeout=900, env=env)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return done


@pytest.mark.parametrize("stage", [2, 3])
def test_two_ranks_train_checkpoint_and_resume(tmp_path, tiny_model, stage):
    run_dir = tmp_path / "run"
    zero = f"trainer.backend.zero_stage={stage}"
    done = launch(tmp_path, tiny_model, run_dir, "--set", zero, "--set", "trainer.steps=2")
    assert done.stdout.count("run folder:") == 1  # one report, from rank 0
    shares = sorted(p.name for p in (run_dir / "trajectories").iterdir())
    assert shares == [f"step-00000{s}-rank{r}.jsonl" for s in (1, 2) for r in (0, 1)]
    from agentfly_cli.trajectory import read_trajectories

    # each rank rolled out its own task of the step: positions 0 and 1, each n=3 chains
    for rank in (0, 1):
        records = read_trajectories(run_dir / "trajectories" / f"step-000001-rank{rank}.jsonl")
        assert {t.task_index for t in records} == {rank} and len(records) == 3
    first = run_dir / "checkpoints" / "step-000002" / "model" / "model.safetensors"
    before = load_file(str(first))

    launch(tmp_path, tiny_model, run_dir, "--set", zero, "--set", "trainer.steps=3", "--resume")
    lines = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [line["step"] for line in lines] == [1, 2, 3]
    assert all(line["grad_norm"] > 0 for line in lines)
    after = load_file(str(run_dir / "checkpoints" / "step-000003" / "model" / "model.safetensors"))
    assert any(not torch.equal(before[n], after[n]) for n in before)


def test_the_deepspeed_launcher_works_too_and_ranks_share_the_held_out_eval(tmp_path, tiny_model):
    run_dir = tmp_path / "run"
    zero = "trainer.backend.zero_stage=1"
    evaluation = ["--set", "trainer.eval.every=1",  # the recipe's data.holdout 0.1 tasks
                  "--set", "trainer.eval.limit=3", "--set", "trainer.eval.n=2"]  # fmt: skip
    launch(tmp_path, tiny_model, run_dir, "--set", zero, "--set", "trainer.steps=1",
           *evaluation, launcher=DEEPSPEED)  # fmt: skip
    lines = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    steps = [line for line in lines if "grad_norm" in line]
    assert len(steps) == 1 and steps[0]["grad_norm"] > 0
    assert (run_dir / "checkpoints" / "step-000001" / "model" / "config.json").is_file()
    # 3 eval tasks split 2 + 1 over the ranks; rank 0 logs the merged result, once per eval
    evals = [line for line in lines if "eval/tasks" in line]
    assert [(e["step"], e["eval/tasks"]) for e in evals] == [(0, 3.0), (1, 3.0)]
    from agentfly_cli.trajectory import read_trajectories

    folder = run_dir / "trajectories"
    shares = [len(read_trajectories(folder / f"eval-000001-rank{r}.jsonl")) for r in (0, 1)]
    assert shares == [4, 2]  # n=2 chains per task


def test_one_deepspeed_process_trains_asynchronously(tmp_path, tiny_model):
    """``trainer.mode: async`` on the deepspeed backend (one process: multi-rank async is
    refused): the next batch rolls out on the previous weights during each update."""
    from agentfly_cli.trajectory import read_trajectories

    run_dir = tmp_path / "run"
    async_1 = ["--set", "trainer.mode=async", "--set", "trainer.max_staleness=1"]
    launch(tmp_path, tiny_model, run_dir, "--set", "trainer.steps=3", *async_1,
           launcher=[sys.executable, "-m"])  # fmt: skip
    lines = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [line["step"] for line in lines] == [1, 2, 3]
    assert all(line["grad_norm"] > 0 for line in lines)
    # batch 2 started on version 0 while step 1 trained: it is one update old at step 2
    assert [line["async/staleness_max"] for line in lines][:2] == [0.0, 1.0]
    assert all(line["async/staleness_max"] <= 1 for line in lines)
    assert lines[1]["tis/ratio_min"] < 1.0  # the trainer's policy moved: the ratio corrects
    for step in (1, 2, 3):
        records = read_trajectories(run_dir / "trajectories" / f"step-00000{step}.jsonl")
        versions = {t.policy_version for r in records for t in r.turns if t.sampled_ids}
        assert versions and versions <= {step - 2, step - 1}, (step, versions)
    assert (run_dir / "checkpoints" / "step-000003" / "model" / "config.json").is_file()


# Tasks 0, 2 and 3 get one reward for every chain (advantage 0: their rows are skipped);
# task 1 the share of digits. Step 1: rank 0 (task 0) skips all its rows while rank 1
# trains; step 2 (tasks 2 and 3): both ranks skip all.
MOSTLY_FLAT = """
def mostly_flat(prediction, trajectory=None, **fields):
    if trajectory.task_index != 1:
        return 0.5
    text = "".join(m.get("content") or "" for m in trajectory.messages if m["role"] == "assistant")
    return sum(c.isdigit() for c in text) / max(len(text), 1)
"""


def test_ranks_keep_in_step_when_one_or_all_skip_their_zero_advantage_rows(tmp_path, tiny_model):
    run_dir = tmp_path / "run"
    reward = tmp_path / "flat.py"
    reward.write_text(MOSTLY_FLAT)
    launch(tmp_path, tiny_model, run_dir, "--set", "trainer.backend.zero_stage=3",
           "--set", "trainer.steps=2", "--set", "trainer.shuffle=false",
           "--set", "trainer.save_every=1", "--reward", f"{reward}:mostly_flat")  # fmt: skip
    lines = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [line["step"] for line in lines] == [1, 2]
    # means over the ranks: step 1, rank 0 skipped its 3 rows and rank 1 none; step 2, 3 each
    assert [line["train/skipped_zero_advantage"] for line in lines] == [1.5, 3.0]
    assert lines[0]["grad_norm"] > 0 and lines[1]["grad_norm"] == 0
    assert [line["train/optimizer_steps"] for line in lines] == [1.0, 1.0]
    folder = run_dir / "checkpoints"
    one = load_file(str(folder / "step-000001" / "model" / "model.safetensors"))
    two = load_file(str(folder / "step-000002" / "model" / "model.safetensors"))
    # step 2 had zero gradients, yet AdamW stepped on step 1's momentum, as without skipping
    assert any(not torch.equal(one[n], two[n]) for n in one)
