"""``agentfly export`` deletes nothing it did not write: an output that is, holds or lies inside
the run is refused, ``--force`` replaces only an earlier export, a failed copy leaves nothing."""

from __future__ import annotations

import errno
import json
import os
from pathlib import Path

import pytest
from typer.testing import CliRunner

from agentfly_cli.cli.app import build_app
from agentfly_cli.train import export as export_module
from agentfly_cli.train.export import MARKER

runner = CliRunner()


def agentfly(*arguments):
    return runner.invoke(build_app(), [str(a) for a in arguments])


def make_run(folder: Path, steps=(1, 2)) -> Path:
    """A run folder with checkpoints whose model folders hold a config and fake weights."""
    for step in steps:
        model = folder / "checkpoints" / f"step-{step:06d}" / "model"
        model.mkdir(parents=True)
        (model / "config.json").write_text(json.dumps({"model_type": "qwen2", "step": step}))
        (model / "model.safetensors").write_bytes(bytes([step]) * 64)
    (folder / "metrics.jsonl").write_text("{}\n")
    return folder


def snapshot(folder: Path) -> dict[str, bytes]:
    """Every file under ``folder`` (relative path -> bytes)."""
    return {str(p.relative_to(folder)): p.read_bytes() for p in folder.rglob("*") if p.is_file()}


def one_line_error(result, *fragments: str) -> str:
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output and "internal error" not in result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.output
    for fragment in fragments:
        assert fragment in lines[0], lines[0]
    return lines[0]


@pytest.mark.parametrize(
    ("out", "relation"),
    [
        ("{run}", "is the run"),
        ("{run}/..", "holds the run"),
        ("{run}/checkpoints", "lies inside the run"),
        ("{run}/checkpoints/step-000002/model", "lies inside the run"),
        ("{run}/exported", "lies inside the run"),
        ("{link}", "is the run"),  # a symlink to the run
        ("{link}/checkpoints", "lies inside the run"),
    ],
)
def test_an_output_that_overlaps_the_run_is_refused_and_nothing_is_touched(tmp_path, out, relation):
    run = make_run(tmp_path / "parent" / "run")
    (tmp_path / "parent" / "precious.txt").write_text("keep me")
    os.symlink(run, tmp_path / "link")
    before = snapshot(tmp_path / "parent")
    target = out.format(run=run, link=tmp_path / "link")
    result = agentfly("export", run, target, "--force")
    one_line_error(result, relation, "pick a folder outside the run")
    assert snapshot(tmp_path / "parent") == before


def test_force_replaces_an_earlier_export_and_nothing_else(tmp_path):
    run = make_run(tmp_path / "run")
    out = tmp_path / "exported"
    assert agentfly("export", run, out).exit_code == 0
    assert json.loads((out / "config.json").read_text())["step"] == 2
    assert json.loads((out / MARKER).read_text())["written_by"] == "agentfly export"
    make_run(tmp_path / "run", steps=(3,))
    result = agentfly("export", run, out, "--force")
    assert result.exit_code == 0, result.output
    assert json.loads((out / "config.json").read_text())["step"] == 3
    assert sorted(p.name for p in tmp_path.iterdir()) == ["exported", "run"]  # no temp left

    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("not an export")
    line = one_line_error(agentfly("export", run, mine, "--force"), "did not write", MARKER)
    assert "remove it yourself" in line
    assert snapshot(mine) == {"notes.txt": b"not an export"}


def test_an_empty_folder_may_be_replaced_with_force(tmp_path):
    run, out = make_run(tmp_path / "run"), tmp_path / "empty"
    out.mkdir()
    one_line_error(agentfly("export", run, out), "exists; pass --force")
    assert agentfly("export", run, out, "--force").exit_code == 0
    assert (out / "model.safetensors").read_bytes() == bytes([2]) * 64


def test_a_full_disk_during_the_copy_leaves_no_partial_folder(tmp_path, monkeypatch):
    run = make_run(tmp_path / "run")
    out = tmp_path / "new" / "deeper" / "exported"

    def copy_fails(src, dst, *args, **kwargs):
        Path(dst).mkdir(parents=True, exist_ok=True)
        (Path(dst) / "config.json").write_text("{")
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(export_module.shutil, "copytree", copy_fails)
    one_line_error(agentfly("export", run, out), "ran out of space", "was not created")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run"]  # not even new/deeper


def test_a_failed_copy_over_an_earlier_export_keeps_the_earlier_one(tmp_path, monkeypatch):
    run, out = make_run(tmp_path / "run"), tmp_path / "exported"
    assert agentfly("export", run, out).exit_code == 0
    before = snapshot(out)

    def copy_fails(src, dst, *args, **kwargs):
        Path(dst).mkdir(exist_ok=True)
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(export_module.shutil, "copytree", copy_fails)
    one_line_error(agentfly("export", run, out, "--force"), "ran out of space", "is as it was")
    assert snapshot(out) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["exported", "run"]


@pytest.mark.parametrize(
    ("arguments", "fragments"),
    [
        (["{tmp}/nosuch", "{tmp}/out"], ("run folder", "not found")),
        (["{tmp}/afile", "{tmp}/out"], ("is a file", "`agentfly train` run")),
        (["{tmp}/norun", "{tmp}/out"], ("holds no checkpoint",)),
        (["{run}", "{tmp}/afile"], ("is a file",)),
        (["{run}", "{tmp}/afile/out"], ("is a file, not a folder",)),
        (["{run}", "/proc/agentfly-test/out"], ("cannot be written",)),
    ],
)
def test_bad_runs_and_outputs_are_one_line(tmp_path, arguments, fragments):
    run = make_run(tmp_path / "run")
    (tmp_path / "afile").write_text("precious")
    (tmp_path / "norun").mkdir()
    before = snapshot(tmp_path)
    argv = [a.format(tmp=tmp_path, run=run) for a in arguments]
    one_line_error(agentfly("export", *argv, "--force"), *fragments)
    assert snapshot(tmp_path) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["afile", "norun", "run"]


def test_force_keeps_an_earlier_export_that_also_holds_the_users_files(tmp_path):
    """The marker says an export wrote the folder, not that it wrote everything in it: a file
    the user added there afterwards was deleted by --force."""
    run, out = make_run(tmp_path / "run"), tmp_path / "exported"
    assert agentfly("export", run, out).exit_code == 0
    (out / "notes.txt").write_text("the user's")
    (out / "eval").mkdir()
    (out / "eval" / "scores.json").write_text("{}")
    before = snapshot(out)
    one_line_error(agentfly("export", run, out, "--force"), "did not write", "notes.txt")
    assert snapshot(out) == before


def test_ctrl_c_during_the_copy_leaves_no_temporary_folder(tmp_path, monkeypatch):
    run = make_run(tmp_path / "run")

    def copy_interrupted(src, dst, *args, **kwargs):
        Path(dst).mkdir(parents=True, exist_ok=True)
        (Path(dst) / "model.safetensors").write_bytes(b"\0" * 64)
        raise KeyboardInterrupt

    monkeypatch.setattr(export_module.shutil, "copytree", copy_interrupted)
    with pytest.raises(KeyboardInterrupt):
        export_module.export_model(run, tmp_path / "new" / "exported")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run"]  # no temp, no new/


def test_a_temporary_folder_left_by_a_killed_export_with_our_pid_fails_nothing(tmp_path):
    run, out = make_run(tmp_path / "run"), tmp_path / "exported"
    stale = tmp_path / f".exported.export-tmp-{os.getpid()}"  # kill -9, then the pid came back
    stale.mkdir()
    (stale / "config.json").write_text("{")
    assert agentfly("export", run, out).exit_code == 0
    assert json.loads((out / "config.json").read_text())["step"] == 2
    make_run(tmp_path / "run", steps=(3,))
    (tmp_path / f".exported.export-old-{os.getpid()}").mkdir()
    result = agentfly("export", run, out, "--force")
    assert result.exit_code == 0, result.output
    assert json.loads((out / "config.json").read_text())["step"] == 3
    left = sorted(p.name for p in tmp_path.iterdir())
    assert left == sorted(["exported", "run", stale.name, f".exported.export-old-{os.getpid()}"])
