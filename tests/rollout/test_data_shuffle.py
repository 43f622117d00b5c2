"""``data.shuffle`` (``--shuffle``): a seeded shuffle before ``limit``, so that a limit over a
sorted file still draws from all of it; deterministic by ``data.shuffle_seed``."""

from __future__ import annotations

import json

import pytest

from agentfly_cli.recipes.loader import load_config
from agentfly_cli.rollout.tasks import load_tasks
from agentfly_cli.settings.train import EvalSettings
from agentfly_cli.train.tasks.evaluation import split_tasks
from tests.cli.test_cli_bad_input import agentfly

KINDS = ("add", "sub", "mul")


@pytest.fixture
def sorted_file(tmp_path):
    """30 tasks sorted by kind: the first 10 are all 'add'."""
    path = tmp_path / "sorted.jsonl"
    rows = [{"question": f"{k} {i}", "answer": "1", "kind": k} for k in KINDS for i in range(10)]
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


def kinds(rows) -> set[str]:
    return {row["kind"] for row in rows}


def test_a_limit_without_shuffle_takes_the_first_rows(sorted_file):
    assert kinds(load_tasks(sorted_file, 9)) == {"add"}


def test_a_shuffled_limit_draws_from_the_whole_file_the_same_way_each_time(sorted_file):
    first = load_tasks(sorted_file, 9, shuffle_seed=0)
    assert kinds(first) == set(KINDS)
    assert load_tasks(sorted_file, 9, shuffle_seed=0) == first
    other = load_tasks(sorted_file, 9, shuffle_seed=1)
    assert other != first and len(other) == 9
    everything = load_tasks(sorted_file, shuffle_seed=0)
    assert sorted(map(json.dumps, everything)) == sorted(map(json.dumps, load_tasks(sorted_file)))


def test_the_shuffle_comes_after_the_holdout_and_where(sorted_file):
    split = {"holdout": 0.5, "holdout_seed": 0, "side": "heldout"}
    held = load_tasks(sorted_file, **split)
    drawn = load_tasks(sorted_file, 4, {"kind": ["add", "mul"]}, shuffle_seed=0, **split)
    assert all(row in held and row["kind"] in ("add", "mul") for row in drawn)


def test_trainer_eval_tasks_follow_data_shuffle(sorted_file):
    data = load_config(None, **{"data.path": str(sorted_file), "data.shuffle": True}).data
    settings = EvalSettings(every=1, path=str(sorted_file), limit=9)
    assert kinds(split_tasks([], settings, data=data).eval) == set(KINDS)
    plain = data.model_copy(update={"shuffle": False})
    assert kinds(split_tasks([], settings, data=plain).eval) == {"add"}
    # with data.holdout the held-out side is the same either way; the shuffle picks the 9
    held = EvalSettings(every=1, limit=9)
    split = {"holdout": 0.5, "holdout_seed": 0, "side": "heldout"}
    side = load_tasks(sorted_file, **split)
    shuffled = split_tasks([], held, data=data.model_copy(update={"holdout": 0.5})).eval
    in_order = split_tasks([], held, data=plain.model_copy(update={"holdout": 0.5})).eval
    assert in_order == side[:9] and shuffled != in_order
    assert all(row in side for row in shuffled) and len(shuffled) == 9


def test_eval_shuffle_flag_scores_every_kind_of_a_sorted_file(tiny_model, sorted_file):
    script = sorted_file.parent / "script.jsonl"
    script.write_text(json.dumps({"responses": ["1"]}) + "\n")
    out = sorted_file.parent / "eval.jsonl"
    runs = []
    seed = ["--set", "data.shuffle_seed=4"]
    for flags in ([], ["--shuffle"], ["--shuffle"], ["--shuffle", *seed]):
        result = agentfly("eval", "--model", tiny_model, "--backend", "scripted", "--script",
                          script, "--data", sorted_file, "--reward", "exact_match", "--limit",
                          "9", "--n", "1", "--quiet", "--out", out, *flags)  # fmt: skip
        assert result.exit_code == 0, result.output
        runs.append([json.loads(line)["task"] for line in out.read_text().splitlines()])
    assert kinds(runs[0]) == {"add"}
    assert kinds(runs[1]) == set(KINDS) and runs[1] == runs[2]
    assert runs[3] != runs[1] and len(runs[3]) == 9
