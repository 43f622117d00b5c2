"""A checkpoint that cannot be written because the disk is full is one clear error."""

from __future__ import annotations

import errno
from collections import namedtuple
from pathlib import Path

import pytest

from agentfly_cli.errors import UserError
from agentfly_cli.train import checkpoint as checkpoint_module
from agentfly_cli.train.checkpoint import CheckpointManager


class FakeBackend:
    """Writes a file per part; ``fail`` raises from the model write."""

    is_main, rank = True, 0

    def __init__(self, fail: BaseException | None = None) -> None:
        self.fail = fail

    def barrier(self) -> None:
        pass

    def save_model(self, folder: Path) -> None:
        folder.mkdir(parents=True)
        (folder / "weights.bin").write_bytes(b"w" * 64)
        if self.fail is not None:
            raise self.fail

    def save_checkpoint(self, folder: Path, model_folder: Path) -> None:
        folder.mkdir(parents=True)
        (folder / "optimizer.bin").write_bytes(b"o" * 64)


def _free_space(monkeypatch, free: int) -> None:
    usage = namedtuple("usage", "total used free")
    monkeypatch.setattr(checkpoint_module.shutil, "disk_usage", lambda _: usage(free, 0, free))


def test_enospc_while_saving_names_the_disk_and_the_fix_and_keeps_the_last_checkpoint(tmp_path):
    manager = CheckpointManager(tmp_path)
    manager.save(5, backend=FakeBackend())
    with pytest.raises(UserError) as caught:
        manager.save(10, backend=FakeBackend(OSError(errno.ENOSPC, "No space left on device")))
    message = str(caught.value)
    assert "ran out of space" in message and "step-000010" in message
    assert "step-000005 is intact" in message and "--resume" in message
    assert "\n" not in message
    assert manager.steps() == [5]
    assert not (tmp_path / "checkpoints" / ".tmp-step-000010").exists()  # partial copy gone


def test_torch_zip_writer_failing_on_a_nearly_full_disk_is_the_same_error(tmp_path, monkeypatch):
    manager = CheckpointManager(tmp_path)
    _free_space(monkeypatch, 10 * 2**20)
    torch_error = RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 24 vs 2")
    with pytest.raises(UserError, match="no earlier checkpoint was written"):
        manager.save(1, backend=FakeBackend(torch_error))


def test_a_write_error_with_space_left_is_not_reported_as_a_full_disk(tmp_path, monkeypatch):
    _free_space(monkeypatch, 50 * 2**30)
    with pytest.raises(RuntimeError, match="something else") as caught:
        CheckpointManager(tmp_path).save(1, backend=FakeBackend(RuntimeError("something else")))
    assert not isinstance(caught.value, UserError)


def test_safetensors_running_out_of_space_is_the_same_error_and_leaves_no_partial_copy(
    tmp_path, monkeypatch
):
    """The model's weights are written by safetensors, whose error is a bare Exception; this
    is its text on a full tmpfs, with the free space a large disk still shows."""
    from safetensors import SafetensorError

    _free_space(monkeypatch, 50 * 2**30)
    manager = CheckpointManager(tmp_path)
    manager.save(5, backend=FakeBackend())
    full = SafetensorError(
        "Error while serializing: I/O error: No space left on device (os error 28)"
    )
    with pytest.raises(UserError, match="ran out of space.*step-000005 is intact"):
        manager.save(10, backend=FakeBackend(full))
    assert sorted(p.name for p in (tmp_path / "checkpoints").iterdir()) == ["step-000005"]


@pytest.mark.parametrize("error", [ValueError("a bug"), KeyboardInterrupt()])
def test_any_failed_save_removes_its_partial_copy_and_is_not_called_a_full_disk(
    tmp_path, monkeypatch, error
):
    _free_space(monkeypatch, 50 * 2**30)
    manager = CheckpointManager(tmp_path)
    with pytest.raises(type(error)):
        manager.save(1, backend=FakeBackend(error))
    assert list((tmp_path / "checkpoints").iterdir()) == []


def test_a_bug_on_a_nearly_full_disk_is_not_called_a_full_disk(tmp_path, monkeypatch):
    """Only a write error (OSError, or torch's RuntimeError) may be guessed from the free space:
    a ValueError with little space left was reported as "the disk ran out of space"."""
    _free_space(monkeypatch, 10 * 2**20)
    with pytest.raises(ValueError, match="a bug") as caught:
        CheckpointManager(tmp_path).save(1, backend=FakeBackend(ValueError("a bug")))
    assert not isinstance(caught.value, UserError)
