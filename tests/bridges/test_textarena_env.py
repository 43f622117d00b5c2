"""The textarena bridge's env: seeded games that stay seeded side by side, the move tool's
reports, and the solutions the task rows carry."""

from __future__ import annotations

import asyncio
import random

import pytest

INSTALL = "pip install 'agentfly-cli[textarena]'"
pytest.importorskip("textarena", reason=f"the textarena bridge needs textarena: {INSTALL}")

from agentfly_cli.errors import UserError  # noqa: E402
from bridges_builtin import textarena_tasks  # noqa: E402
from bridges_builtin.textarena_env import (  # noqa: E402
    TextArenaEnv,
    check_game,
    single_player_games,
    textarena_move,
)
from bridges_builtin.textarena_tasks import game_rows  # noqa: E402


async def _play(row: dict, moves: list[str]) -> tuple[dict, list]:
    env = TextArenaEnv()
    opening = await env.reset(row)
    results = [await textarena_move.invoke({"action": move}, env=env) for move in moves]
    await env.close()
    return opening, results


def test_the_solution_of_each_seeded_game_wins_with_the_games_own_reward():
    rows = game_rows("GuessTheNumber-v0", 4) + game_rows("TowerOfHanoi-v0", 1)
    for row in rows:
        opening, results = asyncio.run(_play(row, row["solution"]))
        assert opening["info"] == {"game": row["game"], "seed": row["seed"]}
        assert "Player 0" in opening["observation"] or "Tower of Hanoi" in opening["observation"]
        *moves, last = results
        assert all("done" not in r.info for r in moves)  # only the end reports
        assert last.info["done"] is True and last.info["reward"] == 1.0
        assert "Congratulations" in last.observation


def test_a_wrong_move_ends_the_game_below_the_winning_reward():
    row = game_rows("GuessTheNumber-v0", 1)[0]
    _opening, results = asyncio.run(_play(row, ["no brackets here"] * 2))
    assert "done" not in results[0].info  # the game forgives one invalid move
    assert "Invalid move format" in results[0].observation
    assert results[-1].info["done"] is True
    assert results[-1].info["reward"] < 1.0
    assert results[-1].info["invalid_move"] is True


def test_concurrent_games_play_as_they_would_alone_and_leave_the_process_random_alone():
    row = game_rows("Minesweeper-v0-small", 1, first_seed=7)[0]
    moves = ["[1 1]", "[2 2]", "[3 3]"]
    alone = asyncio.run(_play(row, moves))

    async def side_by_side():
        others = [game_rows("Sudoku-v0-easy", 1, first_seed=s)[0] for s in range(3)]
        return await asyncio.gather(
            _play(row, moves), *(_play(other, ["[1 1 1]"]) for other in others)
        )

    random.seed(99)
    expected_next = random.Random(99).random()
    together = asyncio.run(side_by_side())[0]
    assert random.random() == expected_next  # textarena's reset seeded nothing of ours
    assert together[0] == alone[0]
    assert [r.observation for r in together[1]] == [r.observation for r in alone[1]]


def test_only_single_player_games_are_accepted_with_one_line_naming_some():
    games = single_player_games()
    assert "GuessTheNumber-v0" in games and "Chess-v0" not in games
    assert not any(g.endswith(("-raw", "-train")) for g in games)
    for bad in ("Chess-v0", "NoSuchGame-v9", None):
        with pytest.raises(UserError, match="not a single-player textarena game; .* e.g. "):
            check_game(bad, "task field 'game'")


def test_a_game_that_cannot_start_here_is_one_line(monkeypatch):
    import textarena

    def no_data(game_id):
        raise LookupError("Resource words not found.\nPlease use the NLTK Downloader")

    monkeypatch.setattr(textarena, "make", no_data)
    with pytest.raises(UserError, match=r"'Wordle-v0' does not start on this machine \(Lookup"):
        textarena_tasks.game_rows("Wordle-v0", 2)


def test_a_task_with_a_bad_seed_or_no_game_is_refused_at_reset():
    env = TextArenaEnv()
    with pytest.raises(UserError, match="'seed' must be an integer"):
        asyncio.run(env.reset({"game": "GuessTheNumber-v0", "seed": "1"}))
    with pytest.raises(UserError, match="not a single-player"):
        asyncio.run(env.reset({"seed": 1}))
