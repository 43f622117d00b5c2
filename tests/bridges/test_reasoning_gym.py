"""The reasoning_gym bridge: generators (and weighted mixes) as recipes, their tasks seeded and
cached, the generator's own scorer as the reward, curriculum levels, and rollout, eval and
train through the CLI with gold and junk answers."""

from __future__ import annotations

import json

import pytest

pytest.importorskip(
    "reasoning_gym",
    reason="reasoning-gym is not installed: pip install 'agentfly-cli[reasoning-gym]'",
)

from agentfly_cli.errors import UserError  # noqa: E402
from agentfly_cli.recipes.loader import load_config  # noqa: E402
from agentfly_cli.trajectory import read_trajectories  # noqa: E402
from bridges_builtin import rg_tasks  # noqa: E402
from bridges_builtin.rg_recipe import GOLD, JUNK  # noqa: E402
from bridges_builtin.rg_reward import answer_in, reasoning_gym_score  # noqa: E402
from tests.helpers.recipe_checks import agentfly, write_jsonl  # noqa: E402

SMALL = ["--set", "reasoning_gym.size=24"]
RECIPE = "reasoning_gym:chain_sum"


def rows_of(config) -> list[dict]:
    return [json.loads(line) for line in open(config.data.path)]


def score(row: dict, reply: str | None, prediction: str | None = None) -> float:
    """The reward on a row, the reply as the chain's last assistant message."""

    class Chain:
        messages = [] if reply is None else [{"role": "assistant", "content": reply}]

    return reasoning_gym_score.score_sync(prediction, Chain(), **row).reward


# -- the recipe and its tasks ---------------------------------------------------------------------
def test_a_generator_is_a_recipe_with_levels_and_the_usual_split():
    config = load_config(RECIPE, ["reasoning_gym.size=24"])
    rows = rows_of(config)
    assert len(rows) == 24 and len({r["id"] for r in rows}) == 24
    assert sorted({r["level"] for r in rows}) == [0, 1, 2]  # the curriculum's first three
    assert {r["source"] for r in rows} == {"chain_sum"}
    assert config.trainer.curriculum.field == "level" and config.trainer.curriculum.levels == [
        0,
        1,
        2,
    ]
    assert config.data.holdout == 0.1 and config.model == "smollm2"
    assert [c.name for c in config.reward] == ["reasoning_gym_score"]
    assert config.rollout.stop == ["\n"] and config.chat.parser == "line"
    assert config.chat.examples[1]["content"].startswith("ANSWER: ")  # a worked example
    assert config.trainer.warm_start.responses == [GOLD]


def test_tasks_are_seeded_and_cached(cache):
    first = rows_of(load_config(RECIPE, ["reasoning_gym.size=24"]))
    files = list((cache / "tasks" / "reasoning_gym").iterdir())
    again = rows_of(load_config(RECIPE, ["reasoning_gym.size=24"]))
    assert again == first and list((cache / "tasks" / "reasoning_gym").iterdir()) == files
    for file in files:  # rebuilt from nothing: the very same rows
        file.unlink()
    assert rows_of(load_config(RECIPE, ["reasoning_gym.size=24"])) == first
    other = rows_of(load_config(RECIPE, ["reasoning_gym.size=24", "reasoning_gym.seed=1"]))
    assert [r["question"] for r in other] != [r["question"] for r in first]


def test_a_weighted_mix_and_options():
    config = load_config("reasoning_gym:chain_sum=3+basic_arithmetic", ["reasoning_gym.size=40"])
    rows = rows_of(config)
    counts = {s: sum(r["source"] == s for r in rows) for s in ("chain_sum", "basic_arithmetic")}
    assert counts == {"chain_sum": 30, "basic_arithmetic": 10}
    flat = load_config(RECIPE, ["reasoning_gym.size=6", "reasoning_gym.levels=0"])
    assert {r["level"] for r in rows_of(flat)} == {0} and flat.trainer.curriculum.field is None
    set_terms = load_config(
        RECIPE,
        [
            "reasoning_gym.size=6",
            "reasoning_gym.levels=0",
            "reasoning_gym.config={min_terms: 4, max_terms: 4}",
        ],
    )
    assert all(r["metadata"]["num_terms"] == 4 for r in rows_of(set_terms))


@pytest.mark.parametrize(
    ("spec", "sets", "message"),
    [
        (
            "reasoning_gym:chain_su",
            [],
            "unknown reasoning_gym generator 'chain_su'; did you mean chain_sum",
        ),
        ("reasoning_gym:chain_sum=0", [], "reasoning_gym:chain_sum=0: weight '0' of chain_sum"),
        (
            "reasoning_gym:chain_sum+chain_sum",
            [],
            "reasoning_gym:chain_sum+chain_sum: chain_sum is named twice",
        ),
        (
            "reasoning_gym",
            [],
            "recipe 'reasoning_gym' needs a parameter: reasoning_gym:NAME, e.g. "
            "reasoning_gym:chain_sum",
        ),
        (RECIPE, ["reasoning_gym.size=0"], "--set reasoning_gym.size must be at least 1"),
        (RECIPE, ["reasoning_gym.seed=x"], "--set reasoning_gym.seed: expected a whole number"),
        (RECIPE, ["reasoning_gym.sizes=3"], "--set reasoning_gym.sizes: unknown option"),
    ],
)
def test_bad_recipes_are_one_line(spec, sets, message):
    with pytest.raises(UserError) as caught:
        load_config(spec, sets)
    assert str(caught.value).startswith(message) and "\n" not in str(caught.value)


def test_an_unknown_generator_names_some_valid_ones():
    with pytest.raises(UserError) as caught:
        load_config("reasoning_gym:no_such_thing")
    assert "generators, e.g. ab, acre" in str(caught.value)


def test_without_the_library_the_recipe_is_listed_and_using_it_says_how_to_install(monkeypatch):
    from bridges_builtin import library

    monkeypatch.setattr(library, "installed", lambda module: False)
    listed = agentfly("recipes", "list", "--json")
    names = {item["name"] for item in json.loads(listed.stdout)}
    assert "reasoning_gym:NAME" in names and "humaneval" in names
    result = agentfly("rollout", RECIPE, "--limit", "1")
    assert result.exit_code == 2
    assert "pip install 'agentfly-cli[reasoning-gym]'" in result.output
    assert len(result.output.strip().splitlines()) == 1


# -- the reward ------------------------------------------------------------------------------------
def test_the_generators_own_scorer_on_the_answer_line():
    row = rows_of(load_config(RECIPE, ["reasoning_gym.size=6"]))[0]
    assert score(row, f"ANSWER: {row['answer']}") == 1.0
    assert score(row, f"I think so.\nANSWER: {row['answer']}") == 1.0
    assert score(row, "ANSWER: x") == 0.0
    assert 0 < score(row, f"ANSWER: 1{row['answer']}") < 1  # the library's partial credit
    assert score(row, f"{row['answer']}") == 0.0  # no ANSWER: line
    assert score(row, None, prediction=row["answer"]) == 1.0  # scored directly, no chain
    result = reasoning_gym_score.score_sync(None, None, **row)
    assert result.reward == 0.0 and result.extras["reason"] == "no ANSWER: line"


def test_answers_that_span_lines():
    config = load_config("reasoning_gym:rotate_matrix", ["reasoning_gym.size=3"])
    row = rows_of(config)[0]
    assert "\n" in row["answer"] and row["rg"]["multiline"] and config.rollout.stop == []
    assert score(row, GOLD.format(**row)) == 1.0
    assert score(row, f"ANSWER: {row['answer'].splitlines()[0]}") == 0.0
    assert answer_in("x\nANSWER: 1 2\n3 4\n", multiline=True) == "1 2\n3 4"
    assert answer_in("x\nANSWER: 1 2\n3 4\n", multiline=False) == "1 2"


def test_the_reward_scores_the_entry_the_library_generated():
    """arc_agi's scorer compares tuples, which JSON turns into lists: the row's own metadata
    would fail the gold answer, the rebuilt entry does not."""
    from reasoning_gym.factory import DATASETS

    row = rows_of(
        load_config("reasoning_gym:arc_agi", ["reasoning_gym.size=2", "reasoning_gym.levels=1"])
    )[0]
    plain = DATASETS["arc_agi"][0](config=DATASETS["arc_agi"][1]())
    as_stored = {"question": row["question"], "answer": row["answer"], "metadata": row["metadata"]}
    assert plain.score_answer(row["answer"], as_stored) < 1.0
    assert score(row, GOLD.format(**row)) == 1.0
    assert rg_tasks.rebuilt_entry(row["rg"])["question"] == row["question"]


def test_the_gold_and_junk_self_test_finds_the_broken_verifier():
    """game_of_life_halting scores any non-empty answer 1.0 (DESIGN.md): its junk answers tie
    with gold, so a self-test flags every task; chain_sum's do not."""

    def flagged(spec: str) -> list[str]:
        rows = rows_of(load_config(spec, ["reasoning_gym.size=8"]))
        return [
            row["id"]
            for row in rows
            if not all(score(row, GOLD.format(**row)) > score(row, junk) for junk in JUNK)
        ]

    assert flagged(RECIPE) == []
    assert len(flagged("reasoning_gym:game_of_life_halting")) == 8


# -- through the CLI -------------------------------------------------------------------------------
def script_for(config, answers) -> list[dict]:
    return [{"id": row["id"], "responses": [answers(row)]} for row in rows_of(config)]


@pytest.mark.parametrize(
    ("answers", "expected"),
    [(lambda row: GOLD.format(**row), 1.0), (lambda row: JUNK[0], 0.0), (lambda row: JUNK[1], 0.0)],
    ids=["gold", "junk", "no-answer-line"],
)
def test_rollout_and_eval_with_gold_and_junk(tiny_model, tmp_path, answers, expected):
    config = load_config(RECIPE, ["reasoning_gym.size=24"])
    script = write_jsonl(tmp_path / "script.jsonl", script_for(config, answers))
    common = [
        "--model", tiny_model, "--backend", "scripted", "--script", script, *SMALL,
        "--set", "rollout.max_tokens_per_turn=96", "--n", "2", "--quiet",
    ]  # fmt: skip
    out = tmp_path / "rollout.jsonl"
    result = agentfly("rollout", RECIPE, "--limit", "6", "--out", out, *common)
    assert result.exit_code == 0, result.output
    chains = read_trajectories(out)
    assert len(chains) == 12
    for chain in chains:
        chain.check()
        assert chain.reward == expected, (chain.task["id"], chain.reward_extras)
    evaluated = agentfly("eval", RECIPE, "--out", tmp_path / "eval.jsonl", "--json", *common)
    assert evaluated.exit_code == 0, evaluated.output
    report = json.loads(evaluated.stdout)["eval"]
    held = [t for t in report["tasks"]]
    assert len(held) == 3  # 10% of 24, rounded up: the recipe's held-out tasks
    assert report["overall"]["pass@1"] == expected


def test_train_warm_starts_on_gold_then_takes_rl_steps(tiny_model, tmp_path):
    run = tmp_path / "run"
    result = agentfly(
        "train", RECIPE, "--model", tiny_model, "--out", run, "--quiet", *SMALL, "--warm-start",
        "--set", "trainer.warm_start.limit=6", "--set", "trainer.warm_start.batch_size=6",
        "--set", "trainer.steps=2", "--set", "trainer.tasks_per_step=2", "--set", "rollout.n=2",
        "--set", "rollout.max_tokens_per_turn=8", "--set", "trainer.eval.every=0",
        "--set", "trainer.telemetry.sinks=[jsonl]",
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    gold = read_trajectories(run / "warm_start" / "chains.jsonl")
    assert len(gold) == 6 and [c.reward for c in gold] == [1.0] * 6
    assert {c.task["level"] for c in gold} == {0, 1, 2}  # dealt over the levels
    lines = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    assert [line["step"] for line in lines] == [1, 2]
    assert all(0.0 <= line["reward/mean"] <= 1.0 for line in lines)
    assert all(line["curriculum/level"] == 0 for line in lines)  # the random model stays put


def test_recipes_check_flags_the_broken_verifier():
    """`agentfly recipes check` plays gold and junk through the engine: chain_sum passes,
    game_of_life_halting (every non-empty answer scores 1.0) is flagged, exit code 1."""
    good = agentfly("recipes", "check", RECIPE, "--model", "tiny", "--limit", "12", "--json")
    assert good.exit_code == 0, good.output
    broken = agentfly(
        "recipes", "check", "reasoning_gym:game_of_life_halting", "--model", "tiny",
        "--limit", "12", "--json",
    )  # fmt: skip
    assert broken.exit_code == 1, broken.output
    (report,) = json.loads(broken.stdout)["recipes"]
    assert report["flagged_count"] == 12 and report["junk"]["junk[0]"]["fooled"] == 12
    (report,) = json.loads(good.stdout)["recipes"]
    assert report["flagged_count"] == 0 and report["gold"]["min"] == 1.0
