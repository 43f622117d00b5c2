"""The ``chess_puzzles`` recipe: packaged puzzles, the env (Stockfish as opponent and judge) and
its tools, the replayed reward, scripted and tiny-model rollouts, and a short training run."""

from __future__ import annotations

import asyncio
import json
import os
import signal
from pathlib import Path

import pytest

from agentfly_cli.errors import UserError
from agentfly_cli.recipes.loader import load_config
from tests.helpers.paths import load_script
from tests.helpers.recipe_checks import (
    SOLUTION_ROWS,
    agentfly,
    budget,
    check_packaged_solutions_score,
    check_short_training_run,
    check_tiny_model_rollout,
    check_warm_start_plays_solutions,
    json_call,
    needs_smollm2,
    scripted_rollout,
)

chess = pytest.importorskip("chess", reason="python-chess is not installed (pip install chess)")

from envs_builtin import chess_env  # noqa: E402
from envs_builtin.chess_env import (  # noqa: E402
    ChessPuzzleEnv,
    PuzzleError,
    chess_board,
    chess_legal_moves,
    chess_move,
    chess_replies,
    find_stockfish,
    parse_move,
)
from rewards_builtin.chess_puzzles import chess_solved, played_moves  # noqa: E402

try:
    STOCKFISH: str | None = find_stockfish()
except UserError:
    STOCKFISH = None
needs_stockfish = pytest.mark.skipif(
    STOCKFISH is None,
    reason="Stockfish not found (Debian/Ubuntu: apt-get install stockfish; looked on PATH and "
    "at /usr/games/stockfish)",
)

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "agentfly_cli" / "recipes" / "data" / "chess_puzzles.jsonl"
ROWS = [json.loads(line) for line in DATA.read_text().splitlines() if line.strip()]
M1 = next(r for r in ROWS if r["mate_in"] == 1)
M1_BLACK = next(r for r in ROWS if r["mate_in"] == 1 and r["side"] == "black")
M2 = next(r for r in ROWS if r["mate_in"] == 2)
SMALL_RUN = [
    "--set", "rollout.max_tokens_per_turn=64",  # the tiny BPE tokenizer spends more tokens
    "--set", "rollout.max_total_tokens=8192",
]  # fmt: skip


def wrong_move(row) -> str:
    """A legal first move that does not force mate in time (UCI)."""
    board = chess.Board(row["fen"])
    return next(m.uci() for m in board.legal_moves if m.uci() not in row["winning_moves"])


def stockfish_children() -> list[int]:
    """Stockfish processes whose parent is this test process."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        comm, rest = stat[stat.index("(") + 1 : stat.rindex(")")], stat[stat.rindex(")") + 2 :]
        state, ppid = rest.split()[:2]
        if comm == "stockfish" and int(ppid) == os.getpid() and state != "Z":
            found.append(int(entry.name))
    return found


def load_generator():
    return load_script("scripts/make_chess_puzzles_data.py")


def run(coroutine):
    return asyncio.run(coroutine)


# -- data ----------------------------------------------------------------------------------------
def test_packaged_puzzles_are_checkmates_in_n():
    assert 300 <= len(ROWS) <= 500 and len({r["id"] for r in ROWS}) == len(ROWS)
    assert len({r["fen"] for r in ROWS}) == len(ROWS)
    assert {(r["mate_in"], r["side"]) for r in ROWS} == {
        (1, "white"), (1, "black"), (2, "white"), (2, "black"),
    }  # fmt: skip
    for row in ROWS:
        board = chess.Board(row["fen"])
        assert board.is_valid() and chess_env.side_name(board.turn).lower() == row["side"]
        assert row["fen"] in row["question"] and row["question"].startswith("Chess puzzle")
        assert len(row["solution"]) == 2 * row["mate_in"] - 1
        assert row["solution"][0] in row["winning_moves"]
        line = zip(row["solution"], row["solution_san"], row["solution_listed"], strict=True)
        for move, san, listed in line:
            assert board.san(chess.Move.from_uci(move)) == san
            assert listed in chess_env.legal_sans(board)  # as the move list shows it
            board.push_uci(move)
        assert board.is_checkmate()
        assert row["opening_listed"] == row["solution_listed"][:-1:2]
        board.pop()  # the mating position: the looks are its listed checks in order
        checks = [m for m in chess_env.legal_sans(board) if m.endswith("+")]
        search = row["search_listed"]
        assert 1 <= len(search) <= 3 and search[:-1] == checks[: len(search) - 1]
        mates = [_mates(board, board.parse_san(m)) for m in search]
        assert mates == [False] * (len(search) - 1) + [True], row["id"]  # the first mate listed
        assert checks.index(search[-1]) <= checks.index(row["solution_listed"][-1])
        if row["mate_in"] == 1:  # every listed first move mates, and no other move does
            start = chess.Board(row["fen"])
            mating = [m.uci() for m in start.legal_moves if _mates(start, m)]
            assert mating == row["winning_moves"]


def _mates(board, move) -> bool:
    board.push(move)
    try:
        return board.is_checkmate()
    finally:
        board.pop()


def test_mate_in_two_puzzles_are_proven_by_brute_force():
    generator = load_generator()
    for row in [r for r in ROWS if r["mate_in"] == 2][:3]:
        board = chess.Board(row["fen"])
        assert generator.forces_mate(board, 2) and not generator.forces_mate(board, 1)
        assert generator.winning_moves(board, 2) == row["winning_moves"]
        assert board.fen() == row["fen"]  # the proof leaves the board as it was


# -- moves and boards (python-chess only) --------------------------------------------------------
def test_parse_move_takes_san_and_uci():
    board = chess.Board()
    for text in ("e4", "e2e4", "E2E4", "1. e4", "e4!", " e4 "):
        assert parse_move(board, text).uci() == "e2e4"
    assert parse_move(board, "Nf3").uci() == "g1f3"
    # several words, as small models write them: the first is the move
    assert parse_move(board, "Nf3 Nc6 Bb5").uci() == "g1f3"
    assert parse_move(board, "1. d4, d5").uci() == "d2d4"
    for text in ("Ke2", "e5", "e2e5", "", "   ", None, "Bg5 Nf3", "x" * 120, "--", "0000", "Z0"):
        with pytest.raises(chess_env.IllegalMoveError):
            parse_move(board, text)
    with pytest.raises(chess_env.IllegalMoveError, match="White to move. Legal moves include: "):
        parse_move(board, "Qh5")


def test_board_text_and_legal_moves_list_checks_first_without_giving_mates_away():
    board = chess.Board(M1["fen"])
    text = chess_env.render_board(board)
    assert text.splitlines()[0].startswith("8 ") and text.splitlines()[-1] == "  a b c d e f g h"
    sans = chess_env.legal_sans(board)
    assert len(sans) == M1["legal_moves"] and not any("#" in s for s in sans)
    checking = {board.san(m).rstrip("+#") + "+" for m in board.legal_moves if board.gives_check(m)}
    assert checking and set(sans[: len(checking)]) == checking  # checks first, all marked +
    assert not any(s.endswith("+") for s in sans[len(checking) :])
    mate = board.san(chess.Move.from_uci(M1["solution"][0]))
    assert mate.endswith("#") and mate[:-1] + "+" in sans  # the mate reads as a check
    # a move copied from the list, mark and all, is understood
    assert parse_move(board, mate[:-1] + "+") == chess.Move.from_uci(M1["solution"][0])


def test_puzzle_question_renders_the_packaged_questions():
    # the data maker and scripts/chess_moves.py --derive write questions with it
    rows = [json.loads(line) for line in DATA.read_text(encoding="utf-8").splitlines()]
    for row in rows:
        question = chess_env.puzzle_question(chess.Board(row["fen"]), row["mate_in"])
        assert question == row["question"], row["id"]


# -- the env and its tools -----------------------------------------------------------------------
async def started(**options) -> ChessPuzzleEnv:
    env = ChessPuzzleEnv(**options)
    await env.start()
    return env


@needs_stockfish
def test_env_solves_a_mate_in_two_across_steps():
    async def main():
        env = await started()
        first = await env.reset(M2)
        assert first["status"] == "playing" and first["moves_left"] == 2
        assert first["player"] == first["turn"] == M2["side"] and "legal_moves" not in first
        board = await chess_board(env=env)
        assert board.ok and M2["fen"] in board.observation and "within 2 moves" in board.observation
        listed = (await chess_legal_moves(env=env)).observation
        assert listed.startswith("Legal moves: ") and M2["solution_san"][0].rstrip("+#") in listed
        one = await chess_move(env=env, move=M2["solution_san"][0])  # SAN
        assert one.ok and not one.terminal
        assert one.observation.startswith(f"You played {M2['solution_san'][0]} (")
        assert "Opponent replied " in one.observation and "within 1 move." in one.observation
        state = await env.step({"op": "state"})  # the opponent's reply is on the board
        assert state["turn"] == M2["side"] and state["moves_made"] == 1
        reply = one.observation.split("Opponent replied ")[1].split(" (")[1].split(")")[0]
        mate = M2["solution"][2] if reply == M2["solution"][1] else None
        if mate is None:  # Stockfish defended otherwise: find the mate on the board
            board = chess.Board(state["fen"])
            mate = next(m.uci() for m in board.legal_moves if _mates(board, m))
        two = await chess_move(env=env, move=mate)  # UCI
        assert two.ok and two.terminal and two.observation.endswith("Checkmate! Puzzle solved.")
        after = await chess_move(env=env, move="a2a3")
        assert after.status == "error" and "puzzle is over (solved)" in after.observation
        assert (await chess_legal_moves(env=env)).observation.startswith("No moves: the puzzle")
        assert "The puzzle is over: solved (checkmate)" in (await chess_board(env=env)).observation
        await env.close()
        await env.close()  # twice is fine
        assert not await env.healthy()

    run(main())


def _checks(row) -> tuple[list[str], list[str]]:
    """The row's checks as the move list writes them: the mates and the others."""
    board = chess.Board(row["fen"])
    mates, others = [], []
    for move in board.legal_moves:
        if board.gives_check(move):
            (mates if _mates(board, move) else others).append(chess_env.legal_san(board, move))
    return mates, others


@needs_stockfish
def test_replies_look_one_move_ahead_without_playing():
    async def main():
        env = await started(list_moves=True)
        before = await env.reset(M1)
        (mate, *_), others = _checks(M1)
        assert others, "the test needs a mate in 1 with a check that does not mate"
        answer = await chess_replies(env=env, move=mate)
        assert answer.ok and not answer.terminal
        assert answer.observation.endswith("has no legal reply. Nothing was played.")
        assert answer.observation.startswith(f"After {mate} (")  # a mate is marked + as listed
        board = chess.Board(M1["fen"])
        board.push(board.parse_san(others[0]))
        expected = chess_env.legal_sans(board)
        answer = await chess_replies(env=env, move=others[0])
        replies = f"repl{'y' if len(expected) == 1 else 'ies'}: {' '.join(expected)}."
        assert f"has {len(expected)} legal {replies}" in answer.observation
        assert f", {chess_env.side_name(board.turn)} has " in answer.observation  # the opponent
        assert (await env.step({"op": "state"})) == before  # nothing was played
        for move in ("Kh9", ""):
            bad = await chess_replies(env=env, move=move)
            assert bad.status == "error" and bad.error_kind == "invalid_arguments"
        assert (await chess_move(env=env, move=mate)).terminal
        over = await chess_replies(env=env, move="a2a3")
        assert over.status == "error" and "puzzle is over (solved)" in over.observation
        await env.close()

    run(main())


@needs_stockfish
def test_the_recipe_example_shows_what_the_tools_answer():
    """The worked example's observations are the tools' real answers on its position."""
    examples = load_config("chess_puzzles").chat.examples
    question, turns = examples[0]["content"], examples[1:]
    fen = question.split("FEN: ")[1].splitlines()[0]
    assert question == chess_env.puzzle_question(chess.Board(fen), 1)
    tools = {"MOVE": chess_move, "REPLIES": chess_replies}

    async def main():
        env = await started(list_moves=True)
        await env.reset({"fen": fen, "mate_in": 1})
        for said, answer in zip(turns[::2], turns[1::2], strict=True):
            command, move = said["content"].split(": ")
            result = await tools[command](env=env, move=move)
            assert result.ok and result.observation == answer["content"], said
        assert result.terminal and "Checkmate!" in result.observation
        await env.close()

    assert [t["content"].split(":")[0] for t in turns[::2]] == ["REPLIES", "REPLIES", "MOVE"]
    run(main())


@needs_stockfish
def test_every_packaged_solution_line_solves_its_puzzle_in_the_env():
    async def main():
        env = await started()
        verdicts = []
        for row in ROWS:
            await env.reset(row)
            state = await env.step({"op": "move", "move": row["solution"][0]})
            if row["mate_in"] == 2:
                # Stockfish (one thread, fixed depth) defends as it did when the data was made
                assert state["opponent_move"]["uci"] == row["solution"][1], row["id"]
                state = await env.step({"op": "move", "move": row["solution"][2]})
            verdicts.append(state["status"])
        await env.close()
        assert verdicts == ["solved"] * len(ROWS)

    run(main())


@needs_stockfish
def test_a_wrong_move_fails_at_once_when_strict():
    async def main():
        env = await started()
        await env.reset(M2)
        result = await chess_move(env=env, move=wrong_move(M2))
        assert result.ok and result.terminal and "Opponent replied" not in result.observation
        assert "Puzzle failed: no forced mate in 1 move after that move" in result.observation
        await env.reset(M1)  # mate in 1: any other move runs out of moves
        result = await chess_move(env=env, move=wrong_move(M1))
        assert result.terminal and "Puzzle failed: no checkmate within 1 move" in result.observation
        await env.close()

    run(main())


@needs_stockfish
def test_without_strict_the_game_goes_on_to_the_move_limit():
    async def main():
        env = await started(strict=False, list_moves=True)
        await env.reset(M2)
        result = await chess_move(env=env, move=wrong_move(M2))
        assert not result.terminal and "Opponent replied" in result.observation
        assert "\nLegal moves: " in result.observation  # list_moves
        state = await env.step({"op": "state"})
        quiet = chess.Board(state["fen"])
        move = next(m.uci() for m in quiet.legal_moves if not _mates(quiet, m))
        result = await chess_move(env=env, move=move)
        assert result.terminal and "no checkmate within 2 moves" in result.observation
        await env.close()

    run(main())


@needs_stockfish
def test_bad_moves_and_actions_are_clear_errors():
    async def main():
        env = await started()
        with pytest.raises(RuntimeError, match="no puzzle is loaded"):
            await env.step({"op": "board"})
        for task, problem in (
            ({"question": "?"}, "'fen' field"),
            ({"fen": "not a fen", "mate_in": 1}, "not a valid FEN"),
            ({"fen": M1["fen"]}, "'mate_in' field"),
            ({"fen": M1["fen"], "mate_in": 0}, "'mate_in' field"),
            ({"fen": "8/8/8/8/8/8/8/8 w - - 0 1", "mate_in": 1}, "illegal or already over"),
        ):
            with pytest.raises(PuzzleError, match=problem):
                await env.reset(task)
        await env.reset(M1)
        for move in ("Kh9", "", "e1e1", "castle"):
            result = await chess_move(env=env, move=move)
            assert result.status == "error" and result.error_kind == "invalid_arguments"
            assert "Legal moves include: " in result.observation or "Give" in result.observation
            assert not result.terminal
        assert (await env.step({"op": "state"}))["moves_made"] == 0  # nothing was played
        for action, error in (({"op": "fly"}, "unknown op"), (42, "move string")):
            with pytest.raises((ValueError, TypeError), match=error):
                await env.step(action)
        solved = await chess_move(env=env, move=M1["solution"][0])
        assert solved.terminal and "Puzzle solved" in solved.observation
        await env.close()
        with pytest.raises(RuntimeError, match="closed"):
            await env.step("e4")

    run(main())


@needs_stockfish
def test_reset_none_clears_the_puzzle_and_the_engine_is_reused():
    async def main():
        env = await started()
        pid = env.pid
        for row in ROWS[:5]:
            state = await env.reset(row)
            assert state["fen"] == row["fen"] and state["moves_made"] == 0
        assert await env.reset(None) is None
        with pytest.raises(RuntimeError, match="no puzzle"):
            await env.step({"op": "legal_moves"})
        assert await env.healthy() and env.pid == pid
        black = await env.reset(M1_BLACK)
        assert black["player"] == "black"
        result = await chess_move(env=env, move=M1_BLACK["solution_san"][0])
        assert result.terminal and "Puzzle solved" in result.observation
        await env.close()

    run(main())


@needs_stockfish
def test_close_stops_stockfish_and_a_dead_engine_is_unhealthy():
    async def main():
        before = set(stockfish_children())
        envs = [await started() for _ in range(3)]
        pids = {env.pid for env in envs}
        assert len(pids) == 3 and pids <= set(stockfish_children())
        os.kill(envs[0].pid, signal.SIGKILL)
        for _ in range(100):
            if not await envs[0].healthy():
                break
            await asyncio.sleep(0.01)
        assert not await envs[0].healthy() and await envs[1].healthy()
        await asyncio.gather(*(env.close() for env in envs))
        assert set(stockfish_children()) == before

    run(main())


@needs_stockfish
def test_a_cancelled_move_marks_the_env_unhealthy(monkeypatch):
    async def main():
        env = await started()
        await env.reset(M2)

        async def slow_judge(board, moves):
            await asyncio.sleep(5)

        monkeypatch.setattr(env, "_mate_within", slow_judge)
        with pytest.raises(asyncio.TimeoutError):
            await asyncio.wait_for(env.step(M2["solution"][0]), 0.05)
        assert not await env.healthy()  # the pool replaces it rather than reuse it
        state = await env.step({"op": "state"})
        assert state["moves_made"] == 0  # the half-made move was dropped
        await env.close()

    run(main())


def test_missing_stockfish_or_bad_options_are_one_line_user_errors(monkeypatch, tmp_path):
    with pytest.raises(UserError, match="engine_path"):
        find_stockfish(tmp_path / "no-stockfish")
    monkeypatch.setattr(chess_env.shutil, "which", lambda name: None)
    with pytest.raises(UserError, match="apt-get install stockfish"):
        find_stockfish()
    with pytest.raises(UserError, match="apt-get install stockfish"):
        run(ChessPuzzleEnv().start())
    with pytest.raises(UserError, match="depth"):
        ChessPuzzleEnv(depth=0)


# -- the reward (python-chess only) --------------------------------------------------------------
def _call(move, reply=None, status="ok", name="chess_move"):
    observation = f"You played {move}."
    if reply is not None:
        observation += f" Opponent replied X ({reply})."
    return {"name": name, "arguments": {"move": move}, "status": status, "observation": observation}


def _solution_calls(row):
    line = [*row["solution"], None]
    return [_call(line[i], line[i + 1]) for i in range(0, len(line) - 1, 2)]


def test_played_moves_reads_successful_move_calls_with_their_replies():
    trajectory = {
        "tool_calls": [
            _call("Na7", "c8b8"),
            _call("Kh9", status="error"),
            {"name": "chess_board", "arguments": {}, "status": "ok", "observation": "..."},
            {"name": "chess_move", "arguments": '{"move": "d1d8"}', "status": "ok"},
            {"name": "chess_move", "arguments": "Rd8", "status": "ok", "observation": ""},
            {"name": "chess_move", "arguments": {"other": 1}, "status": "ok"},
        ]
    }
    assert played_moves(trajectory) == [("Na7", "c8b8"), ("d1d8", None), ("Rd8", None)]


@pytest.mark.parametrize(
    ("row", "calls", "expected"),
    [
        (M2, _solution_calls(M2), 1.0),
        (M1, _solution_calls(M1), 1.0),
        (M1_BLACK, [_call(M1_BLACK["solution_san"][0])], 1.0),  # SAN works too
        (M1, [], 0.0),
        (M1, [_call(wrong_move(M1))], 0.0),
        ({**M2, "mate_in": 1}, _solution_calls(M2), 0.0),  # mate, but one move too late
        (M2, [_call(M2["solution"][0], "a1a1"), _call(M2["solution"][2])], 0.0),  # bad reply
        (M1, [_call("Kh9"), _call(M1["solution"][0])], 0.0),  # an illegal move on replay
        (M1, [_call(M1["solution"][0]), _call("a2a3")], 1.0),  # after the mate: ignored
    ],
)
def test_reward_replays_the_game_and_checks_mate_in_time(row, calls, expected):
    result = run(chess_solved.score(None, {"tool_calls": calls}, row))
    assert not result.failed, result.error
    assert result.reward == expected and result.extras["solved"] is (expected == 1.0)


def test_reward_extras_and_missing_fields():
    result = run(chess_solved.score(None, {"tool_calls": _solution_calls(M2)}, M2))
    assert result.extras["checkmate"] and result.extras["moves"] == 2
    assert result.extras["mate_in"] == 2
    late = run(chess_solved.score(None, {"tool_calls": _solution_calls(M2)}, {**M2, "mate_in": 1}))
    assert late.extras["checkmate"] and not late.extras["solved"]
    missing = run(chess_solved.score(None, {"tool_calls": []}, {"question": "?"}))
    assert missing.failed and "needs dataset field(s) 'fen', 'mate_in'" in missing.error


# -- rollouts and training through the CLI -----------------------------------------------------
def test_the_recipe_is_listed_with_its_components():
    result = agentfly("recipes", "list", "--json")
    assert result.exit_code == 0, result.output
    (recipe,) = [r for r in json.loads(result.output) if r["name"] == "chess_puzzles"]
    assert recipe["plugin"] == "builtin_recipes" and recipe["path"].endswith("chess_puzzles.yaml")
    for kind, name in (("tools", "chess_move"), ("rewards", "chess_solved")):
        listed = agentfly(kind, "list", "--json")
        assert listed.exit_code == 0 and name in listed.output


@needs_stockfish
def test_scripted_policy_gets_max_and_min_reward(tiny_model, tmp_path):
    rows = [M2, M1, M1_BLACK]
    script = [
        {  # solves the mate in 2; BOARD and MOVES read the position without moving
            "responses": ["BOARD", "MOVES", f"MOVE: {M2['solution_san'][0]}"]
            + [f"MOVE: {M2['solution'][2]}"]
        },
        {"responses": ["MOVE: Kh9", f"MOVE: {wrong_move(M1)}"]},  # an illegal move, then fails
        {"responses": ["I give up."]},  # never moves
    ]
    before = set(stockfish_children())
    trajectories = scripted_rollout(
        "chess_puzzles", tiny_model, tmp_path, script, rows, "--n", "2", *SMALL_RUN
    )
    assert len(trajectories) == 6
    for trajectory in trajectories:
        trajectory.check()
        assert "error" not in trajectory.reward_extras
    assert [t.reward for t in trajectories] == [1.0, 1.0, 0.0, 0.0, 0.0, 0.0]
    assert [t.finish_reason for t in trajectories[::2]] == ["terminal_tool"] * 2 + ["answer"]
    solved = trajectories[0]
    assert [c.name for c in solved.tool_calls] == [
        "chess_board", "chess_legal_moves", "chess_move", "chess_move",
    ]  # fmt: skip
    assert solved.reward_extras["checkmate"] and solved.reward_extras["moves"] == 2
    assert [c.status for c in trajectories[2].tool_calls] == ["error", "ok"]
    assert set(stockfish_children()) == before  # every engine of the run stopped


@needs_stockfish
def test_looking_ahead_is_not_playing(tiny_model, tmp_path):
    """REPLIES lines cost turns but play nothing: only the MOVE that follows them scores."""
    (mate, *_), (other, *_) = _checks(M1)
    script = [
        {"responses": [f"REPLIES: {other}", f"REPLIES: {mate}", f"MOVE: {mate}"]},
        {"responses": [f"REPLIES: {mate}"] * 6},  # finds the mate, never plays it
    ]
    looked, idle = scripted_rollout(
        "chess_puzzles", tiny_model, tmp_path, script, [M1, M1], "--n", "1", *SMALL_RUN
    )
    assert [c.name for c in looked.tool_calls] == ["chess_replies"] * 2 + ["chess_move"]
    assert "has no legal reply" in looked.tool_calls[1].observation
    assert looked.reward == 1.0 and looked.reward_extras["moves"] == 1
    assert idle.reward == 0.0 and idle.reward_extras["moves"] == 0
    assert idle.finish_reason == "max_turns" and len(idle.tool_calls) == 6


@needs_stockfish
def test_env_runs_in_child_processes(tiny_model, tmp_path):
    script = [{"responses": [f"MOVE: {M1['solution'][0]}"]}]
    trajectories = scripted_rollout(
        "chess_puzzles", tiny_model, tmp_path, script, [M1],
        "--n", "2", *SMALL_RUN, "--set", "envs.chess.provider=process",
    )  # fmt: skip
    assert [t.reward for t in trajectories] == [1.0, 1.0]


@needs_stockfish
def test_tiny_model_rollout_gives_valid_trajectories(tiny_model, tmp_path):
    check_tiny_model_rollout("chess_puzzles", tiny_model, tmp_path, *budget(8192))


@needs_stockfish
def test_short_training_run_completes(tiny_model, tmp_path):
    check_short_training_run("chess_puzzles", tiny_model, tmp_path, *budget(8192))


@needs_stockfish
def test_the_default_warm_start_plays_the_solvers_moves_as_listed(tiny_model, tmp_path):
    chains = check_warm_start_plays_solutions("chess_puzzles", tiny_model, tmp_path, 3, *SMALL_RUN)
    rows = {r["id"]: r for r in ROWS}
    assert {rows[c.task["id"]]["mate_in"] for c in chains} == {1, 2}
    for chain in chains:
        row = rows[chain.task["id"]]
        moves = row["solution_listed"][::2]  # as the move list shows them
        calls = [(c.name, c.arguments["move"]) for c in chain.tool_calls]
        # before the mate, the listed checks are looked at in order until one mates
        looks = [("chess_replies", m) for m in row["search_listed"]]
        opening = [("chess_move", m) for m in moves[:-1]]
        assert calls == [*opening, *looks, ("chess_move", row["search_listed"][-1])]
        seen = [c.observation for c in chain.tool_calls if c.name == "chess_replies"]
        assert ["has no legal reply" in text for text in seen] == [False] * (len(seen) - 1) + [True]
        assert moves[-1].endswith("+") and row["solution_san"][-1].endswith("#")
        assert chain.reward == 1.0


@needs_stockfish
def test_all_four_tools_through_json_tool_calls(tiny_model, tmp_path):
    script = [
        {
            "responses": [
                json_call("chess_board"),
                json_call("chess_legal_moves"),
                json_call("chess_replies", move=M1["solution_san"][0]),
                json_call("chess_move", move=M1["solution_san"][0]),
            ]
        }
    ]
    (trajectory,) = scripted_rollout(
        "chess_puzzles", tiny_model, tmp_path, script, [M1],
        "--parser", "hermes", "--n", "1", *SMALL_RUN, "--set", "rollout.stop=[]",
    )  # fmt: skip
    assert [c.name for c in trajectory.tool_calls] == [
        "chess_board", "chess_legal_moves", "chess_replies", "chess_move",
    ]  # fmt: skip
    assert all(c.status == "ok" for c in trajectory.tool_calls)
    assert M1["fen"] in trajectory.tool_calls[0].observation
    assert trajectory.finish_reason == "terminal_tool" and trajectory.reward == 1.0


@needs_stockfish
@needs_smollm2
@pytest.mark.parametrize("limit", SOLUTION_ROWS)
def test_every_packaged_solution_line_scores_under_the_recipe_settings(tmp_path, limit):
    script = [{"responses": [f"MOVE: {m}" for m in r["solution"][::2]]} for r in ROWS]
    check_packaged_solutions_score("chess_puzzles", script, tmp_path, limit)
