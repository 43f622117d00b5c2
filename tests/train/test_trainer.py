"""The training loop on the tiny model: it learns, masks exactly, resumes exactly, exports."""

from __future__ import annotations

import json
import logging

import pytest
import torch
from safetensors.torch import load_file
from typer.testing import CliRunner

from agentfly_cli.cli.app import build_app
from agentfly_cli.errors import UserError
from agentfly_cli.recipes.loader import load_config
from agentfly_cli.train.checkpoint import CheckpointManager
from agentfly_cli.train.trainer import Trainer

runner = CliRunner()

# A reward with spread on a random model: the share of sampled characters that are digits.
REWARD_SOURCE = """
def digits(prediction, trajectory=None, **fields):
    text = "".join(m.get("content") or "" for m in trajectory.messages if m["role"] == "assistant")
    return sum(c.isdigit() for c in text) / max(len(text), 1)
"""


@pytest.fixture
def recipe(tmp_path, tiny_model):
    """Overrides for a small run of the calculator recipe on the tiny model."""
    data = tmp_path / "tasks.jsonl"
    rows = [{"question": f"What is {a} + {a + 1}?", "answer": str(2 * a + 1)} for a in range(8)]
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    reward = tmp_path / "digit_reward.py"
    reward.write_text(REWARD_SOURCE)
    return {
        "fields": {"model": str(tiny_model), "data.path": str(data), "reward": f"{reward}:digits"},
        "sets": [
            "rollout.n=3",
            "rollout.max_tokens_per_turn=6",
            "rollout.max_total_tokens=4096",
            "rollout.concurrency=1",  # one request at a time: sampling is reproducible
            "trainer.tasks_per_step=2",
            "trainer.backend.lr=0.003",
            "trainer.telemetry.sinks=[jsonl]",
        ],
    }


# Bitwise equality of weights across a resume is a CPU guarantee: on a GPU (H100, 2026-11-26)
# the resumed run's weights differed, most likely through CUDA's nondeterministic atomics
# (index_add_, embedding backward; not yet confirmed, docs/gpu.md). These tests check the
# bookkeeping, so they run on the CPU.
ON_CPU = ("trainer.backend.device=cpu", "backend.device=cpu")


def make_config(recipe, *sets):
    return load_config("calculator", [*recipe["sets"], *sets], **recipe["fields"])


def weights(run_dir, step):
    folder = CheckpointManager(run_dir).path(step) / "model"
    return load_file(str(folder / "model.safetensors"))


def test_training_changes_the_policy_and_logs_every_metric(recipe, tmp_path):
    run_dir = tmp_path / "run"
    config = make_config(recipe, "trainer.steps=2")
    result = Trainer(config, run_dir=run_dir, console=False).fit()
    assert len(result.history) == 2
    lines = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [line["step"] for line in lines] == [1, 2]
    for key in (
        "reward/mean", "reward/std", "turns/mean", "tools/errors", "finish/length",
        "entropy", "clip_frac", "grad_norm", "time/rollout_s", "time/train_s",
        "throughput/tokens_per_s", "loss/policy", "lr",
    ):  # fmt: skip
        assert key in lines[-1], key
    assert lines[-1]["grad_norm"] > 0
    assert 0 <= lines[-1]["train/padding_fraction"] < 0.5
    assert (run_dir / "plot.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    trained = weights(run_dir, 2)
    from transformers import AutoModelForCausalLM

    initial = AutoModelForCausalLM.from_pretrained(recipe["fields"]["model"]).state_dict()
    changed = [n for n, t in trained.items() if not torch.equal(t, initial[n])]
    assert changed, "two steps with nonzero advantages left every weight unchanged"


def test_resume_continues_exactly(recipe, tmp_path):
    """4 steps in one run == 2 steps, then --resume, then 2 more: identical weights."""
    straight = tmp_path / "straight"
    Trainer(make_config(recipe, "trainer.steps=4", *ON_CPU), run_dir=straight, console=False).fit()

    split = tmp_path / "split"
    first = make_config(recipe, "trainer.steps=4", "trainer.save_every=2", *ON_CPU)
    Trainer(first, run_dir=split, console=False).fit(stop_after=2)  # stops as if killed
    assert CheckpointManager(split).steps() == [2]
    Trainer(first, run_dir=split, resume=True, console=False).fit()

    a, b = weights(straight, 4), weights(split, 4)
    assert a.keys() == b.keys()
    differing = [name for name in a if not torch.equal(a[name], b[name])]
    assert not differing, f"resumed weights differ: {differing[:3]}"
    steps = [json.loads(x)["step"] for x in (split / "metrics.jsonl").read_text().splitlines()]
    assert steps == [1, 2, 3, 4]


def test_resume_with_a_value_head_continues_exactly(recipe, tmp_path):
    """GAE: the checkpoint keeps the value head and its optimizer (``value_head``,
    ``value_optimizer``); without them the resumed advantages, and so the weights, differ."""
    gae = ("trainer.steps=3", "trainer.algorithm.advantage=gae", *ON_CPU)
    straight = tmp_path / "straight"
    Trainer(make_config(recipe, *gae), run_dir=straight, console=False).fit()

    split = tmp_path / "split"
    first = make_config(recipe, *gae, "trainer.save_every=2")
    Trainer(first, run_dir=split, console=False).fit(stop_after=2)
    extra = torch.load(CheckpointManager(split).path(2) / "trainer_state.pt", weights_only=False)[
        "extra"
    ]
    assert {"value_head", "value_optimizer"} <= extra.keys()
    Trainer(first, run_dir=split, resume=True, console=False).fit()

    a, b = weights(straight, 3), weights(split, 3)
    differing = [name for name in a if not torch.equal(a[name], b[name])]
    assert not differing, f"resumed weights differ: {differing[:3]}"
    heads = [
        torch.load(CheckpointManager(run).path(3) / "trainer_state.pt", weights_only=False)
        for run in (straight, split)
    ]
    for name, tensor in heads[0]["extra"]["value_head"].items():
        assert torch.equal(tensor, heads[1]["extra"]["value_head"][name]), name


def test_export_writes_a_loadable_model(recipe, tmp_path):
    run_dir = tmp_path / "run"
    Trainer(make_config(recipe, "trainer.steps=1"), run_dir=run_dir, console=False).fit()
    out = tmp_path / "exported"
    result = runner.invoke(build_app(), ["export", str(run_dir), str(out)])
    assert result.exit_code == 0, result.output
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(out)
    assert AutoTokenizer.from_pretrained(out).chat_template
    exported = model.state_dict()
    saved = weights(run_dir, 1)
    assert all(torch.equal(exported[n], t) for n, t in saved.items())
    again = runner.invoke(build_app(), ["export", str(run_dir), str(out)])
    assert again.exit_code == 2 and "--force" in again.output


def one_line_error(result) -> str:
    assert result.exit_code == 2, result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1, result.output
    return lines[0]


@pytest.mark.parametrize(
    ("override", "expected"),
    [
        ("trainer.algorithm.advantag=grpo", "did you mean 'advantage'?"),
        ("trainer.algorithm.advantag=grpo", "allowed: advantage, policy_loss"),
        ("trainer.steps=many", "trainer.steps: Input should be a valid integer"),
        ("trainer.backend.name=jax", "unknown train backend 'jax'; available: deepspeed, torch"),
        ("trainer.algorithm.loss_agg=mean", "'token-mean', 'seq-mean-token-mean'"),
        ("trainer.algorithm.clip_ratio_c=0.5", "clip_ratio_c must be > 1"),
        ("trainer.algorithm.advantage=grpoo", "unknown advantage estimator 'grpoo'"),
        ("trainer.mode=asynch", "trainer.mode: Input should be 'sync' or 'async'"),
        ("trainer.max_staleness=-1", "trainer.max_staleness: Input should be greater than"),
        ("trainer.timeouts.weight_sync_s=0", "trainer.timeouts.weight_sync_s: Input should be"),
    ],
)
def test_config_errors_are_one_line_with_exit_2(tiny_model, override, expected):
    result = runner.invoke(
        build_app(), ["train", "--model", str(tiny_model), "--set", override, "--quiet"]
    )
    assert expected in one_line_error(result)


@pytest.mark.parametrize(
    ("sets", "expected"),
    [
        # the scripted backend replays text: it cannot follow the trained policy
        (["backend.name=scripted"], "the scripted rollout backend cannot take new weights"),
        # adapter pushes need a backend that takes them (the flag, not the method, decides)
        (
            ["trainer.backend.lora.r=4", "trainer.backend.sync=adapter", "backend.dtype=float32"],
            None,
        ),
    ],
)
def test_the_trainer_checks_the_rollout_backends_capability_flags(
    recipe, tmp_path, monkeypatch, sets, expected
):
    from agentfly_cli.backends.hf import HFBackend

    script = tmp_path / "script.jsonl"
    script.write_text("")
    if expected is None:  # an hf backend that says it takes no adapters is refused
        monkeypatch.setattr(HFBackend, "takes_adapters", False)
        expected = "trainer.backend.sync: adapter needs a rollout backend that takes LoRA"
    result = runner.invoke(
        build_app(),
        [
            "train",
            "--model",
            recipe["fields"]["model"],
            "--data",
            recipe["fields"]["data.path"],
            "--reward",
            recipe["fields"]["reward"],
            "--out",
            str(tmp_path / "run"),
            "--set",
            f"backend.script={script}",
            *[arg for s in [*recipe["sets"], *sets] for arg in ("--set", s)],
            "--quiet",
        ],
    )
    assert expected in one_line_error(result)


def test_resume_without_a_checkpoint_is_a_clear_error(recipe, tmp_path):
    result = runner.invoke(
        build_app(),
        ["train", "--model", recipe["fields"]["model"], "--out", str(tmp_path / "x"), "--resume"],
    )
    assert "no checkpoint" in one_line_error(result)


@pytest.mark.parametrize(
    "sets",
    [
        # PPO with a value head, several updates per batch, dual clip, KL as a loss
        [
            "trainer.algorithm.advantage=gae",
            "trainer.epochs=2",
            "trainer.mini_batches=2",
            "trainer.algorithm.clip_ratio_c=3.0",
            "trainer.algorithm.kl_coef=0.1",
        ],
        # RLOO, GSPO, KL in the reward, entropy bonus, TIS, Dr.GRPO aggregation
        [
            "trainer.algorithm.advantage=rloo",
            "trainer.algorithm.policy_loss=gspo",
            "trainer.algorithm.kl_coef=0.05",
            "trainer.algorithm.kl_in_reward=true",
            "trainer.algorithm.entropy_coef=0.01",
            "trainer.algorithm.tis_cap=2.0",
            "trainer.algorithm.loss_agg=seq-mean-token-sum-norm",
        ],
        # REINFORCE++ with gradient checkpointing (no shared prefix) and a cosine schedule
        [
            "trainer.algorithm.advantage=reinforce_pp_baseline",
            "trainer.backend.gradient_checkpointing=true",
            "trainer.backend.lr_schedule=cosine",
            "trainer.backend.warmup_steps=1",
            "trainer.algorithm.dynamic_sampling=true",
        ],
        # GiGPO: credit per turn in step groups, beside GRPO's per episode
        ["trainer.algorithm.advantage=gigpo", "trainer.algorithm.turn_gamma=0.9"],
        # LoRA: the rollout backend gets merged weights pushed after every step
        ["trainer.backend.lora={r: 4, alpha: 8}", "trainer.backend.lr=0.01"],
        # LoRA: the rollout backend gets only the adapters
        [
            "trainer.backend.lora={r: 4, alpha: 8}",
            "trainer.backend.sync=adapter",
            "trainer.backend.lr=0.01",
        ],
        # async, one update of staleness, adapters pushed while rollouts run, masked IS
        [
            "trainer.mode=async",
            "trainer.max_staleness=1",
            "trainer.backend.lora={r: 4, alpha: 8}",
            "trainer.backend.sync=adapter",
            "trainer.backend.lr=0.01",
            "trainer.algorithm.tis_cap=2.0",
            "trainer.algorithm.tis_mode=mask",
        ],
    ],
    ids=[
        "gae-kl-loss",
        "rloo-gspo-kl-reward",
        "reinforcepp-checkpointing",
        "gigpo",
        "lora-merge",
        "lora-adapter",
        "async-lora-adapter-masked-tis",
    ],
)
def test_algorithm_and_backend_combinations_train(recipe, tmp_path, sets):
    run_dir = tmp_path / "run"
    config = make_config(recipe, "trainer.steps=2", *sets)
    trainer = Trainer(config, run_dir=run_dir, console=False)
    result = trainer.fit()
    last = result.history[-1]
    assert last["grad_norm"] > 0 and last["train/optimizer_steps"] >= 1
    # a reference model exists only when the KL has a weight
    assert (trainer.reference is not None) == (config.trainer.algorithm.kl_coef > 0)
    if config.trainer.algorithm.kl_coef and not config.trainer.algorithm.kl_in_reward:
        assert "kl" in last
    if config.trainer.backend.lora is not None:
        assert not trainer.shared_model
        kind = "adapter_updates" if config.trainer.backend.sync == "adapter" else "weight_updates"
        assert trainer.engine.backend.stats[kind] == 2
    if config.trainer.algorithm.advantage == "gigpo":  # every chain's first turn answered
        assert last["adv/turns"] >= last["train/trajectories"]  # its task's prompt
        assert 0 < last["adv/turns_in_step_groups"] <= 1
    if config.trainer.algorithm.tis_cap is not None:
        assert 0 < last["tis/ratio_min"] <= last["tis/ratio_mean"] <= last["tis/ratio_max"]
        assert 0 <= last["tis/outside_frac"] <= 1 and 0 < last["tis/weight_mean"] <= 2.0
    assert (run_dir / "checkpoints" / "step-000002" / "model" / "config.json").is_file()


def test_a_group_of_one_chain_is_a_config_error(tiny_model):
    result = runner.invoke(
        build_app(), ["train", "--model", str(tiny_model), "--n", "1", "--quiet"]
    )
    assert "set rollout.n to 2 or more" in one_line_error(result)


def test_one_step_numbering_everywhere(recipe, tmp_path):
    """Steps are numbered from 1 in the console, metrics.jsonl, trajectory files, group ids,
    checkpoints and the plot; a held-out eval carries the steps done (0: before step 1)."""
    import io

    from agentfly_cli.telemetry.sinks import read_metrics

    run_dir = tmp_path / "run"
    config = make_config(
        recipe,
        "trainer.steps=3",
        "trainer.save_every=1",
        "trainer.keep_checkpoints=3",
        "trainer.eval.every=2",
        "data.holdout=0.25",
        "trainer.eval.n=2",
    )
    console = io.StringIO()
    result = Trainer(config, run_dir=run_dir, console_file=console).fit()
    text = console.getvalue()
    assert [line.split(" |")[0] for line in text.splitlines() if line.startswith("step ")] == [
        "step 1/3",
        "step 2/3",
        "step 3/3",
    ]
    evals = [line.split(" |")[0] for line in text.splitlines() if line.startswith("eval ")]
    assert evals == ["eval before step 1", "eval after 2 steps", "eval after 3 steps"]
    records = read_metrics(run_dir / "metrics.jsonl")
    assert [r["step"] for r in records if "reward/mean" in r] == [1, 2, 3]
    assert [r["step"] for r in records if "eval/reward_mean" in r] == [0, 2, 3]
    assert [e["updates"] for e in result.evals] == [0, 2, 3]
    files = sorted(p.name for p in (run_dir / "trajectories").iterdir())
    assert files == [
        "eval-000000.jsonl", "eval-000002.jsonl", "eval-000003.jsonl",
        "step-000001.jsonl", "step-000002.jsonl", "step-000003.jsonl",
    ]  # fmt: skip
    from agentfly_cli.trajectory import read_trajectories

    for step in (1, 2, 3):
        groups = {
            t.group_id for t in read_trajectories(run_dir / f"trajectories/step-{step:06d}.jsonl")
        }
        assert {g.split(":")[0] for g in groups} == {f"s{step}"}
    assert CheckpointManager(run_dir).steps() == [1, 2, 3]
    from agentfly_cli.telemetry.sinks import plot_figure

    reward_axis = plot_figure(records).axes[0]
    train_line, eval_line = reward_axis.get_lines()
    assert list(train_line.get_xdata()) == [1, 2, 3]
    assert list(eval_line.get_xdata()) == [0, 2, 3]
    assert " kl " not in text  # no KL in this run: no kl column in the live bar


def test_progress_inside_a_step_counts_chains_tokens_and_micro_batches(recipe, tmp_path):
    from agentfly_cli.telemetry.step_progress import StepProgress

    class Recorder(StepProgress):
        def __init__(self):
            super().__init__()
            self.ended = []

        def end(self):
            self.ended.append((self.step, self.phase, self.done, self.total, self.token_count()))
            super().end()

    config = make_config(recipe, "trainer.steps=2", "trainer.micro_batch_tokens=64")
    trainer = Trainer(config, run_dir=tmp_path / "run", console=False)
    trainer.progress = recorder = Recorder()
    result = trainer.fit()
    phases = [(step, phase) for step, phase, *_ in recorder.ended]
    assert phases == [(1, "rollout"), (1, "train"), (2, "rollout"), (2, "train")]
    for (_, _, done, total, tokens), metrics in zip(
        recorder.ended[::2], result.history, strict=True
    ):
        assert done == total == 2 * 3  # tasks_per_step x n chains
        assert tokens == metrics["tokens/sampled"] > 0
    for _, _, done, total, tokens in recorder.ended[1::2]:
        assert done == total > 1  # several micro-batches of at most 64 tokens
        assert tokens > 0


def test_the_update_runs_without_the_rollouts_stored_kv(recipe, tmp_path, monkeypatch, caplog):
    """The hf backend keeps each finished request's KV for the chain's next turn; with one
    model for both, it goes before the update (it held up to 1.5 GB of SmolLM2 KV there) and
    after a held-out eval (no training chain extends an eval chain)."""
    from agentfly_cli.train.steps.sync import SyncSteps

    class Probe(Trainer):
        at_update = []
        at_rollout = []

        def _prepare(self, trajectories, metrics):
            self.at_update.append(self.engine.backend._batch.prefix.stored_tokens)
            return super()._prepare(trajectories, metrics)

    rollout = SyncSteps.rollout

    async def probed_rollout(steps, step, picked):
        trainer = steps.trainer
        trainer.at_rollout.append(trainer.engine.backend._batch.prefix.stored_tokens)
        return await rollout(steps, step, picked)

    monkeypatch.setattr(SyncSteps, "rollout", probed_rollout)
    # trainer.eval.holdout, the deprecated alias of data.holdout: one warning line in the run
    with caplog.at_level(logging.WARNING, logger="agentfly_cli.settings"):
        config = make_config(
            recipe, "trainer.steps=1", "trainer.eval.every=1", "trainer.eval.holdout=0.25"
        )
        trainer = Probe(config, run_dir=tmp_path / "run", console=False)
        trainer.fit()
    warned = [r.getMessage() for r in caplog.records if "deprecated" in r.getMessage()]
    assert warned == [
        "trainer.eval.holdout is deprecated; use data.holdout (the same share, held out of "
        "every phase, drawn by data.holdout_seed 0)"
    ]
    assert config.data.holdout == 0.25 and len(trainer.tasks.split.eval) == 2
    assert trainer.shared_model and trainer.at_update == [0]
    assert trainer.at_rollout == [0]  # the eval before step 1 left none behind


def test_a_checkpoint_holds_the_model_weights_once(recipe, tmp_path):
    """model/ has the weights; backend/ only optimizer, schedule and RNG (was: the weights
    again, 3x the model's size instead of 2x for AdamW's two moments)."""
    run_dir = tmp_path / "run"
    # float32: in bfloat16 (a GPU's auto) the optimizer keeps float32 master weights, a third
    # copy that is not a duplicate
    config = make_config(recipe, "trainer.steps=1", "trainer.backend.dtype=float32")
    Trainer(config, run_dir=run_dir, console=False).fit()
    folder = CheckpointManager(run_dir).path(1)
    model_bytes = (folder / "model" / "model.safetensors").stat().st_size
    state_bytes = (folder / "backend" / "train_state.pt").stat().st_size
    assert state_bytes < 2.2 * model_bytes, (state_bytes, model_bytes)
    state = torch.load(folder / "backend" / "train_state.pt", weights_only=True)
    assert "model" not in state and state["weights_in"] == "../model"


def test_save_only_model_writes_the_model_alone_and_refuses_to_resume(recipe, tmp_path):
    run_dir = tmp_path / "run"
    config = make_config(recipe, "trainer.steps=1", "trainer.save_only_model=true")
    Trainer(config, run_dir=run_dir, console=False).fit()
    folder = CheckpointManager(run_dir).path(1)
    assert sorted(p.name for p in folder.iterdir()) == ["model", "trainer_state.pt"]
    exported = runner.invoke(build_app(), ["export", str(run_dir), str(tmp_path / "out")])
    assert exported.exit_code == 0, exported.output
    more = make_config(recipe, "trainer.steps=2", "trainer.save_only_model=true")
    with pytest.raises(UserError, match="holds the model only") as error:
        Trainer(more, run_dir=run_dir, resume=True, console=False).fit()
    assert "\n" not in str(error.value) and f"--model {folder / 'model'}" in str(error.value)
