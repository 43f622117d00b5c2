"""Write the packaged mate-in-N puzzles of the ``chess_puzzles`` recipe (deterministic).

Positions come from seeded games between a "strong" side (Stockfish at depth 1 most of the
time, a random legal move otherwise) and a "weak" side (mostly random moves). From ply 12 on,
whenever the strong side is to move, Stockfish (depth 8) looks for a forced mate; the first
position with a mate in 1 or 2 becomes a candidate (one per game, so the puzzles differ).
python-chess then proves each candidate by brute force, independently of Stockfish: the side to
move forces mate in exactly ``mate_in`` moves (mate in 2 only when there is no mate in 1), and
``winning_moves`` lists every first move that forces it. The solution line starts with
Stockfish's best move (depth 14) and is played out in the env itself, against its default
opponent (Stockfish, depth 12), so that ``MOVE: solution[0]``, ``MOVE: solution[2]``, ...
solves the puzzle in the recipe. White and Black alternate as the strong side, so half the
puzzles are for Black.

Writes ``agentfly_cli/recipes/data/chess_puzzles.jsonl``: ``id``, ``fen``, ``side``,
``mate_in``, ``solution`` (UCI), ``solution_san``, ``solution_listed`` (SAN as the move lists
show it: a mate is marked ``+``), ``opening_listed`` (the agent's moves before the mate, as
listed), ``search_listed`` (the checks a look-ahead tries in the mating position, in list
order, ending with the first that mates), ``winning_moves`` (UCI), ``legal_moves`` (how many),
``question`` (the user message: board, FEN, whose move, the legal moves).

Needs python-chess and Stockfish (Debian: apt-get install stockfish). About 90 s on one core.
Run: python scripts/make_chess_puzzles_data.py [--mate1 240] [--mate2 160]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import time
from pathlib import Path

import chess
import chess.engine

from envs_builtin.chess_env import (
    ChessPuzzleEnv,
    as_listed,
    find_stockfish,
    legal_sans,
    puzzle_question,
    side_name,
)

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "agentfly_cli" / "recipes" / "data" / "chess_puzzles.jsonl"
SEED = 2718
FIRST_PLY = 12
MAX_PLIES = 160
STRONG_ENGINE_P, WEAK_ENGINE_P = 0.8, 0.3
SEARCH_LOOKS = 3  # the warm start's looks at most: two checks that do not mate, then the mate


def forces_mate(board: chess.Board, moves: int) -> bool:
    """Whether the side to move forces checkmate within ``moves`` of its moves."""
    return any(_mates_after(board, move, moves) for move in list(board.legal_moves))


def _mates_after(board: chess.Board, move: chess.Move, moves: int) -> bool:
    board.push(move)
    try:
        if board.is_checkmate():
            return True
        if moves == 1 or board.is_game_over():
            return False
        for reply in list(board.legal_moves):
            board.push(reply)
            try:
                if not forces_mate(board, moves - 1):
                    return False
            finally:
                board.pop()
        return True
    finally:
        board.pop()


def winning_moves(board: chess.Board, moves: int) -> list[str]:
    """Every first move (UCI) that forces checkmate within ``moves``."""
    return [m.uci() for m in list(board.legal_moves) if _mates_after(board, m, moves)]


def candidate(engine: chess.engine.SimpleEngine, rng: random.Random, game: int, wanted: set):
    """Play one seeded game; the first position where the strong side mates in a wanted N."""
    board = chess.Board()
    strong = chess.WHITE if game % 2 == 0 else chess.BLACK
    for ply in range(MAX_PLIES):
        if board.is_game_over():
            return None
        if ply >= FIRST_PLY and board.turn == strong:
            info = engine.analyse(board, chess.engine.Limit(depth=8), game=game)
            mate = info["score"].pov(strong).mate()
            if mate is not None and mate in wanted:
                return board.copy(stack=False), mate
        p = STRONG_ENGINE_P if board.turn == strong else WEAK_ENGINE_P
        if rng.random() < p:
            move = engine.play(board, chess.engine.Limit(depth=1), game=game).move
        else:
            move = rng.choice(sorted(board.legal_moves, key=chess.Move.uci))
        board.push(move)
    return None


def puzzle(engine, board: chess.Board, mate_in: int, index: int) -> dict | None:
    """The row of a proven mate-in-N position (without its solution line yet), or None when
    the proof fails."""
    if not forces_mate(board, mate_in) or (mate_in > 1 and forces_mate(board, mate_in - 1)):
        return None
    info = engine.analyse(board, chess.engine.Limit(depth=14), game=("solve", index))
    winning = winning_moves(board, mate_in)
    first = info["pv"][0].uci() if info.get("pv") else winning[0]
    return {
        "id": f"chess-{index:03d}",
        "fen": board.fen(),
        "side": side_name(board.turn).lower(),
        "mate_in": mate_in,
        "solution": [first if first in winning else winning[0]],
        "winning_moves": winning,
        "legal_moves": board.legal_moves.count(),
        "question": puzzle_question(board, mate_in),
    }


async def solve(rows: list[dict]) -> None:
    """Complete each row's solution line by playing it in the env (Stockfish defending with the
    env's default settings), so that replaying ``solution[::2]`` solves every puzzle."""
    env = ChessPuzzleEnv()
    await env.start()
    try:
        for row in rows:
            await env.reset(row)
            line = list(row["solution"])
            while True:
                state = await env.step({"op": "move", "move": line[-1]})
                if state["status"] != "playing":
                    break
                line.append(state["opponent_move"]["uci"])
                board = chess.Board(state["fen"])
                line.append(next(m for m in winning_moves(board, state["moves_left"])))
            if state["status"] != "solved":
                raise RuntimeError(f"{row['id']}: the solution line did not mate: {line}")
            board, sans = chess.Board(row["fen"]), []
            for move in line:
                sans.append(board.san(chess.Move.from_uci(move)))
                board.push_uci(move)
            row["solution"], row["solution_san"] = line, sans
            row["solution_listed"] = [as_listed(san) for san in sans]
            row["opening_listed"] = row["solution_listed"][:-1:2]
            row["search_listed"] = search_listed(row["fen"], line)
    finally:
        await env.close()


def search_listed(fen: str, line: list[str]) -> list[str]:
    """The looks (``REPLIES``) a methodical player makes in the mating position: the listed
    checks in order up to the first that mates, at most ``SEARCH_LOOKS`` (a mate listed later
    is looked at after the first checks). The last look is the mate to play, which may be
    another mate than the line's."""
    board = chess.Board(fen)
    for move in line[:-1]:
        board.push_uci(move)
    checks = [san for san in legal_sans(board) if san.endswith("+")]
    first = next(i for i, san in enumerate(checks) if _mates_after(board, board.parse_san(san), 1))
    return [*checks[:first][: SEARCH_LOOKS - 1], checks[first]]


def generate(mate1: int, mate2: int, seed: int = SEED) -> list[dict]:
    quota = {1: mate1, 2: mate2}
    rows: list[dict] = []
    seen: set[str] = set()
    rng = random.Random(seed)
    with chess.engine.SimpleEngine.popen_uci(find_stockfish()) as engine:
        engine.configure({"Threads": 1, "Hash": 16})
        game = 0
        while any(quota.values()):
            found = candidate(engine, rng, game, {n for n, left in quota.items() if left})
            game += 1
            if found is None:
                continue
            board, mate_in = found
            key = " ".join(board.fen().split()[:2])
            if key in seen:
                continue
            row = puzzle(engine, board, mate_in, len(rows))
            if row is not None:
                seen.add(key)
                rows.append(row)
                quota[mate_in] -= 1
    asyncio.run(solve(rows))
    order = [
        "id", "fen", "side", "mate_in", "solution", "solution_san", "solution_listed",
        "opening_listed", "search_listed", "winning_moves",
    ]  # fmt: skip
    return [
        {key: row[key] for key in [*order, *(k for k in row if k not in order)]} for row in rows
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mate1", type=int, default=240, help="mate-in-1 puzzles")
    parser.add_argument("--mate2", type=int, default=160, help="mate-in-2 puzzles")
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args()
    started = time.perf_counter()
    rows = generate(args.mate1, args.mate2)
    args.out.write_text("".join(json.dumps(row) + "\n" for row in rows))
    took = time.perf_counter() - started
    print(f"wrote {len(rows)} puzzles to {args.out} in {took:.1f} s")


if __name__ == "__main__":
    main()
