"""A full disk while trajectories are written leaves whole lines only and is one clear error;
a trajectory file that is not one is a one-line error naming the line."""

from __future__ import annotations

import errno
import json
import os

import pytest

from agentfly_cli import trajectory as trajectory_module
from agentfly_cli.errors import UserError
from agentfly_cli.trajectory import (
    Trajectory,
    TrajectoryWriter,
    read_trajectories,
    write_trajectories,
)


def chain(number: int) -> Trajectory:
    t = Trajectory(group_id=f"g{number}", prediction="x" * 200)
    t.append("prompt", [1, 2, 3], sampled=False)
    t.append("assistant", [4, 5], sampled=True, logprobs=[-0.1, -0.2])
    return t


@pytest.fixture
def disk_fills_after(monkeypatch):
    """``fill(n)``: from then on the disk takes ``n`` more bytes; the write past it writes what
    fits and raises ENOSPC, as a real full disk does."""
    real_write = os.write

    def fill(room: int) -> None:
        left = [room]

        def write(fd, data):
            if len(data) <= left[0]:
                left[0] -= len(data)
                return real_write(fd, data)
            if left[0]:
                written = real_write(fd, bytes(data[: left[0]]))
                left[0] = 0
                return written
            raise OSError(errno.ENOSPC, "No space left on device")

        monkeypatch.setattr(trajectory_module.os, "write", write)

    return fill


def test_a_full_disk_cuts_the_stream_back_to_its_last_complete_line(tmp_path, disk_fills_after):
    path = tmp_path / "out.jsonl"
    writer = TrajectoryWriter(path)
    writer.write(chain(0))
    writer.write(chain(1))
    whole = path.read_bytes()
    disk_fills_after(100)  # the third line is longer than that
    with pytest.raises(UserError) as caught:
        writer.write(chain(2))
    writer.close()
    message = str(caught.value)
    assert "ran out of space" in message and "out.jsonl" in message
    assert "2 complete lines are kept" in message and "\n" not in message
    assert path.read_bytes() == whole  # no half line at the end
    assert [t.group_id for t in read_trajectories(path)] == ["g0", "g1"]


def test_a_full_disk_while_rewriting_a_file_leaves_the_old_file_and_no_temporary(
    tmp_path, disk_fills_after
):
    path = tmp_path / "out.jsonl"
    write_trajectories(path, [chain(0)])
    before = path.read_bytes()
    disk_fills_after(len(before) + 50)
    with pytest.raises(UserError, match="ran out of space.*out.jsonl is as it was"):
        write_trajectories(path, [chain(0), chain(1), chain(2)])
    assert path.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.jsonl"]


def test_a_write_the_disk_refuses_is_one_line_not_a_traceback(tmp_path, monkeypatch):
    def refuse(fd, data):
        raise OSError(errno.EROFS, "Read-only file system")

    monkeypatch.setattr(trajectory_module.os, "write", refuse)
    with pytest.raises(UserError, match="cannot write .*Read-only file system"):
        write_trajectories(tmp_path / "out.jsonl", [chain(0)])
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    ("record", "fragment"),
    [
        ([1, 2], "a JSON list, not an object"),
        ({"ids": "abc", "loss_mask": "abc"}, "ids must be a list of token ids"),
        ({"ids": [1, -2], "loss_mask": [0, 0], "logprobs": [None, None]}, "integers from 0"),
        ({"ids": [1, 2], "loss_mask": [1], "logprobs": [None, None]}, "loss_mask must be a list"),
        ({"ids": [1], "loss_mask": [2], "logprobs": [None]}, "only 0 and 1"),
        ({"ids": [1], "loss_mask": [0], "logprobs": []}, "logprobs must be a list as long"),
        (
            {
                "ids": [1],
                "loss_mask": [0],
                "logprobs": [None],
                "turns": [{"role": "prompt", "start": 0, "end": 9}],
            },
            "a turn spans 0:9, outside the 1 ids",
        ),
        ({"ids": [], "loss_mask": [], "logprobs": [], "reward": "high"}, "reward must be"),
        ({"ids": [], "loss_mask": [], "logprobs": [], "messages": ["hi"]}, "messages must be"),
        ({"ids": [], "nonsense": 1}, "unknown trajectory fields: nonsense"),
    ],
)
def test_a_line_that_is_not_a_trajectory_record_names_the_line(tmp_path, record, fragment):
    path = tmp_path / "bad.jsonl"
    path.write_text(json.dumps(chain(0).to_dict()) + "\n" + json.dumps(record) + "\n")
    with pytest.raises(UserError) as caught:
        read_trajectories(path)
    message = str(caught.value)
    assert message.startswith(f"{path}:2 is not a trajectory record") and fragment in message


@pytest.mark.parametrize(
    ("content", "fragment"),
    [
        (b"\x00\x01\xff", "NUL bytes"),
        ("caf\xe9\n".encode("latin-1"), "not UTF-8"),
        (b"[" * 100_000 + b"]" * 100_000, "nested too deeply"),
    ],
)
def test_a_file_that_is_not_json_text_is_one_line(tmp_path, content, fragment):
    path = tmp_path / "bad.jsonl"
    path.write_bytes(content)
    with pytest.raises(UserError, match=fragment):
        read_trajectories(path)


def test_a_folder_is_not_a_trajectory_file(tmp_path):
    with pytest.raises(UserError, match="is a folder, not a trajectory file"):
        read_trajectories(tmp_path)


def test_the_stream_writer_feeds_a_fifo(tmp_path):
    """`rollout --out FIFO` (or /dev/stdout piped on): a pipe cannot seek; the writer streamed
    into it before the cut-back was added, and still does (it raised 'Illegal seek')."""
    import threading

    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    received = []
    reader = threading.Thread(target=lambda: received.append(fifo.read_bytes()), daemon=True)
    reader.start()
    with TrajectoryWriter(fifo) as writer:
        writer.write(chain(0))
        writer.write(chain(1))
    reader.join(10)
    assert received and received[0].count(b"\n") == 2
    assert [json.loads(line)["group_id"] for line in received[0].splitlines()] == ["g0", "g1"]


def test_appending_after_a_crashed_runs_half_line_keeps_every_line_whole(tmp_path):
    """A run killed mid-line left half a record; the next ``append`` lines were glued onto it,
    so the file held a corrupt line in the middle and no reader could load it."""
    path = tmp_path / "record.jsonl"
    whole = (json.dumps(chain(0).to_dict()) + "\n").encode()
    path.write_bytes(whole + whole[:40])
    with TrajectoryWriter(path, append=True) as writer:
        writer.write(chain(1))
    assert [t.group_id for t in read_trajectories(path)] == ["g0", "g1"]
    last = json.dumps(chain(2).to_dict()).encode()  # a whole record without its newline: kept
    path.write_bytes(whole + last)
    with TrajectoryWriter(path, append=True) as writer:
        writer.write(chain(3))
    assert [t.group_id for t in read_trajectories(path)] == ["g0", "g2", "g3"]
