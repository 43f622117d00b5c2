"""``benchmarks/distill_curves.py``: the teacher folder it accepts, the commands it runs, the
curves it reads from run folders, their means and the plot (the real runs take an hour)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.helpers.paths import load_script


@pytest.fixture(scope="module")
def curves():
    return load_script("benchmarks/distill_curves.py")


def write_run(folder: Path, evals: dict[int, list[float]]) -> None:
    """A run folder: eval records (and their trajectories: per-task rewards) among step lines."""
    lines = []
    (folder / "trajectories").mkdir(parents=True)
    for step, tasks in evals.items():
        if step:
            lines.append({"step": step, "reward/mean": 0.3})
        lines.append({"step": step, "eval/reward_mean": sum(tasks) / len(tasks)})
        with (folder / "trajectories" / f"eval-{step:06d}.jsonl").open("w") as out:
            for index, reward in enumerate(tasks):
                for _ in range(2):  # two chains per task
                    out.write(json.dumps({"task_index": index, "reward": reward}) + "\n")
    (folder / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines))


def test_the_teacher_is_a_model_a_checkpoint_or_a_runs_latest_checkpoint(curves, tmp_path):
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text("{}")
    assert curves.teacher_folder(model) == model
    run = tmp_path / "run"
    for step in ("step-000010", "step-000020"):
        (run / "checkpoints" / step / "model").mkdir(parents=True)
        (run / "checkpoints" / step / "model" / "config.json").write_text("{}")
    (run / "config.json").write_text("{}")  # the run's settings, not a model
    (run / "metrics.jsonl").write_text("")
    assert curves.teacher_folder(run) == run / "checkpoints" / "step-000020" / "model"
    checkpoint = run / "checkpoints" / "step-000010"
    assert curves.teacher_folder(checkpoint) == checkpoint / "model"
    (run / "checkpoints").rename(tmp_path / "elsewhere")
    with pytest.raises(SystemExit, match="--teacher: no model in"):
        curves.teacher_folder(run)  # a run folder without a checkpoint


def test_the_two_commands_differ_only_by_the_teacher(curves, tmp_path):
    (tmp_path / "config.json").write_text("{}")
    args = curves.parse_args(
        ["--teacher", str(tmp_path), "--steps", "3", "--model", "tiny", "--set", "rollout.n=2",
         "--distill-set", "trainer.distill.coef=0.5", "--out", str(tmp_path / "out")]
    )  # fmt: skip
    rl = curves.train_command(args, "rl", 2, tmp_path / "rl")
    distill = curves.train_command(args, "distill", 2, tmp_path / "d")
    assert rl[2:5] == ["agentfly_cli", "train", "calculator"] and "--model" in rl
    for flag in ("trainer.steps=3", "trainer.eval.every=2", "trainer.eval.limit=16",
                 "trainer.seed=2", "rollout.seed=2", "rollout.n=2"):  # fmt: skip
        assert flag in rl and flag in distill
    assert not any("distill" in item for item in rl)
    assert f"trainer.distill.teacher={tmp_path}" in distill
    assert "trainer.distill.mode=only" in distill
    # the pass-through flags come last, so they win over the script's own
    assert distill.index("trainer.distill.coef=0.5") > distill.index("trainer.distill.coef=1.0")


def test_curves_means_and_the_plot(curves, tmp_path):
    write_run(tmp_path / "rl-seed1", {0: [0.0, 0.5], 2: [0.5, 0.5], 4: [1.0, 0.5]})
    write_run(tmp_path / "rl-seed2", {0: [0.0, 0.0], 2: [0.5, 0.0], 4: [0.5, 0.5]})
    write_run(tmp_path / "distill-seed1", {0: [0.0, 0.5], 2: [1.0, 1.0], 4: [1.0, 1.0]})
    curve = curves.eval_curve(tmp_path / "rl-seed1")
    assert [p["step"] for p in curve] == [0, 2, 4]
    assert [p["mean"] for p in curve] == [0.25, 0.5, 0.75]
    assert [p["stderr"] for p in curve] == [0.25, 0.0, 0.25]  # stdev over 2 tasks / sqrt(2)
    assert curves.finished(tmp_path / "rl-seed1", 4) and not curves.finished(
        tmp_path / "rl-seed1", 8
    )
    assert not curves.finished(tmp_path / "missing", 4)
    runs = [
        {
            "method": method,
            "seed": seed,
            "curve": curves.eval_curve(tmp_path / f"{method}-seed{seed}"),
        }
        for method, seed in (("rl", 1), ("rl", 2), ("distill", 1))
    ]
    means = curves.mean_curves(runs)
    assert [p["mean"] for p in means["rl"]] == [0.125, 0.375, 0.625]
    assert [p["mean"] for p in means["distill"]] == [0.25, 1.0, 1.0]
    curves.write_plot(runs, tmp_path / "curves.png", "test")
    assert (tmp_path / "curves.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
