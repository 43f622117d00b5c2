"""textarena's single-player games as a pooled env, with the game's move tool.

One :class:`TextArenaEnv` plays one game at a time: ``reset(task)`` makes the task's game
(``task["game"]``, a textarena id such as ``GuessTheNumber-v0``) and resets it with the task's
``seed``; the game's opening text is the episode's first observation (the env speaks first).
Each ``textarena_move`` call is one ``step``: the observation is what the game said since the
last move, and when the game ends its own reward and reason are reported to the reward channel
(``done``), which ends the episode.

textarena seeds the process-wide ``random`` at reset and draws from it while games run, so two
games in one process would disturb each other's draws. Every call into textarena here runs with
that game's own state of ``random`` swapped in under one lock (:class:`OwnRandom`): a game plays
the same for its seed however many others run beside it, and the process's own ``random`` is
left as it was.
"""

from __future__ import annotations

import asyncio
import random
import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from agentfly_cli.components.tools import ToolResult, tool
from agentfly_cli.envs.base import BaseEnv, EnvSpec
from agentfly_cli.errors import UserError
from bridges_builtin.library import require

#: textarena's single-player game families, by module name (its registry says "[1 Player]");
#: of their 72 ids, 57 start offline here: the word games need NLTK data that textarena
#: downloads, GuessWho and TwentyQuestions an LLM API, Klondike Python 3.12
SINGLE_PLAYER = (
    "Game2048", "Bandit", "Blackjack", "Countdown", "Crosswords", "Cryptarithm", "FifteenPuzzle",
    "FrozenLake", "GuessTheNumber", "GuessWho", "Hangman", "LightsOut", "LogicPuzzle",
    "Mastermind", "Minesweeper", "PegJump", "RushHour", "Secretary", "Set", "Klondike",
    "Slitherlink", "Sokoban", "Sudoku", "ThreeCardMonte", "TowerOfHanoi", "TwentyQuestions",
    "WordLadder", "Wordle", "WordSearch",
)  # fmt: skip
_random_lock = threading.Lock()


def import_textarena() -> Any:
    """The ``textarena`` module, or one UserError line with the install command."""
    return require("textarena", "textarena", "textarena")


def game_family(game_id: str) -> str | None:
    """The game family of a registered textarena id (``GuessTheNumber-v0`` ->
    ``GuessTheNumber``), or None when textarena does not know the id."""
    from textarena.envs.registration import ENV_REGISTRY

    spec = ENV_REGISTRY.get(game_id)
    if spec is None:
        return None
    entry = spec.entry_point if isinstance(spec.entry_point, str) else ""
    parts = entry.split(":")[0].split(".")  # textarena.envs.<Family>.env
    return parts[2] if len(parts) > 2 else None


def single_player_games() -> list[str]:
    """Every single-player game id textarena registers (its wrapper variants left out)."""
    import_textarena()
    from textarena.envs.registration import ENV_REGISTRY

    return [
        game_id
        for game_id in ENV_REGISTRY
        if not game_id.endswith(("-raw", "-train")) and game_family(game_id) in SINGLE_PLAYER
    ]


def check_game(game_id: Any, where: str) -> str:
    """``game_id`` if it is a single-player textarena id; else one UserError naming ``where``."""
    if isinstance(game_id, str) and game_family(game_id) in SINGLE_PLAYER:
        return game_id
    games = single_player_games()
    shown = ", ".join(games[:8])
    raise UserError(
        f"{where}: {game_id!r} is not a single-player textarena game; "
        f"{len(games)} are, e.g. {shown}"
    )


class OwnRandom:
    """One game's own state of the process-wide ``random``, swapped in for each call."""

    def __init__(self) -> None:
        self._state = random.getstate()

    @contextmanager
    def active(self) -> Iterator[None]:
        with _random_lock:
            outer = random.getstate()
            random.setstate(self._state)
            try:
                yield
            finally:
                self._state = random.getstate()
                random.setstate(outer)


def _text(observations: Any) -> str:
    """The game's messages to the player, without the echo of the player's own move."""
    from textarena.core import ObservationType

    lines = []
    for _sender, message, kind in observations or []:
        if kind != ObservationType.PLAYER_ACTION and str(message).strip():
            lines.append(str(message).strip())
    return "\n".join(lines)


class TextArenaEnv(BaseEnv):
    """One single-player textarena game per episode."""

    def __init__(self) -> None:
        import_textarena()
        self._game: Any = None
        self._random = OwnRandom()
        self.game_id: str | None = None
        self.done = False

    def _call(self, fn: Any, *args: Any) -> Any:
        with self._random.active():
            return fn(*args)

    def _make(self, game_id: str, seed: int) -> dict[str, Any]:
        import textarena

        self._game = textarena.make(f"{game_id}-raw")  # no wrapper: new messages per step
        self._game.reset(num_players=1, seed=seed)
        _player, observations = self._game.get_observation()
        return {"observation": _text(observations), "info": {"game": game_id, "seed": seed}}

    async def reset(self, task: Mapping[str, Any] | None = None) -> dict[str, Any] | None:
        self._game, self.done, self.game_id = None, False, None
        if not task:
            return None
        game_id = check_game(task.get("game"), "task field 'game'")
        seed = task.get("seed", 0)
        if isinstance(seed, bool) or not isinstance(seed, int):
            raise UserError(f"task field 'seed' must be an integer, not {seed!r}")
        opening = await asyncio.to_thread(self._call, self._make, game_id, seed)
        self.game_id = game_id
        return opening

    def _move(self, action: str) -> dict[str, Any]:
        done, _info = self._game.step(action)
        _player, observations = self._game.get_observation()
        result: dict[str, Any] = {"observation": _text(observations), "done": bool(done)}
        if done:
            rewards, game_info = self._game.close()
            result["reward"] = float((rewards or {}).get(0, 0.0))
            result["info"] = dict((game_info or {}).get(0, {}))
            result["observation"] = "\n".join(
                part for part in (result["observation"], result["info"].get("reason", "")) if part
            )
        return result

    async def step(self, action: Any) -> dict[str, Any]:
        if self._game is None:
            raise RuntimeError("no game is running: the env was not reset with a task")
        if self.done:
            return {"observation": "The game is over.", "done": True}
        result = await asyncio.to_thread(self._call, self._move, str(action))
        self.done = result["done"]
        return result

    async def close(self) -> None:
        self._game = None


TEXTARENA = EnvSpec(
    name="textarena",
    factory=TextArenaEnv,
    description="a single-player textarena game per episode (textarena_move); the game "
    "speaks first and reports its own reward",
    pool_max=64,
    resources={"cpu": 0.05, "memory_mb": 20},
)


@tool(env="textarena")
async def textarena_move(env: TextArenaEnv, action: str) -> ToolResult:
    """Make one move in the game, written as the game asks (e.g. [5] or [A C])."""
    result = await env.step(action)
    info: dict[str, Any] = {}
    if result["done"]:  # the game's own reward and reason, for the reward channel
        info = {**result.get("info", {}), "done": True, "reward": result.get("reward", 0.0)}
    return ToolResult(result["observation"] or "(the game said nothing)", info=info)
