"""``agentfly sft``: which chains are kept, the hold-out split, the exact masked cross-entropy,
a run on scripted calculator solutions with the tiny model, and the CLI's errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from agentfly_cli.errors import UserError
from agentfly_cli.train.sft.fine_tune import (
    SFTRunner,
    build_settings,
    check_tokenizer,
    fine_tune,
    select_chains,
    split_by_task,
    train_rows,
)
from agentfly_cli.trajectory import Trajectory, read_trajectories
from tests.helpers.recipe_checks import agentfly, write_jsonl

ROOT = Path(__file__).resolve().parents[2]
CALCULATOR = ROOT / "agentfly_cli" / "recipes" / "data" / "calculator.jsonl"
ROWS = [json.loads(line) for line in CALCULATOR.read_text().splitlines()[:24]]


def chain(group: str, *, reward: float | None = 1.0, mask=(0, 0, 1, 1), exact=True) -> Trajectory:
    ids = list(range(5, 5 + len(mask)))
    return Trajectory(
        ids=ids, loss_mask=list(mask), reward=reward, group_id=group, token_exact=exact
    )


@pytest.fixture(scope="module")
def demos(tiny_model, tmp_path_factory) -> Path:
    """Scripted calculator solutions (CALC, then ANSWER) for 24 tasks, 2 chains each, in the
    tiny model's tokens; the last 4 tasks answer wrong (reward 0)."""
    folder = tmp_path_factory.mktemp("demos")
    script = [
        {
            "responses": [
                f"CALC: {r['question'].removeprefix('What is ').rstrip('?')}",
                f"ANSWER: {r['answer'] if i < 20 else 'no idea'}",
            ]
        }
        for i, r in enumerate(ROWS)
    ]
    out = folder / "demos.jsonl"
    result = agentfly(
        "rollout", "calculator", "--model", tiny_model, "--backend", "scripted",
        "--script", write_jsonl(folder / "script.jsonl", script),
        "--data", write_jsonl(folder / "tasks.jsonl", ROWS), "--n", "2", "--out", out, "--quiet",
        "--set", "rollout.max_tokens_per_turn=64",  # the tiny BPE spends more tokens
        "--set", "rollout.max_total_tokens=4096",
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    rewards = [t.reward for t in read_trajectories(out)]
    assert rewards == [1.0] * 40 + [0.0] * 8
    return out


# -- choosing and splitting ----------------------------------------------------------------------
def test_select_chains_keeps_exact_trained_chains_that_scored_enough():
    chains = [
        chain("a"),
        chain("b", exact=False),
        chain("c", mask=(0, 0, 0, 0)),
        chain("d", reward=0.5),
        chain("e", reward=None),
    ]
    kept, dropped = select_chains(chains, None)
    assert [t.group_id for t in kept] == ["a", "d", "e"]
    assert dropped == {"not_token_exact": 1, "no_trained_tokens": 1, "below_min_reward": 0}
    kept, dropped = select_chains(chains, 1.0)
    assert [t.group_id for t in kept] == ["a"]
    assert dropped["below_min_reward"] == 2  # 0.5, and no reward at all


def test_split_by_task_keeps_a_task_chains_together_and_is_seeded():
    chains = [chain(f"t{i // 3}") for i in range(30)]  # 10 tasks x 3 chains
    train, held = split_by_task(chains, 0.2, seed=0)
    held_tasks = {t.group_id for t in held}
    assert len(held_tasks) == 2 and len(held) == 6
    assert not held_tasks & {t.group_id for t in train}
    assert {t.group_id for t in split_by_task(chains, 0.2, seed=0)[1]} == held_tasks
    picks = [split_by_task(chains, 0.2, seed=s)[1] for s in range(8)]
    others = {frozenset(t.group_id for t in held) for held in picks}
    assert len(others) > 1  # the seed picks the tasks
    assert split_by_task(chains, 0.0, seed=0) == (chains, [])
    assert len({t.group_id for t in split_by_task(chains, 0.01, seed=0)[1]}) == 1  # at least one
    two = chains[:6]
    assert len({t.group_id for t in split_by_task(two, 0.9, seed=0)[0]}) == 1  # never all


def test_settings_keep_the_sft_defaults_under_overrides():
    settings = build_settings(["backend.weight_decay=0.1"], epochs=3, **{"backend.lr": 1e-4})
    assert settings.epochs == 3 and settings.backend.lr == 1e-4
    assert settings.backend.lr_schedule == "cosine" and settings.backend.weight_decay == 0.1
    with pytest.raises(UserError, match="backend.lrr: unknown key; did you mean 'lr'"):
        build_settings(["backend.lrr=1"])
    with pytest.raises(UserError, match="holdout"):
        build_settings(holdout=1.5)


# -- the loss ------------------------------------------------------------------------------------
def test_the_loss_is_the_cross_entropy_of_the_masked_tokens_only(tiny_model, demos):
    """The runner's mean loss equals -log p of exactly the loss-masked tokens, computed the
    plain way: one full forward pass per chain, no prefix sharing. The runner forwards the
    prompt prefix that all six chains (three tasks) share once."""
    from agentfly_cli.train.tensors.batch import plan_micro_batches

    chains = read_trajectories(demos)[:6]
    rows = train_rows(chains)
    (plan,) = plan_micro_batches(rows, range(6), max_tokens=4096)
    assert plan.batch.repeats.tolist() == [6]  # one prefix pass for the three tasks' chains
    assert plan.batch.prefix_ids.shape[1] >= 16
    # float32 on any device (a GPU's auto is bfloat16, too coarse for rel=1e-4)
    settings = build_settings(
        ["backend.total_steps=1", "backend.dtype=float32"], micro_batch_tokens=256
    )
    runner = SFTRunner(tiny_model, settings)
    total, count = 0.0, 0
    with torch.no_grad():
        for t in chains:
            ids = torch.tensor([t.ids], device=runner.train.device)
            logits = runner.train.model(input_ids=ids).logits[0, :-1].float()
            logprobs = torch.log_softmax(logits, -1).gather(1, ids[0, 1:, None])[:, 0]
            trained = torch.tensor(t.loss_mask[1:], dtype=torch.bool, device=ids.device)
            total -= float(logprobs[trained].sum())
            count += int(trained.sum())
    assert count == sum(sum(t.loss_mask) for t in chains)
    assert runner.mean_loss(rows) == pytest.approx(total / count, rel=1e-4)


# -- a run ---------------------------------------------------------------------------------------
def test_fine_tune_learns_the_demos_and_writes_a_loadable_model(tiny_model, demos, tmp_path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    out = tmp_path / "sft"
    settings = build_settings(
        ["telemetry.sinks=[jsonl]"], epochs=3, min_reward=1.0, holdout=0.2, **{"backend.lr": 3e-3}
    )
    result = fine_tune([demos], str(tiny_model), out, settings, console=False)
    assert result.kept == 40 and result.dropped["below_min_reward"] == 8
    assert (result.train_chains, result.heldout_chains, result.heldout_tasks) == (32, 8, 4)
    assert result.optimizer_steps == 3 * 4  # 32 chains in batches of 8, 3 epochs
    assert result.heldout_loss_after < 0.8 * result.heldout_loss_before  # learned, not memorised
    summary = json.loads((out / "sft.json").read_text())
    assert summary["heldout_loss_after"] == result.heldout_loss_after

    held = [json.loads(x) for x in (out / "heldout_tasks.jsonl").read_text().splitlines()]
    assert len(held) == 4 and all(set(r) == {"id", "question", "answer", "kind"} for r in held)
    assert {r["id"] for r in held} <= {r["id"] for r in ROWS[:20]}  # only kept chains' tasks
    trained = [json.loads(x) for x in (out / "train_tasks.jsonl").read_text().splitlines()]
    assert len(trained) == 16 and not {r["id"] for r in trained} & {r["id"] for r in held}

    records = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    steps = [r["step"] for r in records if "sft/loss" in r]
    assert steps == list(range(1, 13))  # numbered from 1; notes at 0 (before) and 12
    notes = [(r["step"], r["sft/heldout_loss"]) for r in records if "sft/loss" not in r]
    assert notes == [(0, result.heldout_loss_before), (12, result.heldout_loss_after)]
    assert (out / "plot.png").stat().st_size > 0

    model = AutoModelForCausalLM.from_pretrained(result.model_dir)
    tokenizer = AutoTokenizer.from_pretrained(result.model_dir)
    assert tokenizer.chat_template and model.config.vocab_size >= len(tokenizer)
    before = AutoModelForCausalLM.from_pretrained(tiny_model)
    changed = [
        name
        for (name, a), (_, b) in zip(
            model.named_parameters(), before.named_parameters(), strict=True
        )
        if not torch.equal(a, b)
    ]
    assert changed


def test_lora_fine_tuning_writes_the_merged_model(tiny_model, demos, tmp_path):
    from transformers import AutoModelForCausalLM

    settings = build_settings(
        ["telemetry.sinks=[jsonl]", "backend.lora.r=4"], epochs=1, **{"backend.lr": 1e-2}
    )
    result = fine_tune([demos], str(tiny_model), tmp_path / "sft", settings, console=False)
    assert result.heldout_loss_after < result.heldout_loss_before
    merged = AutoModelForCausalLM.from_pretrained(result.model_dir)
    assert not any("lora" in name for name, _ in merged.named_parameters())
    base = AutoModelForCausalLM.from_pretrained(tiny_model)
    weight = "model.layers.0.self_attn.q_proj.weight"  # a LoRA target: changed by the merge
    assert not torch.equal(merged.state_dict()[weight], base.state_dict()[weight])


def test_the_model_defaults_to_the_one_the_chains_were_made_for(tiny_model, demos, tmp_path):
    settings = build_settings(["telemetry.sinks=[jsonl]"], holdout=0.0)
    result = fine_tune([demos], None, tmp_path / "sft", settings, console=False)
    assert result.heldout_tasks == 0 and result.heldout_loss_before is None
    assert not (tmp_path / "sft" / "heldout_tasks.jsonl").exists()
    assert result.optimizer_steps == 2 * 6  # 48 chains, batches of 8, 2 epochs


def test_chains_of_another_vocabulary_are_refused(tiny_model, demos):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tiny_model)
    chains = read_trajectories(demos)
    check_tokenizer(chains, tokenizer, tiny_model)  # the same vocabulary: accepted
    chains[0].ids[3] = len(tokenizer) + 5
    chains[0].meta = {}
    with pytest.raises(UserError, match="beyond the model's vocabulary"):
        check_tokenizer(chains, tokenizer, tiny_model)


# -- the command ---------------------------------------------------------------------------------
@pytest.mark.parametrize("tensorboard", ["installed", "missing"])
def test_cli_sft_prints_no_tensorboard_warning_where_the_extra_is_missing(
    tiny_model, demos, tmp_path, monkeypatch, tensorboard
):
    """As `train` (tests/meta/test_meta.py): the default tensorboard sink is skipped quietly
    without the `tensorboard` extra; a run that names it is told."""
    import sys

    if tensorboard == "missing":
        for name in ("tensorboard", "torch.utils.tensorboard"):
            monkeypatch.setitem(sys.modules, name, None)  # as if it were not installed
    out = tmp_path / "sft"
    result = agentfly("sft", demos, "--out", out, "--model", tiny_model, "--epochs", "1",
                      "--quiet")  # fmt: skip
    assert result.exit_code == 0, result.output
    assert "tensorboard" not in result.output.lower(), result.output
    assert (out / "tensorboard").exists() == (tensorboard == "installed")


def test_cli_sft_then_rl_from_the_fine_tuned_model(tiny_model, demos, tmp_path):
    out = tmp_path / "sft"
    result = agentfly(
        "sft", demos, "--out", out, "--model", tiny_model, "--epochs", "1", "--min-reward", "1",
        "--set", "telemetry.sinks=[jsonl]", "--json",
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    assert summary["model_dir"] == str(out / "model") and summary["kept"] == 40
    again = agentfly("sft", demos, "--out", out, "--model", tiny_model)
    assert again.exit_code == 2 and "exists; pass --force" in again.output
    human = agentfly(
        "sft", demos, "--out", out, "--model", tiny_model, "--force", "--quiet", "--epochs", "1",
        "--set", "telemetry.sinks=[jsonl]",
    )  # fmt: skip
    assert human.exit_code == 0, human.output
    assert "held-out loss" in human.stdout and "agentfly eval RECIPE" in human.stdout
    run = agentfly(
        "train", "calculator", "--model", out / "model", "--out", tmp_path / "rl", "--quiet",
        "--data", out / "heldout_tasks.jsonl", "--steps", "1", "--n", "2",
        "--set", "trainer.tasks_per_step=2", "--set", "trainer.telemetry.sinks=[jsonl]",
    )  # fmt: skip
    assert run.exit_code == 0, run.output
    assert (tmp_path / "rl" / "metrics.jsonl").is_file()


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (["missing.jsonl"], "trajectory file 'missing.jsonl' not found"),
        (["{demos}", "--min-reward", "2"], "no chain to learn from (48 below min reward)"),
        (["{demos}", "--set", "epoch=3"], "epoch: unknown key; did you mean 'epochs'?"),
        (["{demos}", "--set", "backend.name=deepspeed"], "sft trains with the torch backend only"),
        (["{demos}", "--model", "smollm2x"], "smollm2x"),
    ],
)
def test_cli_errors_are_one_line_with_exit_2(demos, tmp_path, arguments, message):
    arguments = [str(demos) if a == "{demos}" else a for a in arguments]
    result = agentfly("sft", *arguments, "--out", tmp_path / "o", "--quiet")
    assert result.exit_code == 2, result.output
    assert message in result.output
    assert len(result.output.strip().splitlines()) == 1
    assert not (tmp_path / "o" / "model").exists()


def test_sft_settings_that_name_the_tensorboard_sink_are_told_when_it_is_missing():
    from agentfly_cli.telemetry.sinks import default_optional_sinks
    from agentfly_cli.train.sft.fine_tune import build_settings

    assert default_optional_sinks(build_settings().telemetry) == ("tensorboard",)
    named = build_settings(["telemetry.sinks=[jsonl,tensorboard]"]).telemetry
    assert default_optional_sinks(named) == ()
