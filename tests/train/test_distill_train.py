"""On-policy distillation through ``agentfly train`` on the tiny model: the teacher is checked
at setup (its tokenizer must be the student's: one line otherwise), the runs log
``distill/reverse_kl``, ``only`` ignores the rewards and ``add`` does not, and an agent
program's gateway-captured segments are distilled like the recipe's chains."""

from __future__ import annotations

import io
import json
import shutil
from types import SimpleNamespace

import pytest
import torch
from safetensors.torch import load_file
from typer.testing import CliRunner

from agentfly_cli.cli.app import build_app
from agentfly_cli.models.tiny import build_tiny_model
from agentfly_cli.recipes.loader import load_config
from agentfly_cli.train.checkpoint import CheckpointManager
from agentfly_cli.train.teacher import vocab_difference
from agentfly_cli.train.trainer import Trainer
from tests.train.test_trainer import ON_CPU, recipe  # noqa: F401 (fixture)

runner = CliRunner()


@pytest.fixture(scope="module")
def teacher(tmp_path_factory):
    """A tiny model with the student's tokenizer and other weights (seed 1)."""
    return build_tiny_model(tmp_path_factory.mktemp("teacher"), seed=1)


@pytest.fixture
def swapped(tiny_model, tmp_path):
    """The tiny model with two tokens' ids swapped in its tokenizer: as many tokens, another
    vocabulary."""
    folder = tmp_path / "swapped"
    shutil.copytree(tiny_model, folder)
    data = json.loads((folder / "tokenizer.json").read_text())
    vocab = data["model"]["vocab"]
    vocab["a"], vocab["b"] = vocab["b"], vocab["a"]
    (folder / "tokenizer.json").write_text(json.dumps(data))
    return folder


def train(recipe, *extra: str):  # noqa: F811
    fields = recipe["fields"]
    args = ["train", "calculator", "--model", fields["model"], "--data", fields["data.path"],
            "--reward", fields["reward"], "--quiet"]  # fmt: skip
    for item in [*recipe["sets"], *ON_CPU]:
        args += ["--set", item]
    return runner.invoke(build_app(), [*args, *extra])


def metric_lines(run_dir):
    return [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]


def test_a_distilled_run_logs_the_reverse_kl(recipe, teacher, tmp_path):  # noqa: F811
    run_dir = tmp_path / "run"
    result = train(recipe, "--steps", "2", "--out", str(run_dir),
                   "--set", f"trainer.distill.teacher={teacher}")  # fmt: skip
    assert result.exit_code == 0, result.output
    lines = metric_lines(run_dir)
    assert [line["step"] for line in lines] == [1, 2]
    for line in lines:
        # k1's mean over sampled tokens estimates KL(student || teacher) >= 0; two random
        # models disagree by far more than sampling noise
        assert line["distill/reverse_kl"] > 0.01
        assert line["distill/term_mean"] == pytest.approx(-line["distill/reverse_kl"], rel=1e-5)
        assert line["grad_norm"] > 0


def test_a_teacher_with_another_vocabulary_is_one_line(recipe, swapped, tiny_model):  # noqa: F811
    result = train(recipe, "--steps", "1", "--set", f"trainer.distill.teacher={swapped}")
    assert result.exit_code == 2, result.output
    line = " ".join(result.output.split())
    assert "trainer.distill.teacher" in line and "different tokenizers" in line
    assert str(swapped) in line and str(tiny_model) in line  # both models named
    assert "'a' is id" in line and "the student's tokenizer" in line  # what differs, the fix
    assert "Traceback" not in result.output


def test_a_missing_teacher_folder_is_one_line(recipe, tmp_path):  # noqa: F811
    missing = tmp_path / "no-such-teacher"
    result = train(recipe, "--steps", "1", "--set", f"trainer.distill.teacher={missing}")
    assert result.exit_code == 2, result.output
    line = " ".join(result.output.split())
    assert f"trainer.distill.teacher: no model folder at '{missing}'" in line
    assert "Traceback" not in result.output


def test_vocab_difference_names_the_sizes_or_the_first_moved_token():
    def tokenizer(vocab):
        return SimpleNamespace(get_vocab=lambda: dict(vocab))

    same = tokenizer({"a": 0, "b": 1})
    assert vocab_difference(same, tokenizer({"b": 1, "a": 0})) is None
    assert vocab_difference(same, tokenizer({"a": 0})) == "2 vs 1 tokens"
    moved = vocab_difference(same, tokenizer({"a": 1, "b": 0}))
    assert moved == "token 'a' is id 0 in the student's and id 1 in the teacher's"
    renamed = vocab_difference(same, tokenizer({"a": 0, "c": 1}))
    assert renamed == "token 'b' is id 1 in the student's and absent in the teacher's"


# ---- only vs add: one step, same rollouts, two rewards ----------------------------------------

REWARDS = """
def digits(prediction, trajectory=None, **fields):
    text = "".join(m.get("content") or "" for m in trajectory.messages if m["role"] == "assistant")
    return sum(c.isdigit() for c in text) / max(len(text), 1)


def letters(prediction, trajectory=None, **fields):
    text = "".join(m.get("content") or "" for m in trajectory.messages if m["role"] == "assistant")
    return sum(c.isalpha() for c in text) / max(len(text), 1)
"""


def one_step(recipe, tmp_path, reward: str, mode: str, teacher):  # noqa: F811
    (tmp_path / "two_rewards.py").write_text(REWARDS)
    fields = {**recipe["fields"], "reward": f"{tmp_path / 'two_rewards.py'}:{reward}"}
    sets = [*recipe["sets"], *ON_CPU, "trainer.steps=1", f"trainer.distill.teacher={teacher}",
            f"trainer.distill.mode={mode}"]  # fmt: skip
    run_dir = tmp_path / f"{mode}-{reward}"
    last = Trainer(load_config("calculator", sets, **fields), run_dir=run_dir, console=False)
    history = last.fit().history[-1]
    return history, load_file(str(CheckpointManager(run_dir).path(1) / "model/model.safetensors"))


def test_only_ignores_the_rewards_and_add_does_not(recipe, teacher, tmp_path):  # noqa: F811
    only_digits, w_only_digits = one_step(recipe, tmp_path, "digits", "only", teacher)
    only_letters, w_only_letters = one_step(recipe, tmp_path, "letters", "only", teacher)
    add_digits, w_add_digits = one_step(recipe, tmp_path, "digits", "add", teacher)
    assert only_digits["reward/mean"] != only_letters["reward/mean"]  # the rewards differ
    assert only_digits["distill/reverse_kl"] == add_digits["distill/reverse_kl"]  # same chains
    for name, tensor in w_only_digits.items():  # the term alone: the same update
        assert torch.equal(tensor, w_only_letters[name]), name
    moved = [n for n, t in w_add_digits.items() if not torch.equal(t, w_only_digits[n])]
    assert moved, "add trained as only does: the task's advantages were dropped"


def test_flat_rewards_do_not_warn_that_a_distilled_run_learns_nothing(recipe, teacher, tmp_path):  # noqa: F811
    zero = tmp_path / "zero_reward.py"
    zero.write_text("def zero(prediction, **fields):\n    return 0.0\n")
    fields = {**recipe["fields"], "reward": f"{zero}:zero"}
    sets = [*recipe["sets"], *ON_CPU, "trainer.steps=3", f"trainer.distill.teacher={teacher}"]
    console = io.StringIO()
    run = Trainer(load_config("calculator", sets, **fields), run_dir=tmp_path / "run",
                  console_file=console)  # fmt: skip
    history = run.fit().history
    assert [h["reward/groups_with_spread"] for h in history] == [0.0] * 3  # flat, as in the test
    assert all(h["grad_norm"] > 0 for h in history)  # that learns nothing without a teacher
    assert "steps in a row gave all chains" not in console.getvalue()
