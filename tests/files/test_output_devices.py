"""Outputs written all or nothing (a temporary file renamed over the path) never replace what is
not a regular file: `--out /dev/null` as root would otherwise turn the machine's /dev/null into
a file (seen: an all-or-nothing write once replaced /dev/full). Links keep pointing where they
pointed; the file behind them gets the data."""

from __future__ import annotations

import os
import stat
import threading

import pytest

from agentfly_cli.files.output_paths import rename_target
from agentfly_cli.trajectory import Trajectory, read_trajectories, write_trajectories
from tests.cli.test_cli_rollout import agentfly, files, scripted_args  # noqa: F401 (fixture)


def _trajectories(count: int) -> list[Trajectory]:
    return [Trajectory(ids=[1, 2, 3], loss_mask=[0, 1, 1], logprobs=[0.0, -0.5, -0.25])
            for _ in range(count)]  # fmt: skip


def _null_device(tmp_path):
    """A character device like /dev/null in ``tmp_path`` (root, on a mount that allows
    devices), so that a regression replaces a throwaway node, not the machine's."""
    node = tmp_path / "null"
    try:
        os.mknod(node, stat.S_IFCHR | 0o666, os.makedev(1, 3))
        node.write_bytes(b"probe")
    except (PermissionError, OSError) as exc:
        pytest.skip(f"cannot make a character device here ({exc}); needs root and a dev mount")
    return node


def test_a_device_is_no_rename_target_and_a_link_names_its_file(tmp_path):
    assert rename_target("/dev/null") is None  # read only: nothing is written
    target = tmp_path / "real.jsonl"
    target.write_text("")
    link = tmp_path / "link.jsonl"
    link.symlink_to(target)
    assert rename_target(link) == target.resolve()
    assert rename_target(tmp_path / "new.jsonl") == tmp_path / "new.jsonl"


def test_writing_trajectories_to_a_fifo_feeds_the_reader_and_keeps_the_fifo(tmp_path):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    received = []
    reader = threading.Thread(target=lambda: received.append(fifo.read_bytes()), daemon=True)
    reader.start()
    assert write_trajectories(fifo, _trajectories(3)) == 3
    reader.join(10)
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)
    assert received and received[0].count(b"\n") == 3
    assert list(tmp_path.iterdir()) == [fifo]  # no temporary file beside it


def test_writing_through_a_link_keeps_the_link_and_fills_its_file(tmp_path):
    real = tmp_path / "runs" / "out.jsonl"
    real.parent.mkdir()
    real.write_text("old\n")
    link = tmp_path / "latest.jsonl"
    link.symlink_to(real)
    write_trajectories(link, _trajectories(2))
    assert link.is_symlink() and link.resolve() == real.resolve()
    assert len(read_trajectories(real)) == 2


def test_rollout_out_to_a_character_device_leaves_the_device(tiny_model, files, tmp_path):  # noqa: F811
    device = _null_device(tmp_path)
    result = agentfly("rollout", *scripted_args(tiny_model, files), "--out", device, "-q")
    assert result.exit_code == 0, result.output
    assert stat.S_ISCHR(os.lstat(device).st_mode)


def test_view_html_to_a_character_device_leaves_the_device(tiny_model, files, tmp_path):  # noqa: F811
    assert agentfly("rollout", *scripted_args(tiny_model, files), "-q").exit_code == 0
    device = _null_device(tmp_path)
    result = agentfly("view", files[2], "--html", device)
    assert result.exit_code == 0, result.output
    assert stat.S_ISCHR(os.lstat(device).st_mode)


def test_view_html_to_a_device_that_refuses_the_write_is_one_line(tiny_model, files, tmp_path):  # noqa: F811
    assert agentfly("rollout", *scripted_args(tiny_model, files), "-q").exit_code == 0
    node = tmp_path / "full"
    try:  # like /dev/full: every write fails with ENOSPC
        os.mknod(node, stat.S_IFCHR | 0o666, os.makedev(1, 7))
        node.open("rb").close()
    except (PermissionError, OSError) as exc:
        pytest.skip(f"cannot make a character device here ({exc}); needs root and a dev mount")
    result = agentfly("view", files[2], "--html", node)
    assert result.exit_code == 2, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and "full" in lines[0], lines
    assert stat.S_ISCHR(os.lstat(node).st_mode)
