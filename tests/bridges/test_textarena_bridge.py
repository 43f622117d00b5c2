"""The textarena bridge as a recipe: textarena:GAME built from seeded games, the game speaking
first, and rollout, eval and train through the CLI with gold (the solver's moves) and junk."""

from __future__ import annotations

import json

import pytest

INSTALL = "pip install 'agentfly-cli[textarena]'"
pytest.importorskip("textarena", reason=f"the textarena bridge needs textarena: {INSTALL}")

from agentfly_cli.errors import UserError  # noqa: E402
from agentfly_cli.recipes.loader import load_config  # noqa: E402
from agentfly_cli.trajectory import read_trajectories  # noqa: E402
from tests.helpers.recipe_checks import agentfly, write_jsonl  # noqa: E402

RECIPE = "textarena:GuessTheNumber-v0"
SMALL = ["--set", "textarena.size=20"]


def rows_of(config) -> list[dict]:
    return [json.loads(line) for line in open(config.data.path)]


def test_a_game_is_a_recipe_whose_env_speaks_first():
    config = load_config(RECIPE, ["textarena.size=20"])
    rows = rows_of(config)
    assert [r["seed"] for r in rows] == list(range(20))
    assert all(r["game"] == "GuessTheNumber-v0" and r["solution"] for r in rows)
    assert config.rollout.opening_env == "textarena" and config.tools == ["textarena_move"]
    assert [c.name for c in config.reward] == ["env_reward"]
    assert config.rollout.max_turns == 10  # the game's own turn limit
    assert config.data.holdout == 0.1 and config.check.skip_junk == ["other_task"]
    again = rows_of(load_config(RECIPE, ["textarena.size=20", "textarena.seed=5"]))
    assert [r["seed"] for r in again] == list(range(5, 25))


@pytest.mark.parametrize(
    ("param", "sets", "message"),
    [
        ("Chess-v0", [], "not a single-player textarena game"),
        ("GuessTheNumber-v0", ["textarena.size=1"], "textarena.size=1: give a whole number >= 2"),
        ("GuessTheNumber-v0", ["textarena.colour=red"], "unknown option of textarena"),
    ],
)
def test_bad_recipes_are_one_line(param, sets, message):
    with pytest.raises(UserError, match=message):
        load_config(f"textarena:{param}", sets)


def _script(tmp_path, config, moves) -> str:
    rows = [{"id": row["id"], "responses": moves(row)} for row in rows_of(config)]
    return str(write_jsonl(tmp_path / "script.jsonl", rows))


@pytest.mark.parametrize(
    ("moves", "gold"),
    [
        (lambda row: [f"MOVE: {m}" for m in row["solution"]], True),
        (lambda row: ["MOVE: [1]"] * 12, False),  # the same guess again: invalid, then over
        (lambda row: ["I do not know."], False),  # no move at all: the game never ends
    ],
    ids=["gold", "junk", "no-move"],
)
def test_rollout_and_eval_with_gold_and_junk(tiny_model, tmp_path, moves, gold):
    config = load_config(RECIPE, ["textarena.size=20"])
    common = [
        "--model", tiny_model, "--backend", "scripted", "--script",
        _script(tmp_path, config, moves), *SMALL, "--n", "2", "--quiet",
    ]  # fmt: skip
    out = tmp_path / "rollout.jsonl"
    result = agentfly("rollout", RECIPE, "--limit", "4", "--out", out, *common)
    assert result.exit_code == 0, result.output
    chains = read_trajectories(out)
    assert len(chains) == 8
    for chain in chains:
        chain.check()
        assert chain.messages[1]["content"].startswith("You are Player 0")  # the game's opening
        if gold:
            assert chain.finish_reason == "env_done" and chain.reward == 1.0
            assert chain.env_reports[-1]["info"]["reason"].startswith("Congratulations")
        else:
            assert chain.reward < 1.0
    evaluated = agentfly("eval", RECIPE, "--out", tmp_path / "eval.jsonl", "--json", *common)
    assert evaluated.exit_code == 0, evaluated.output
    report = json.loads(evaluated.stdout)["eval"]
    assert len(report["tasks"]) == 2  # 10% of 20: the recipe's held-out games
    assert (report["overall"]["pass@1"] == 1.0) is gold


def test_train_warm_starts_on_a_few_games_then_takes_rl_steps(tiny_model, tmp_path):
    run = tmp_path / "run"
    result = agentfly(
        "train", RECIPE, "--model", tiny_model, "--out", run, "--quiet", *SMALL,
        "--set", "trainer.steps=2", "--set", "trainer.tasks_per_step=2", "--set", "rollout.n=2",
        "--set", "trainer.eval.every=0", "--set", "trainer.telemetry.sinks=[jsonl]",
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    warm = json.loads((run / "warm_start" / "warm_start.json").read_text())
    assert warm["tasks"] == 8, warm  # the recipe's default: 8 games' winning moves
    lines = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    assert [line["step"] for line in lines] == [1, 2]
    assert all(0.0 <= line["reward/mean"] <= 1.0 for line in lines)


def test_recipes_check_tells_the_winning_moves_from_junk(tmp_path):
    result = agentfly("recipes", "check", RECIPE, "--model", "tiny", "--limit", "6", *SMALL)
    assert result.exit_code == 0, result.output
    # another game's winning moves win game s1 too (bisection prefixes): not junk, so the
    # recipe leaves that built-in junk out; played anyway, the check flags it
    played = agentfly(
        "recipes", "check", RECIPE, "--model", "tiny", "--limit", "6", "--json", *SMALL,
        "--set", "check.skip_junk=[]",
    )  # fmt: skip
    assert played.exit_code == 1, played.output
    flagged = json.loads(played.stdout)
    assert "GuessTheNumber-v0-s1" in json.dumps(flagged)
