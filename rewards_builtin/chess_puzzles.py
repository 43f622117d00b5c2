"""``chess_solved``: 1.0 when the trajectory checkmated within the puzzle's ``mate_in`` moves.

The reward does not trust the env's verdict text. It replays the game with python-chess alone
(no Stockfish): from the row's ``fen`` it plays the agent's moves (the arguments of its
successful ``chess_move`` calls) and the opponent's replies (the ``Opponent replied SAN (uci)``
line of the same calls' observations, written by the env, never by the model), checking that
every move is legal, then asks whether the agent's side gave checkmate within ``mate_in``
moves. Replaying takes well under a millisecond per move and scores saved trajectories the same.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from agentfly_cli.components.rewards import reward
from envs_builtin.chess_env import (
    OPPONENT_REPLY,
    IllegalMoveError,
    PuzzleError,
    import_chess,
    parse_move,
)
from rewards_builtin.calls import call_records

MOVE_TOOL = "chess_move"


def played_moves(trajectory: Any) -> list[tuple[str, str | None]]:
    """``(agent move, opponent reply in UCI or None)`` of each successful ``chess_move`` call."""
    moves = []
    for record in call_records(trajectory):
        if record.get("name") != MOVE_TOOL or record.get("status") != "ok":
            continue
        move = _move_argument(record.get("arguments"))
        if move is None:
            continue
        reply = OPPONENT_REPLY.search(str(record.get("observation") or ""))
        moves.append((move, reply.group(1) if reply else None))
    return moves


def _move_argument(arguments: Any) -> str | None:
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments)
        except json.JSONDecodeError:
            return arguments.strip() or None  # plain text, as a ReAct parser passes it
    if isinstance(arguments, Mapping):
        move = arguments.get("move")
        return move if isinstance(move, str) else None
    return None


def replay(fen: str, mate_in: int, moves: list[tuple[str, str | None]]) -> dict[str, Any]:
    """Play ``moves`` from ``fen``; whether the side to move at ``fen`` mated in time."""
    chess = import_chess()
    try:
        board = chess.Board(fen)
    except ValueError as exc:
        raise PuzzleError(f"the task's 'fen' is not a valid FEN: {exc}") from None
    player, made, problem = board.turn, 0, None
    for move, reply in moves:
        if board.is_game_over():
            break
        try:
            board.push(parse_move(board, move))
        except IllegalMoveError:
            problem = f"move {made + 1} ({move!r}) is not legal on replay"
            break
        made += 1
        if board.is_game_over() or reply is None:
            break
        try:
            board.push_uci(reply)
        except ValueError:
            problem = f"the opponent's reply {reply!r} is not legal on replay"
            break
    mated = board.is_checkmate() and board.turn != player
    return {
        "solved": mated and made <= mate_in and problem is None,
        "checkmate": mated,
        "moves": made,
        "fen": board.fen(),
        "problem": problem,
    }


@reward(timeout=30.0)
def chess_solved(trajectory, *, fen: str, mate_in: int) -> dict:
    """1.0 when the agent checkmated within ``mate_in`` moves (replayed with python-chess)."""
    if isinstance(mate_in, bool) or not isinstance(mate_in, int) or mate_in < 1:
        raise PuzzleError("the task's 'mate_in' must be a whole number of moves >= 1")
    result = replay(fen, mate_in, played_moves(trajectory))
    extras = {k: v for k, v in result.items() if v is not None}
    return {"reward": 1.0 if result["solved"] else 0.0, "mate_in": mate_in, **extras}
