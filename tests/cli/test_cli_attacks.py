"""Bad input to ``view``, ``sft``, ``doctor`` and ``export``, tried as an attacker would: each
case is exit code 2 and one line on stderr naming the problem, never "internal error", a
traceback or a silent exit 0, and it leaves no file behind (nothing half-written)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from agentfly_cli.cli.app import build_app
from agentfly_cli.trajectory import Trajectory, write_trajectories

runner = CliRunner()
SFT = ("--quiet", "--set", "telemetry.sinks=[jsonl]")  # sft flags every sft case gets


@pytest.fixture(scope="module")
def demos(tiny_model, tmp_path_factory) -> Path:
    """Six one-turn chains of three tasks in the tiny model's tokens, reward 1."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tiny_model)
    chains = []
    for number in range(6):
        t = Trajectory(group_id=f"task-{number // 2}", task={"question": f"{number} + 1?"})
        t.append("prompt", tokenizer.encode(f"What is {number} + 1?"), sampled=False)
        t.append("assistant", tokenizer.encode(f"ANSWER: {number + 1}"), sampled=True)
        t.reward, t.meta = 1.0, {"tokenizer": str(tiny_model)}
        chains.append(t)
    path = tmp_path_factory.mktemp("demos") / "demos.jsonl"
    write_trajectories(path, chains)
    return path


@pytest.fixture
def ground(tmp_path, tiny_model, demos, monkeypatch) -> dict[str, Path]:
    """The files the cases point at, in a fresh working folder."""
    monkeypatch.chdir(tmp_path)
    files = {"tmp": tmp_path, "tiny": tiny_model, "demos": demos}
    for name, content in {
        "binary.jsonl": b"\x00\x01\x02\xff" * 16,
        "latin.jsonl": '{"ids": "café"}\n'.encode("latin-1"),
        "deep.jsonl": b"[" * 100_000 + b"]" * 100_000 + b"\n",
        "badtypes.jsonl": b'{"ids": "abc", "loss_mask": "abc"}\n',
        "afile": b"precious\n",
    }.items():
        (tmp_path / name).write_bytes(content)
        files[name.removesuffix(".jsonl")] = tmp_path / name
    (tmp_path / "folder.jsonl").mkdir()
    broken = tmp_path / "broken_model"  # config and tokenizer fine, weights garbage
    shutil.copytree(tiny_model, broken)
    (broken / "model.safetensors").write_bytes(b"garbage")
    badtok = tmp_path / "badtok"
    badtok.mkdir()
    (badtok / "tokenizer.json").write_text("{}")
    (badtok / "config.json").write_text("{}")
    run = tmp_path / "run" / "checkpoints" / "step-000001" / "model"
    shutil.copytree(tiny_model, run)
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("not an export")
    files["run"] = tmp_path / "run"
    return files


def snapshot(folder: Path) -> dict[str, bytes | None]:
    """Every path under ``folder``: a file's bytes, a folder's None."""
    return {
        str(p.relative_to(folder)): (p.read_bytes() if p.is_file() else None)
        for p in sorted(folder.rglob("*"))
    }


def sft_lr(lr: str, batch_size: str, holdout: str) -> list[str]:
    """One epoch of sft on the demos with a learning rate that ruins the weights."""
    return ["sft", "{demos}", "--out", "o", "--lr", lr, "--epochs", "1", "--batch-size",
            batch_size, "--holdout", holdout, *SFT]  # fmt: skip


# (argv, a fragment of the one line): the fixed defect (before) is in each comment
CASES = [
    # view
    (["view", "{badtypes}"], "ids must be a list of token ids"),  # internal TypeError
    (["view", "{tmp}/folder.jsonl"], "is a folder, not a trajectory file"),  # "not found"
    (["view", "{demos}", "--html", "{tmp}/folder.jsonl"], "is a folder"),  # IsADirectoryError
    (["view", "{demos}", "--html", "/proc/agentfly-test/p.html"], "cannot be written"),  # internal
    (["view", "{demos}", "--html", "{afile}/p.html"], "is a file, not a folder"),  # internal
    (["view", "{demos}", "--index", "6"], "--index 6 is out of range"),  # held
    # sft: files
    (["sft", "{binary}", "--out", "o", *SFT], "NUL bytes"),  # internal UnicodeDecodeError
    (["sft", "{latin}", "--out", "o", *SFT], "not UTF-8"),  # internal UnicodeDecodeError
    (["sft", "{deep}", "--out", "o", *SFT], "nested too deeply"),  # internal RecursionError
    (["sft", "{badtypes}", "--out", "o", *SFT], "ids must be a list"),  # internal TypeError
    (["sft", "{tmp}/folder.jsonl", "--out", "o", *SFT], "is a folder"),  # "not found"
    (["sft", "{demos}", "--out", "{afile}", *SFT], "is a file; pass a folder"),  # held
    # sft: numbers and names
    (["sft", "{demos}", "--out", "o", "--lr", "inf", *SFT], "finite number"),  # NaN model, exit 0
    (["sft", "{demos}", "--out", "o", "--set", "backend.lr=inf", *SFT], "finite number"),  # same
    (["sft", "{demos}", "--out", "o", "--min-reward", "nan", *SFT], "finite number"),  # no filter
    (["sft", "{demos}", "--out", "o", "--model", "", *SFT], "--model is empty"),  # used the default
    (["sft", "{demos}", "--out", "o", "--lr", "-1", *SFT], "greater than 0"),  # held
    # sft: failures after the model loads leave no folder
    (["sft", "{demos}", "--out", "o", "--model", "{tmp}/broken_model", *SFT], "cannot load the"),
    (sft_lr("1e30", "1", "0"), "loss became nan at training step 2"),  # a NaN model, exit 0
    (sft_lr("1e39", "8", "0"), "loss became nan in the weights"),  # inf in float32, one step
    (sft_lr("1e30", "8", "0.4"), "loss became nan on the held-out chains"),  # one step
    # doctor
    (["doctor", "{tiny}", "--parser", "nosuch"], "unknown tool-call parser 'nosuch'"),  # exit 1
    (["doctor", "{tiny}", "--template", "{binary}"], "is not UTF-8 text"),  # internal
    (["doctor", "{tiny}", "--template", "{latin}"], "is not UTF-8 text"),  # internal
    (["doctor", "{tiny}", "--observation-role", ""], "role must not be empty"),  # internal
    # export
    (["export", "{run}", "{run}", "--force"], "is the run"),  # deleted every checkpoint, exit 0
    (["export", "{run}", "{run}/..", "--force"], "holds the run"),  # emptied the parent folder
    (["export", "{run}", "{tmp}/mine", "--force"], "did not write"),  # replaced any folder
    (["export", "{tmp}/nosuch", "out"], "not found"),  # "holds no checkpoint"
    (["export", "{tmp}/mine", "out"], "holds no checkpoint"),  # held
]


@pytest.mark.parametrize(("argv", "fragment"), CASES, ids=[" ".join(c[0][:4]) for c in CASES])
def test_bad_input_is_one_line_exit_2_and_leaves_nothing_behind(ground, argv, fragment):
    before = snapshot(ground["tmp"])
    argv = [a.format(**{k: str(v) for k, v in ground.items()}) for a in argv]
    result = runner.invoke(build_app(), argv)
    assert result.exit_code == 2, result.output
    assert "internal error" not in result.output and "Traceback" not in result.output
    assert result.stdout == "", result.stdout
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    assert fragment in lines[0], lines[0]
    assert snapshot(ground["tmp"]) == before  # nothing written, nothing lost


def test_a_failed_sft_rerun_with_force_keeps_the_earlier_run(ground, tiny_model, demos):
    """A --force rerun that fails (here: the loss turns NaN) leaves the first run's model,
    tasks, metrics and summary as they were."""
    first = runner.invoke(build_app(), ["sft", str(demos), "--out", "o", "--epochs", "1", *SFT])
    assert first.exit_code == 0, first.output
    before = snapshot(ground["tmp"] / "o")
    assert {"model/model.safetensors", "sft.json", "metrics.jsonl"} <= set(before)
    again = runner.invoke(
        build_app(),
        ["sft", str(demos), "--out", "o", "--force", "--lr", "1e30", "--batch-size", "1", *SFT],
    )
    assert again.exit_code == 2 and "loss became nan" in again.stderr, again.output
    assert snapshot(ground["tmp"] / "o") == before
    assert json.loads((ground["tmp"] / "o" / "sft.json").read_text())["optimizer_steps"] >= 1


def test_view_with_a_broken_tokenizer_shows_the_messages_and_names_it(ground):
    """A tokenizer folder that breaks the loaders (here: an empty tokenizer.json, a KeyError in
    transformers) is a note and the messages, not an internal error."""
    result = runner.invoke(build_app(), ["view", str(ground["demos"]), "--tokenizer", "badtok"])
    assert result.exit_code == 0, result.output
    assert "--tokenizer 'badtok' does not load; showing messages" in result.stderr
    assert "task-0" in result.stdout and "6 trained" in result.stdout
