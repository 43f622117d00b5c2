"""A recipe's held-out tasks (``data.holdout``): fixed by the recipe's seed, read by no phase
that trains, scored by ``agentfly eval`` and the trainer's held-out eval."""

from __future__ import annotations

import json

import pytest

from agentfly_cli.errors import UserError
from agentfly_cli.recipes.loader import load_config
from agentfly_cli.rollout.tasks import held_out_indices, load_tasks
from agentfly_cli.trajectory import read_trajectories
from tests.helpers.recipe_checks import agentfly, write_jsonl

RECIPES = ["calculator", "code_math", "search_qa", "chess_puzzles", "textworld", "scienceworld"]


def sides(config) -> tuple[list[dict], list[dict]]:
    data = config.data
    kwargs = {"holdout": data.holdout, "holdout_seed": data.holdout_seed}
    train = load_tasks(data.path, data.limit, data.where, side="train", **kwargs)
    held = load_tasks(data.path, data.limit, data.where, side="heldout", **kwargs)
    return train, held


@pytest.mark.parametrize("recipe", RECIPES)
def test_every_recipe_holds_out_a_tenth_whatever_the_run_seed(recipe):
    config = load_config(recipe)
    assert config.data.holdout == 0.1 and config.data.split == "train"
    train, held = sides(config)
    everything = load_tasks(config.data.path)
    ids = [row["id"] for row in everything]
    assert len(held) == -(-len(everything) // 10)
    assert sorted(r["id"] for r in train + held) == sorted(ids)
    assert not {r["id"] for r in train} & {r["id"] for r in held}
    reseeded = load_config(recipe, ["trainer.seed=7", "rollout.seed=7"])
    assert sides(reseeded) == (train, held)
    moved = load_config(recipe, ["data.holdout_seed=1"])
    assert sides(moved)[1] != held  # the recipe's seed is what fixes it


def test_where_and_limit_never_move_a_task_across(tmp_path):
    rows = [{"id": f"t{i}", "question": "q", "kind": "a" if i % 3 else "b"} for i in range(60)]
    path = write_jsonl(tmp_path / "rows.jsonl", rows)
    held = {f"t{i}" for i in held_out_indices(60, 0.2, 5)}
    for where, limit in [({}, None), ({"kind": "b"}, None), ({"kind": "a"}, 4)]:
        for side in ("train", "heldout"):
            got = load_tasks(path, limit, where, holdout=0.2, holdout_seed=5, side=side)
            assert got and all((row["id"] in held) == (side == "heldout") for row in got)
            assert all(row["kind"] == where["kind"] for row in got) if where else True
    assert len(load_tasks(path, None, {}, holdout=0.2, holdout_seed=5, side="all")) == 60
    with pytest.raises(UserError, match="leaves none to train on"):
        load_tasks(path, holdout=0.999, side="train")


def test_training_never_reads_a_held_out_task_and_evaluates_them(tiny_model, tmp_path):
    """A tiny-model run of the calculator recipe: the rows it trained on are all on the train
    side, and its eval tasks (written to the run folder) are all held out."""
    config = load_config("calculator")
    train_side, held_side = sides(config)
    held_ids = {row["id"] for row in held_side}
    run = tmp_path / "run"
    result = agentfly(
        "train", "calculator", "--model", tiny_model, "--out", run, "--quiet",
        "--set", "trainer.steps=2", "--set", "trainer.tasks_per_step=8", "--set", "rollout.n=2",
        "--set", "trainer.eval.every=2", "--set", "trainer.eval.limit=3",
        "--set", "trainer.eval.n=1", "--set", "rollout.max_total_tokens=600",
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    trained = {
        t.task["id"] for step in sorted((run / "trajectories").glob("step-*.jsonl"))
        for t in read_trajectories(step)
    }  # fmt: skip
    assert len(trained) == 16 and not trained & held_ids
    evaluated = [json.loads(line)["id"] for line in (run / "eval_tasks.jsonl").open()]
    assert evaluated == [row["id"] for row in held_side[:3]]


def test_eval_scores_the_held_out_tasks_and_scripts_follow_task_ids(tiny_model, tmp_path):
    """`agentfly eval` reads the held-out side; script lines with ids serve their own task
    wherever it falls (here: a script for every row, in the file's order)."""
    config = load_config("calculator")
    everything = load_tasks(config.data.path)
    script = [{"id": row["id"], "responses": [f"ANSWER: {row['answer']}"]} for row in everything]
    out = tmp_path / "eval.jsonl"
    result = agentfly(
        "eval", "calculator", "--model", tiny_model, "--backend", "scripted", "--n", "1",
        "--script", write_jsonl(tmp_path / "script.jsonl", script), "--limit", "6",
        "--out", out, "--quiet",
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    trajectories = read_trajectories(out)
    held = [row["id"] for row in sides(config)[1]]
    assert [t.task["id"] for t in trajectories] == held[:6]
    assert all(t.reward == 1.0 for t in trajectories)  # each task got its own answer


def test_a_script_without_the_tasks_id_is_one_line(tiny_model, tmp_path):
    script = [{"id": "nope", "responses": ["ANSWER: 1"]}]
    result = agentfly(
        "rollout", "calculator", "--model", tiny_model, "--backend", "scripted", "--n", "1",
        "--script", write_jsonl(tmp_path / "script.jsonl", script), "--limit", "1", "--quiet",
        "--out", tmp_path / "out.jsonl",
    )  # fmt: skip
    assert result.exit_code == 2
    assert "the script's lines have ids, but none is" in result.output
    assert "Traceback" not in result.output


def test_other_data_is_used_whole(tmp_path):
    rows = [{"id": f"t{i}", "question": "q", "answer": "1"} for i in range(10)]
    path = write_jsonl(tmp_path / "mine.jsonl", rows)
    assert (
        load_config("calculator", ["data.split=train"], **{"data.path": str(path)}).data.holdout
        == 0
    )
    assert load_config("calculator", [f"data.path={path}"]).data.holdout == 0
    kept = load_config("calculator", [f"data.path={path}", "data.holdout=0.2"])
    assert kept.data.holdout == 0.2


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ["--set", "data.holdout=0", "--set", "data.split=heldout"],
            "split: heldout needs data.holdout",
        ),
        (["--set", "data.split=heldout"], "data.split: heldout would train on the held-out tasks"),
        (["--set", "data.holdout=1"], "data.holdout: Input should be less than 1"),
    ],
)
def test_bad_split_settings_are_one_line_and_exit_2(tiny_model, tmp_path, args, message):
    result = agentfly(
        "train", "calculator", "--model", tiny_model, "--out", tmp_path / "run", "--quiet", *args
    )
    assert result.exit_code == 2, result.output
    assert message in result.output and "Traceback" not in result.output
