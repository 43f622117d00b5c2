"""The warm start (``agentfly train --warm-start``): SFT on the packaged solutions of the
recipe's training tasks, then RL from the fine-tuned model."""

from __future__ import annotations

import importlib.util
import json

import pytest

from agentfly_cli.errors import UserError
from agentfly_cli.recipes.loader import load_config
from agentfly_cli.rollout.tasks import load_tasks
from agentfly_cli.settings.train import SolutionStep, WarmStartSettings
from agentfly_cli.train.sft.warm_start import solution_responses, solution_script
from agentfly_cli.trajectory import read_trajectories
from tests.helpers.recipe_checks import agentfly
from tests.helpers.sandbox_modes import SANDBOX_FLAGS


def test_a_solution_is_played_from_templates_and_list_fields():
    row = {"id": "x", "hops": [{"query": "A"}, {"query": "B"}], "line": ["e4", "e5", "Nf3"],
           "answer": "C"}  # fmt: skip
    steps = [
        SolutionStep(each="hops", say="SEARCH: {query}"),
        SolutionStep(each="line", every=2, say="MOVE: {item}"),
        "ANSWER: {answer}",
    ]
    assert solution_responses(row, steps) == [
        "SEARCH: A", "SEARCH: B", "MOVE: e4", "MOVE: Nf3", "ANSWER: C"
    ]  # fmt: skip
    looked = SolutionStep(
        each="line", every=2, say="MOVE: {item}", last=["LOOK: {item}", "MOVE: {item}"]
    )
    assert solution_responses(row, [looked]) == ["MOVE: e4", "LOOK: Nf3", "MOVE: Nf3"]
    one = {"line": ["Qh5"]}  # the only item is the last
    assert solution_responses(one, [looked]) == ["LOOK: Qh5", "MOVE: Qh5"]
    both = SolutionStep(each="line", every=2, say=["LOOK: {item}", "MOVE: {item}"])
    assert solution_responses(row, [both]) == ["LOOK: e4", "MOVE: e4", "LOOK: Nf3", "MOVE: Nf3"]
    assert solution_responses({"line": []}, [looked]) == []
    with pytest.raises(UserError, match="task x has no field 'square'"):
        solution_responses(row, [SolutionStep(each="line", say="{item}", last="{square}")])
    with pytest.raises(UserError, match="task x has no field 'solution'"):
        solution_responses(row, ["PYTHON: {solution}"])
    with pytest.raises(UserError, match="task x has no list field 'walkthrough'"):
        solution_responses(row, [SolutionStep(each="walkthrough", say="{item}")])
    with pytest.raises(UserError, match="has no packaged solutions"):
        solution_script([row], WarmStartSettings())


def test_search_qa_warm_starts_on_training_tasks_only_then_trains(tiny_model, tmp_path):
    if importlib.util.find_spec("bm25s") is None:
        pytest.skip("bm25s is not installed (pip install 'agentfly-cli[tasks]')")
    config = load_config("search_qa")
    data = config.data
    held = load_tasks(
        data.path, holdout=data.holdout, holdout_seed=data.holdout_seed, side="heldout"
    )
    run = tmp_path / "run"
    args = [
        "train", "search_qa", "--model", tiny_model, "--out", run, "--quiet", "--warm-start",
        "--set", "trainer.warm_start.limit=6", "--set", "trainer.warm_start.batch_size=3",
        "--set", "trainer.steps=1", "--set", "trainer.tasks_per_step=2", "--set", "rollout.n=2",
        "--set", "rollout.max_total_tokens=3000",
    ]  # fmt: skip
    result = agentfly(*args)
    assert result.exit_code == 0, result.output
    folder = run / "warm_start"
    chains = read_trajectories(folder / "chains.jsonl")
    assert len(chains) == 6 and all(c.reward == 1.0 for c in chains)  # every solution scored
    train = load_tasks(
        data.path, holdout=data.holdout, holdout_seed=data.holdout_seed, side="train"
    )
    assert [c.task["id"] for c in chains] == [row["id"] for row in train[:6]]
    assert not {c.task["id"] for c in chains} & {row["id"] for row in held}  # rows 3-5 are
    summary = json.loads((folder / "sft.json").read_text())
    assert summary["optimizer_steps"] == 2 and summary["train_chains"] == 6
    resolved = json.loads((run / "config.json").read_text())
    assert resolved["model"] == str(folder / "model")  # RL started from the fine-tuned model
    assert (run / "metrics.jsonl").read_text().count('"step"') >= 1
    made = (folder / "model" / "model.safetensors").stat().st_mtime
    resumed = agentfly(*args, "--resume", "--set", "trainer.steps=2")
    assert resumed.exit_code == 0, resumed.output
    assert (folder / "model" / "model.safetensors").stat().st_mtime == made  # reused


def test_a_recipe_without_solutions_says_so(tiny_model, tmp_path):
    result = agentfly(
        "train", "calculator", "--model", tiny_model, "--out", tmp_path / "run", "--quiet",
        "--warm-start",
    )  # fmt: skip
    assert result.exit_code == 2, result.output
    assert "has no packaged solutions" in result.output and "Traceback" not in result.output


def test_a_recipe_that_warm_starts_by_default_can_skip_it(tiny_model, tmp_path):
    assert load_config("code_math").trainer.warm_start.enabled  # the recipe's default
    run = tmp_path / "run"
    result = agentfly(
        "train", "code_math", "--model", tiny_model, "--out", run, "--quiet", "--no-warm-start",
        "--steps", "1", "--set", "trainer.tasks_per_step=1", "--set", "rollout.n=2",
        "--set", "trainer.eval.every=0", "--set", "rollout.max_total_tokens=3000",
        *SANDBOX_FLAGS,
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert not (run / "warm_start").exists()
    resolved = json.loads((run / "config.json").read_text())
    assert resolved["trainer"]["warm_start"]["enabled"] is False


def test_own_data_without_the_solution_fields_names_the_way_out(tiny_model, tmp_path):
    data = tmp_path / "mine.jsonl"
    data.write_text(json.dumps({"id": "m1", "question": "What is 2 + 3?", "answer": "5"}) + "\n")
    result = agentfly(
        "train", "code_math", "--model", tiny_model, "--data", data, "--out", tmp_path / "run",
        "--quiet", *SANDBOX_FLAGS,
    )  # fmt: skip
    assert result.exit_code == 2, result.output
    assert "task m1 has no field 'solution'" in result.output
    assert "--no-warm-start" in result.output and "Traceback" not in result.output


def test_the_warm_start_is_refused_in_each_of_several_ranks(tmp_path, monkeypatch):
    from agentfly_cli.train.sft.warm_start import warm_start

    monkeypatch.setenv("WORLD_SIZE", "2")
    with pytest.raises(UserError, match="not in each of 2 ranks.*--no-warm-start"):
        warm_start(load_config("code_math"), tmp_path)
    assert not (tmp_path / "warm_start").exists()


def test_a_balanced_warm_start_deals_its_limit_over_a_field():
    from agentfly_cli.train.sft.warm_start import balanced_subset
    from agentfly_cli.train.tasks.balance import deal_evenly

    kinds = "aaaabbc"  # a file sorted by kind: the first 5 rows would be a, a, a, a, b
    rows = [{"id": f"t{i}", "kind": kind} for i, kind in enumerate(kinds)]
    dealt = balanced_subset(rows, "kind", 5)
    assert [r["id"] for r in dealt] == ["t0", "t4", "t6", "t1", "t5"]
    assert [r["kind"] for r in balanced_subset(rows, "kind", None)] == list("abcabaa")
    assert len(deal_evenly(rows, "kind", 50, setting="x")) == 7
    with pytest.raises(UserError, match="trainer.warm_start.balance: 7 of 7 training tasks "
                       "have no field 'level'"):  # fmt: skip
        balanced_subset(rows, "level", 5)
    no_ids = [{"kind": "a"}, {"id": "t1", "kind": "b"}]
    with pytest.raises(UserError, match="of the 2 training tasks 1 have no id; give every"):
        balanced_subset(no_ids, "kind", 2)
    twice = [{"id": 3, "kind": "a"}, {"id": "3", "kind": "b"}]
    with pytest.raises(UserError, match="their ids repeat"):
        balanced_subset(twice, "kind", 2)


def test_search_qa_warm_starts_on_one_task_of_each_type(tiny_model, tmp_path):
    if importlib.util.find_spec("bm25s") is None:
        pytest.skip("bm25s is not installed (pip install 'agentfly-cli[tasks]')")
    data = load_config("search_qa").data
    train = load_tasks(
        data.path, holdout=data.holdout, holdout_seed=data.holdout_seed, side="train"
    )
    types = {row["type"] for row in train}
    assert len({row["type"] for row in train[: len(types)]}) < len(types)  # file order misses some
    run = tmp_path / "run"
    result = agentfly(
        "train", "search_qa", "--model", tiny_model, "--out", run, "--quiet", "--warm-start",
        "--set", f"trainer.warm_start.limit={len(types)}",
        "--set", "trainer.warm_start.balance=type",
        "--set", "trainer.steps=1", "--set", "trainer.tasks_per_step=1", "--set", "rollout.n=2",
        "--set", "rollout.max_total_tokens=3000",
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    chains = read_trajectories(run / "warm_start" / "chains.jsonl")
    assert sorted(c.task["type"] for c in chains) == sorted(types)  # one of each
    assert all(c.reward == 1.0 for c in chains)
    summary = json.loads((run / "warm_start" / "warm_start.json").read_text())
    assert summary["tasks"] == len(types) and summary["balance"] == "type"


def test_a_warm_start_that_leaves_kinds_out_says_how_to_deal_them(caplog):
    from agentfly_cli.train.sft.warm_start import warn_if_kinds_left_out

    rows = [{"id": f"t{i}", "kind": kind} for i, kind in enumerate("aaaabbc")]
    warn_if_kinds_left_out(rows[:4], rows, "kind")
    assert "first 4 training tasks hold no task of 2 of the kind values RL balances over " \
        "(b, c); set trainer.warm_start.balance: kind" in caplog.text  # fmt: skip
    caplog.clear()
    warn_if_kinds_left_out(rows[3:], rows, "kind")
    assert not caplog.text


@pytest.mark.parametrize("explicit_null", [False, True], ids=["default", "explicit-null"])
def test_an_explicit_null_balance_keeps_file_order_without_the_warning(
    tiny_model, tmp_path, caplog, explicit_null
):
    if importlib.util.find_spec("bm25s") is None:
        pytest.skip("bm25s is not installed (pip install 'agentfly-cli[tasks]')")
    from agentfly_cli.train.sft.warm_start import warm_start

    sets = [
        "trainer.warm_start.limit=2", "trainer.warm_start.batch_size=2", "trainer.balance=type",
        "rollout.max_total_tokens=3000",
    ]  # fmt: skip
    if explicit_null:
        sets.append("trainer.warm_start.balance=null")
    config = load_config("search_qa", sets, model=str(tiny_model))
    warm_start(config, tmp_path, console=False)
    warned = "set trainer.warm_start.balance: type to deal them evenly" in caplog.text
    assert warned != explicit_null
