"""A run's outputs are published all at once: a failure leaves OUT as it was
(agentfly_cli/files/staged_folder.py), and sft's reward filter is never silently off."""

from __future__ import annotations

import errno

import pytest

from agentfly_cli.errors import UserError
from agentfly_cli.files.staged_folder import staged_folder
from agentfly_cli.train.sft.fine_tune import select_chains
from agentfly_cli.trajectory import Trajectory


def test_outputs_appear_only_when_the_run_ends_and_replace_the_earlier_ones(tmp_path):
    out = tmp_path / "out"
    (out / "model").mkdir(parents=True)
    (out / "model" / "old.bin").write_text("old")
    (out / "heldout_tasks.jsonl").write_text("stale")
    (out / "notes.txt").write_text("the user's")
    with staged_folder(out, replaces=("model", "heldout_tasks.jsonl")) as stage:
        (stage / "model").mkdir()
        (stage / "model" / "new.bin").write_text("new")
        (stage / "sft.json").write_text("{}")
        assert not (out / "sft.json").exists()  # nothing published yet
    assert sorted(p.name for p in out.iterdir()) == ["model", "notes.txt", "sft.json"]
    assert [p.name for p in (out / "model").iterdir()] == ["new.bin"]


@pytest.mark.parametrize(
    "error", [KeyboardInterrupt(), ValueError("a bug"), OSError(errno.ENOSPC, "No space left")]
)
def test_a_failed_run_leaves_no_folder_it_made_and_nothing_in_an_existing_one(tmp_path, error):
    new = tmp_path / "a" / "b" / "out"
    with pytest.raises((type(error), UserError)):
        with staged_folder(new) as stage:
            (stage / "metrics.jsonl").write_text("{}\n")
            raise error
    assert list(tmp_path.iterdir()) == []  # not even a/ and a/b/
    existing = tmp_path / "existing"
    existing.mkdir()
    (existing / "notes.txt").write_text("keep")
    with pytest.raises((type(error), UserError)):
        with staged_folder(existing, replaces=("notes.txt",)) as stage:
            (stage / "model").mkdir()
            raise error
    assert [p.name for p in existing.iterdir()] == ["notes.txt"]


def test_a_full_disk_is_one_line_naming_the_folder(tmp_path):
    with pytest.raises(UserError, match="ran out of space.*holds no output of this run"):
        with staged_folder(tmp_path / "out"):
            raise OSError(errno.ENOSPC, "No space left on device")


def test_a_chain_whose_reward_is_nan_is_below_any_min_reward():
    chains = [Trajectory(ids=[1, 2], loss_mask=[0, 1], reward=r) for r in (1.0, float("nan"))]
    kept, dropped = select_chains(chains, 0.5)
    assert [t.reward for t in kept] == [1.0] and dropped["below_min_reward"] == 1


def test_a_failed_swap_while_publishing_puts_the_earlier_folder_back(tmp_path, monkeypatch):
    """Publishing moves the earlier model aside, then the new one in: when that second rename
    failed, OUT had no model at all (the earlier one sat in a hidden .old- folder)."""
    import os

    from agentfly_cli.files import staged_folder as module

    out = tmp_path / "out"
    (out / "model").mkdir(parents=True)
    (out / "model" / "old.bin").write_text("old")
    real_replace = os.replace

    def replace(src, dst):
        if "staging" in str(src) and str(dst).endswith("model"):
            raise OSError(errno.EXDEV, "Invalid cross-device link")
        return real_replace(src, dst)

    monkeypatch.setattr(module.os, "replace", replace)
    with pytest.raises(UserError, match="cannot write.*may hold part of this run's output"):
        with staged_folder(out, replaces=("model",)) as stage:
            (stage / "model").mkdir()
            (stage / "model" / "new.bin").write_text("new")
    assert sorted(p.name for p in out.iterdir()) == ["model"]
    assert [p.name for p in (out / "model").iterdir()] == ["old.bin"]
