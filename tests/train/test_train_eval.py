"""Held-out evaluation during training (the eval split, its metrics, the trainer's records), and
the warning when a group-relative advantage has nothing to learn from."""

from __future__ import annotations

import io
import json

import pytest
from typer.testing import CliRunner

from agentfly_cli.cli.app import build_app
from agentfly_cli.errors import UserError
from agentfly_cli.recipes.loader import load_config
from agentfly_cli.settings.run import DataSettings
from agentfly_cli.settings.train import EvalSettings
from agentfly_cli.telemetry.eval_line import format_eval_line
from agentfly_cli.train.tasks.evaluation import (
    EVAL_TASKS_FILE,
    EvalSplit,
    HeldOutEval,
    eval_metrics,
    split_tasks,
    task_results,
)
from agentfly_cli.train.trainer import Trainer
from agentfly_cli.trajectory import Trajectory, read_trajectories
from tests.train.test_trainer import ON_CPU, make_config, recipe, weights  # noqa: F401 (fixture)

ROWS = [{"id": f"t{i}", "question": f"q{i}", "split": "test" if i % 4 == 0 else "train"}
        for i in range(20)]  # fmt: skip


def holdout_run(tmp_path, holdout=0.25, holdout_seed=0, **data):
    """The run's training side and its data settings for ROWS in a file, with a data.holdout."""
    from agentfly_cli.train.tasks.run_tasks import RunTasks

    path = tmp_path / "tasks.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in ROWS))
    settings = DataSettings(path=str(path), holdout=holdout, holdout_seed=holdout_seed, **data)
    return RunTasks.load(settings), settings


def test_holdout_is_a_seeded_disjoint_split_of_the_rows(tmp_path):
    run, data = holdout_run(tmp_path, holdout_seed=7)
    settings = EvalSettings(every=2)
    split = split_tasks(run.train, settings, data=data, file_rows=run.rows)
    assert len(split.eval) == 5 and len(split.train) == 15
    ids = {row["id"] for row in split.eval}
    assert ids.isdisjoint(row["id"] for row in split.train)
    assert sorted(ids | {row["id"] for row in split.train}) == sorted(r["id"] for r in ROWS)
    assert split.train == [row for row in ROWS if row["id"] not in ids]  # data order kept
    assert split.eval == [row for row in ROWS if row["id"] in ids]
    again = split_tasks(run.train, settings, data=data, file_rows=run.rows)
    other_run, other_data = holdout_run(tmp_path, holdout_seed=8)
    other = split_tasks(other_run.train, settings, data=other_data, file_rows=other_run.rows)
    assert again.eval == split.eval and other.eval != split.eval  # drawn by data.holdout_seed
    limited = split_tasks(run.train, EvalSettings(every=2, limit=2), data=data, file_rows=run.rows)
    assert limited.eval == split.eval[:2] and limited.train == split.train
    assert split.notes == []


def test_eval_off_trains_on_every_row_and_a_holdout_must_leave_some():
    from agentfly_cli.train.tasks.run_tasks import RunTasks

    assert split_tasks(ROWS, EvalSettings(), data=DataSettings(path="x")).train == ROWS
    with pytest.raises(UserError, match="leaves none to train on"):
        RunTasks.of_rows(ROWS[:1], DataSettings(path="x", holdout=0.5), "x")


def test_split_tasks_has_no_eval_holdout_of_its_own():
    """The alias is moved to data.holdout when a run's settings load: settings that skipped
    that are refused, not read as an old second mechanism."""
    unloaded = EvalSettings(every=1, holdout=0.5)
    with pytest.raises(UserError, match="^trainer.eval.holdout is a deprecated alias of data"):
        split_tasks(ROWS, unloaded, data=DataSettings(path="x"))


def test_eval_where_reads_rows_and_warns_when_they_are_also_trained_on(tmp_path):
    data = tmp_path / "tasks.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in ROWS))
    settings = EvalSettings(every=5, where={"split": "test"})
    train_rows = [r for r in ROWS if r["split"] == "train"]
    split = split_tasks(train_rows, settings, data=DataSettings(path=str(data)))
    assert [r["id"] for r in split.eval] == ["t0", "t4", "t8", "t12", "t16"]
    assert split.train == train_rows and split.notes == []
    overlapping = split_tasks(ROWS, settings, data=DataSettings(path=str(data)))
    assert overlapping.notes == [
        "5 of the 5 eval tasks are also training tasks, so eval reward is not held out; select "
        "disjoint rows (e.g. data.where / trainer.eval.where on a split field) or use "
        "data.holdout"
    ]


def test_eval_path_is_read_with_where_and_a_missing_one_is_named(tmp_path):
    held = tmp_path / "held.jsonl"
    held.write_text("".join(json.dumps(r) + "\n" for r in ROWS[:6]))
    settings = EvalSettings(every=1, path=str(held), where={"split": "train"}, limit=3)
    split = split_tasks(ROWS[6:], settings, data=DataSettings(path="train.jsonl"))
    assert [r["id"] for r in split.eval] == ["t1", "t2", "t3"] and split.train == ROWS[6:]
    typo = EvalSettings(every=1, path=str(held), where={"split": "tset"})
    with pytest.raises(UserError, match="^trainer.eval.where.split=tset keeps none of 6 rows"):
        split_tasks(ROWS, typo, data=DataSettings(path="train.jsonl"))
    missing = EvalSettings(every=1, path=str(tmp_path / "none.jsonl"))
    with pytest.raises(UserError, match="trainer.eval.path '.*none.jsonl' not found"):
        split_tasks(ROWS, missing, data=DataSettings(path="train.jsonl"))


def test_eval_path_in_a_recipe_is_relative_to_the_recipe(tmp_path):
    (tmp_path / "held.jsonl").write_text(json.dumps(ROWS[0]) + "\n")
    recipe_file = tmp_path / "recipe.yaml"
    recipe_file.write_text("trainer:\n  eval: {every: 2, path: held.jsonl}\n")
    config = load_config(str(recipe_file))
    assert config.trainer.eval.path == str(tmp_path / "held.jsonl")


@pytest.mark.parametrize(
    ("sets", "message"),
    [
        (
            ["data.holdout=0", "trainer.eval.every=5"],
            "trainer.eval: every needs eval tasks the run does not train",
        ),
        (
            ["data.holdout=0.2", "trainer.eval.holdout=0.25", "trainer.eval.every=5"],
            "data.holdout 0.2 and trainer.eval.holdout 0.25 disagree; keep data.holdout",
        ),
        (["trainer.eval.holdout=1.5"], "trainer.eval.holdout: Input should be less than 1"),
        (["trainer.eval.evry=5"], "trainer.eval.evry: unknown key; did you mean 'every'?"),
    ],
)
def test_bad_eval_settings_are_one_line_and_exit_2(sets, message):
    with pytest.raises(UserError, match="^.*$") as error:
        load_config("calculator", sets)
    assert message in str(error.value)
    args = ["train", "calculator", "--model", "tiny"]
    for item in sets:
        args += ["--set", item]
    result = CliRunner().invoke(build_app(), args)
    assert result.exit_code == 2, result.output
    assert message in result.output and len(result.output.strip().splitlines()) == 1


def test_eval_metrics_are_the_unbiased_pass_at_k_over_tasks():
    rewards = {0: [1.0, 0.0, 0.0, None], 1: [1.0] * 4}  # an unscored chain counts as 0
    chains = [Trajectory(reward=r, task_index=i) for i, group in rewards.items() for r in group]
    rows = task_results(chains, threshold=1.0)
    assert [row["correct"] for row in rows] == [1, 4]
    metrics = eval_metrics(rows, seconds=2.5)
    assert metrics["eval/reward_mean"] == pytest.approx(0.625)
    assert metrics["eval/pass@1"] == pytest.approx((0.25 + 1.0) / 2)
    assert metrics["eval/pass@2"] == pytest.approx((0.5 + 1.0) / 2)  # 1 - C(3,2)/C(4,2) = 0.5
    assert metrics["eval/pass@4"] == pytest.approx(1.0)
    assert metrics["eval/tasks"] == 2 and metrics["eval/seconds"] == 2.5
    assert eval_metrics([], 0.0) == {}
    assert format_eval_line(5, metrics) == (
        "eval after 5 steps | reward 0.625 | pass@1 0.625 | pass@2 0.750 | pass@4 1.000 | "
        "2 tasks 2.5s"
    )


EVAL_SETS = ("trainer.eval.every=2", "data.holdout=0.25", "trainer.eval.n=2")


def test_trainer_evaluates_held_out_tasks_at_start_every_and_end(recipe, tmp_path):  # noqa: F811
    run_dir = tmp_path / "run"
    config = make_config(recipe, "trainer.steps=3", *EVAL_SETS)
    result = Trainer(config, run_dir=run_dir, console=False).fit()
    records = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    evals = [r for r in records if "eval/reward_mean" in r]
    assert [r["step"] for r in evals] == [0, 2, 3]  # before step 1, after 2 updates, at the end
    assert [r["step"] for r in records if "reward/mean" in r] == [1, 2, 3]
    for record in evals:
        assert record["eval/tasks"] == 2  # 25% of 8 rows
        assert 0.0 <= record["eval/reward_mean"] <= 1.0
        assert {"eval/pass@1", "eval/pass@2"} <= record.keys()
    assert [e["updates"] for e in result.evals] == [0, 2, 3]
    # the held-out tasks are never trained on, and each eval rolls out n=2 chains per task
    folder = run_dir / "trajectories"
    held = {t.task["question"] for t in read_trajectories(folder / "eval-000003.jsonl")}
    assert len(read_trajectories(folder / "eval-000003.jsonl")) == 4 and len(held) == 2
    trained = {
        t.task["question"]
        for step in (1, 2, 3)
        for t in read_trajectories(folder / f"step-{step:06d}.jsonl")
    }
    assert trained and held.isdisjoint(trained)
    # the held-out rows are kept for `agentfly eval --data RUN_DIR/eval_tasks.jsonl`
    saved = [json.loads(x) for x in (run_dir / "eval_tasks.jsonl").read_text().splitlines()]
    assert {row["question"] for row in saved} == held
    assert (run_dir / "plot.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_resume_with_eval_repeats_nothing_and_matches_a_straight_run(recipe, tmp_path):  # noqa: F811
    straight = tmp_path / "straight"
    config = make_config(recipe, "trainer.steps=4", "trainer.save_every=2", *EVAL_SETS, *ON_CPU)
    Trainer(config, run_dir=straight, console=False).fit()
    split = tmp_path / "split"
    Trainer(config, run_dir=split, console=False).fit(stop_after=2)
    Trainer(config, run_dir=split, resume=True, console=False).fit()

    def eval_records(run_dir):
        lines = (run_dir / "metrics.jsonl").read_text().splitlines()
        return [
            {k: v for k, v in json.loads(x).items() if k != "time" and k != "eval/seconds"}
            for x in lines
            if "eval/" in x
        ]

    assert [r["step"] for r in eval_records(split)] == [0, 2, 4]
    assert eval_records(split) == eval_records(straight)
    a, b = weights(straight, 4), weights(split, 4)
    assert all(a[name].equal(b[name]) for name in a)


def test_steps_without_reward_spread_warn_once(recipe, tmp_path):  # noqa: F811
    zero = tmp_path / "zero_reward.py"
    zero.write_text("def zero(prediction, **fields):\n    return 0.0\n")
    fields = {**recipe["fields"], "reward": f"{zero}:zero"}
    config = load_config("calculator", [*recipe["sets"], "trainer.steps=4"], **fields)
    console = io.StringIO()
    Trainer(config, run_dir=tmp_path / "run", console_file=console).fit()
    text = console.getvalue()
    assert text.count("steps in a row gave all chains of each task the same reward") == 1
    assert "warning: 3 steps in a row" in text and "(every chain got 0)" in text
    assert "grpo advantages are zero" in text
    records = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [r["reward/groups_with_spread"] for r in records] == [0.0] * 4


def test_held_out_tasks_with_a_lone_surrogate_are_written_and_read_back(tmp_path):
    """A task text may hold what UTF-8 cannot encode (a model wrote it, a dataset kept it):
    eval_tasks.jsonl escapes it, and reading gives back the very same row."""
    rows = [{"question": "odd \ud800 text", "answer": "1"}, {"question": "plain", "answer": "2"}]
    held_out = HeldOutEval(EvalSplit(train=[], eval=rows), EvalSettings(every=1), total_steps=1)
    held_out.write_tasks(tmp_path)
    text = (tmp_path / EVAL_TASKS_FILE).read_text(encoding="utf-8")
    assert [json.loads(line) for line in text.splitlines()] == rows


def test_sft_task_files_escape_a_lone_surrogate(tmp_path):
    from agentfly_cli.train.sft.fine_tune import write_tasks

    task = {"question": "odd \udfff text", "answer": "1"}
    chain = Trajectory(task=task, group_id="g0")
    path = tmp_path / "tasks.jsonl"
    assert write_tasks([chain], path) == 1
    assert json.loads(path.read_text(encoding="utf-8")) == task
