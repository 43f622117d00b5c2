"""``benchmarks/learning_table.py``: its numbers, its JSON and Markdown, resuming, on the tiny
model (the real rows take hours; docs/learning.md)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.helpers.paths import load_script


@pytest.fixture(scope="module")
def table():
    return load_script("benchmarks/learning_table.py")


def write_chains(path: Path, rewards: dict[str, list[float]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w") as out:
        for task, values in rewards.items():
            for value in values:
                out.write(json.dumps({"task": {"id": task}, "reward": value}) + "\n")


def test_points_are_task_means_with_their_standard_error(table, tmp_path):
    write_chains(tmp_path / "a.jsonl", {"t1": [1, 1, 0, 0], "t2": [1, 1, 1, 1], "t3": [0, 0, 0, 0]})
    means = table.task_means(tmp_path / "a.jsonl")
    assert means == {"t1": 0.5, "t2": 1.0, "t3": 0.0}
    point = table.held_out_point(means, {"pass@4": 2 / 3})
    assert point["mean"] == 0.5 and point["tasks"] == 3 and point["pass@4"] == 0.6667
    assert point["stderr"] == pytest.approx(0.2887, abs=1e-4)  # sqrt(0.25 / 3)


def test_a_training_runs_curve_and_gain_are_read_from_its_records(table, tmp_path):
    run = tmp_path / "recipe"
    folder = run / "train"
    evals = {0: [0.0, 0.5], 5: [0.5, 0.5], 10: [1.0, 0.5]}  # two tasks, mean per eval
    lines = []
    for step, (a, b) in evals.items():
        chains = {"x": [a] * 2, "y": [b] * 2}
        write_chains(folder / "trajectories" / f"eval-{step:06d}.jsonl", chains)
        lines.append({"step": step, "eval/reward_mean": (a + b) / 2, "eval/pass@1": a,
                      "eval/seconds": 2.0})  # fmt: skip
        if step:
            lines.append({"step": step, "reward/mean": 0.1 * step, "time/step_s": 30.0,
                          "curriculum/level": float(step // 10)})  # fmt: skip
    (folder / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines))
    (folder / "warm_start").mkdir()
    (folder / "warm_start" / "warm_start.json").write_text(json.dumps({"seconds": 120.0}))
    result = table.read_train(run)
    assert [p["step"] for p in result["curve"]] == [0, 5, 10]
    assert [p["mean"] for p in result["curve"]] == [0.25, 0.5, 0.75]
    assert result["train_reward"] == [0.5, 1.0] and result["curriculum_levels"] == [0.0, 1.0]
    assert result["rl_seconds"] == 60.0 and result["eval_seconds"] == 6.0
    assert result["warm_start_seconds"] == 120.0
    row = {"phases": {"train": {"done": True, **result}}}
    summary = table.summarize("r", row)
    assert summary["rl_gain"] == 0.5 and summary["rl_steps"] == 10
    assert summary["warm_start"]["mean"] == 0.25 and summary["base"] is None
    text = table.markdown({"recipes": {"r": row}})
    assert "| `r` | - | 0.250 ± 0.250 (pass@1 0.00) |" in text and "+0.500 ±" in text


def test_a_tiny_row_runs_resumes_and_writes_json_markdown_and_png(table, tiny_model, tmp_path):
    out, runs = tmp_path / "out", tmp_path / "runs"
    small = [
        "--model", str(tiny_model), "--set", "data.limit=3", "--set", "trainer.eval.limit=3",
        "--set", "trainer.eval.every=1", "--set", "rollout.n=2",
        "--set", "trainer.tasks_per_step=2", "--set", "trainer.save_every=1",
    ]  # fmt: skip
    # a training run stopped after its first step: the table resumes it from its checkpoint
    stopped = table.train_command("calculator", runs / "calculator", small[:-2], False)
    stopped += ["--set", "trainer.steps=1", "--set", "trainer.save_every=1"]
    (runs / "calculator").mkdir(parents=True)
    assert table.run_logged(stopped, runs / "calculator" / "log.txt")[0] == 0
    args = ["--recipes", "calculator", "--out", str(out), "--runs", str(runs), *small]
    assert table.main([*args, "--set", "trainer.steps=2"]) == 0
    saved = json.loads((out / "learning_table.json").read_text())
    train = saved["recipes"]["calculator"]["phases"]["train"]
    assert train["done"] and "--resume" in train["attempts"][0]["command"]
    assert train["settings"]["n"] == 2 and train["settings"]["warm_start"] is None
    assert [p["step"] for p in train["curve"]] == [0, 1, 2]  # one curve across the resume
    base = saved["recipes"]["calculator"]["phases"]["base"]
    assert base["tasks"] == 3 and base["command"].startswith("agentfly eval calculator --n 4")
    records = [json.loads(line) for line in (runs / "calculator/train/metrics.jsonl").open()]
    logged = [r["eval/reward_mean"] for r in records if "eval/reward_mean" in r]
    assert [p["mean"] for p in train["curve"]] == pytest.approx(logged, abs=1e-4)
    summary = saved["summary"][0]
    assert summary["recipe"] == "calculator" and summary["rl_steps"] == 2
    assert "| `calculator` |" in (out / "learning_table.md").read_text()
    assert (out / "calculator.png").stat().st_size > 5000
    # run again: finished phases are kept, not repeated
    assert table.main([*args, "--set", "trainer.steps=2"]) == 0
    again = json.loads((out / "learning_table.json").read_text())["recipes"]["calculator"]
    assert again["phases"] == saved["recipes"]["calculator"]["phases"]
    # the table lost (a crash before it was saved): the finished base eval is read, not rerun
    (out / "learning_table.json").unlink()
    assert table.main([*args, "--set", "trainer.steps=2"]) == 0
    log = (runs / "calculator" / "log.txt").read_text()
    assert log.count("agentfly_cli eval calculator") == 1
    rebuilt = json.loads((out / "learning_table.json").read_text())["recipes"]["calculator"]
    assert rebuilt["phases"]["base"] == base
    assert [p["mean"] for p in rebuilt["phases"]["train"]["curve"]] == pytest.approx(logged)
    # --extend: the recipe now asks for more steps; the finished run continues from step 2
    assert table.main([*args, "--set", "trainer.steps=3", "--extend"]) == 0
    longer = json.loads((out / "learning_table.json").read_text())["recipes"]["calculator"]
    train = longer["phases"]["train"]
    assert [p["step"] for p in train["curve"]] == [0, 1, 2, 3]
    assert len(train["attempts"]) == 2 and "--resume" in train["attempts"][1]["command"]
    log = (runs / "calculator" / "log.txt").read_text()
    assert longer["phases"]["base"] == base and log.count("agentfly_cli eval calculator") == 1
    # --redo-train: new RL settings; training starts over from step 0, the base eval is kept
    assert table.main([*args, "--set", "trainer.steps=1", "--redo-train"]) == 0
    redone = json.loads((out / "learning_table.json").read_text())["recipes"]["calculator"]
    assert [p["step"] for p in redone["phases"]["train"]["curve"]] == [0, 1]
    assert len(redone["phases"]["train"]["attempts"]) == 1
    assert "--resume" not in redone["phases"]["train"]["attempts"][0]["command"]
    log = (runs / "calculator" / "log.txt").read_text()
    assert redone["phases"]["base"] == base and log.count("agentfly_cli eval calculator") == 1


def test_an_unknown_recipe_is_refused(table, tmp_path, capsys):
    assert table.main(["--recipes", "chess", "--out", str(tmp_path)]) == 2
    assert "unknown recipe 'chess'" in capsys.readouterr().out


def test_a_bridge_row_is_accepted_and_its_files_use_no_colon(table, tmp_path):
    assert table.main(["--recipes", "bfcl:simple_python", "--out", str(tmp_path),
                       "--runs", str(tmp_path / "runs"), "--table-only"]) == 0  # fmt: skip
    curve = [{"step": 0, "mean": 0.2, "stderr": 0.05, "pass@1": 0.2},
             {"step": 10, "mean": 0.5, "stderr": 0.05, "pass@1": 0.5}]  # fmt: skip
    row = {"phases": {"train": {"done": True, "curve": curve}}}
    path = table.plot("bfcl:simple_python", row, tmp_path)
    assert path == tmp_path / "bfcl_simple_python.png" and path.stat().st_size > 5000
    assert table.folder_name("reasoning_gym:chain_sum") == "reasoning_gym_chain_sum"
