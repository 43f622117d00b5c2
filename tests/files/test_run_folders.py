"""Where runs write: default names, no overwrite, the resume guard (files/run_folders.py)."""

from __future__ import annotations

import re
from types import SimpleNamespace

import pytest

from agentfly_cli.errors import UserError
from agentfly_cli.files.run_folders import training_folder, trajectory_file


def config(out=None, trainer_out=None):
    return SimpleNamespace(name="calculator", out=out, trainer=SimpleNamespace(out=trainer_out))


def test_a_rollout_without_out_gets_a_fresh_file_under_runs(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    first = trajectory_file(config(), "eval")
    assert re.fullmatch(r"runs/calculator-eval-\d{8}-\d{6}\.jsonl", first.as_posix())
    first.parent.mkdir()
    first.write_text("{}\n")
    second = trajectory_file(config(), "eval")
    # the same second: a numbered name, never the existing file
    assert second != first and second.parent == first.parent
    assert trajectory_file(config(out=str(tmp_path / "mine.jsonl")), "eval").name == "mine.jsonl"


def test_an_out_that_is_a_folder_is_a_clear_error(tmp_path):
    with pytest.raises(UserError, match="is a folder; pass a file name"):
        trajectory_file(config(out=str(tmp_path)), "rollout")


def test_a_training_folder_defaults_under_runs_and_prefers_out_over_the_recipe(
    tmp_path, monkeypatch
):
    monkeypatch.chdir(tmp_path)
    default = training_folder(config(), None, resume=False)
    assert re.fullmatch(r"runs/calculator-\d{8}-\d{6}", default.as_posix())
    assert training_folder(config(trainer_out="a"), None, resume=False).name == "a"
    assert training_folder(config(trainer_out="a"), "b", resume=False).name == "b"


def test_the_resume_guard(tmp_path):
    with pytest.raises(UserError, match="--resume needs --out RUN_DIR"):
        training_folder(config(), None, resume=True)
    run = tmp_path / "run"
    assert training_folder(config(), run, resume=False) == run  # new: fine
    (run / "checkpoints" / "step-2").mkdir(parents=True)
    with pytest.raises(UserError, match="already holds a run; add --resume"):
        training_folder(config(), run, resume=False)
    assert training_folder(config(), run, resume=True) == run
    assert training_folder(config(trainer_out=str(run)), None, resume=True) == run
