"""Task rows for a textarena game: one seeded game per row, with a solution where one is known.

A row is ``{"id", "game", "seed"}``; for the games below a solver also writes ``solution``,
the moves that win that seeded game (read from the game's own state after its reset, then
played as the rules allow: Guess The Number by bisection over the hints the game will give,
Tower of Hanoi by the classic recursion). Solutions serve the warm start and the gold side of
``agentfly recipes check``; the model never sees them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from agentfly_cli.errors import UserError
from bridges_builtin.textarena_env import OwnRandom, check_game, import_textarena


def _bisection(game: Any) -> list[str]:
    """Guess The Number: the guesses of a bisection, each answered by the game's hint."""
    target = game.state.game_state["game_number"]
    low, high, moves = game.min_number, game.max_number, []
    while low <= high:
        guess = (low + high) // 2
        moves.append(f"[{guess}]")
        if guess == target:
            break
        low, high = (guess + 1, high) if guess < target else (low, guess - 1)
    return moves


def _hanoi(game: Any) -> list[str]:
    """Tower of Hanoi: the 2^n - 1 moves that carry the disks from A to C."""
    moves: list[str] = []

    def carry(disks: int, source: str, target: str, spare: str) -> None:
        if disks:
            carry(disks - 1, source, spare, target)
            moves.append(f"[{source} {target}]")
            carry(disks - 1, spare, target, source)

    carry(game.num_disks, "A", "C", "B")
    return moves


#: the games whose seeded solution is known, by family
SOLVERS: dict[str, Callable[[Any], list[str]]] = {
    "GuessTheNumber": _bisection,
    "TowerOfHanoi": _hanoi,
}


def game_rows(game_id: str, count: int, first_seed: int = 0) -> list[dict[str, Any]]:
    """``count`` rows of ``game_id``, seeds ``first_seed``...; with ``solution`` where known."""
    textarena = import_textarena()
    from bridges_builtin.textarena_env import game_family

    check_game(game_id, "textarena game")
    solver = SOLVERS.get(game_family(game_id) or "")
    rows = []
    for seed in range(first_seed, first_seed + count):
        row: dict[str, Any] = {"id": f"{game_id}-s{seed}", "game": game_id, "seed": seed}
        if solver is not None or seed == first_seed:  # a first reset proves the game runs here
            game = _reset_game(textarena, game_id, seed)
            if solver is not None:
                row["solution"] = solver(game)
        rows.append(row)
    return rows


def _reset_game(textarena: Any, game_id: str, seed: int) -> Any:
    """A fresh game of ``game_id`` reset with ``seed`` (the process's ``random`` untouched);
    a game that cannot start here (word games need NLTK data, which is downloaded) is one
    UserError line."""
    own = OwnRandom()
    try:
        with own.active():
            game = textarena.make(f"{game_id}-raw")
            game.reset(num_players=1, seed=seed)
    except Exception as exc:
        raise UserError(
            f"textarena game {game_id!r} does not start on this machine ({type(exc).__name__}: "
            f"{str(exc).splitlines()[0] if str(exc) else ''}); pick another game "
            "(docs/bridges/textarena.md lists the ones that run offline)"
        ) from None
    return game


def gold_responses(task: dict[str, Any]) -> list[str]:
    """The assistant turns that win a row's game (``agentfly recipes check``'s gold)."""
    return [f"MOVE: {move}" for move in task.get("solution") or []]
