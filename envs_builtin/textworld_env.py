"""``textworld``: a TextWorld text game per trajectory, and the ``tw_*`` tools that play it.

``reset(task)`` loads the task's game (the row's ``game`` field: a compiled ``.z8`` with
TextWorld's ``.json`` beside it); the packaged games of the ``textworld`` recipe are unpacked
from ``recipes/data/textworld_games.tar.xz`` into the agentfly cache on first use. The game runs
in-process (jericho's Z-machine, a private copy of its library per game), in worker threads,
one call at a time per env. Actions and results are JSON values, so the env also runs in child
processes, on Ray or behind a pool server. See ``docs/recipes/textworld.md``.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import re
import shutil
import tempfile
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import agentfly_cli
from agentfly_cli.components.tools import ToolResult, tool
from agentfly_cli.envs.base import BaseEnv, EnvSpec
from agentfly_cli.errors import UserError

ARCHIVE = Path(agentfly_cli.__file__).resolve().parent / "recipes/data/textworld_games.tar.xz"
MAX_COMMAND_CHARS = 200
CALL_GRACE_S = 5.0  # after a cancelled call, how long to wait for its thread before moving on
INSTALL = "textworld is not installed; run: pip install 'agentfly-cli[tasks]'"
_END_LINES = re.compile(
    r"^\s*(\*\*\* The End \*\*\*|You scored .* out of a possible .*|Would you like to "
    r"RESTART.*|Please give one of the answers above\.)\s*$",
    re.MULTILINE,
)
_unpack_lock = threading.Lock()
# TextWorld's loader (its logic grammar and caches) is not thread-safe: concurrent loads fail
# at random. Calls are short (a load about 25 ms, a step 2-5 ms) and hold the GIL, so every
# call into textworld in this process takes this lock.
_textworld_lock = threading.Lock()
_unpacked: dict[Path, Path] = {}


def import_textworld():
    """The ``textworld`` module, or a one-line UserError saying how to install it."""
    try:
        import textworld
    except ImportError:
        raise UserError(INSTALL) from None
    return textworld


def packaged_games(archive: Path = ARCHIVE) -> Path:
    """The folder of the packaged games, unpacked into ``$AGENTFLY_CACHE/textworld`` once.

    The folder is named by the archive's digest; concurrent processes unpack into temporary
    folders and the first rename wins.
    """
    import tarfile

    from agentfly_cli.models.resolve import cache_dir

    with _unpack_lock:
        if archive in _unpacked and _unpacked[archive].is_dir():
            return _unpacked[archive]
        digest = hashlib.sha256(archive.read_bytes()).hexdigest()[:16]
        parent = cache_dir() / "textworld"
        folder = parent / f"games-{digest}"
        if not folder.is_dir():
            parent.mkdir(parents=True, exist_ok=True)
            scratch = Path(tempfile.mkdtemp(prefix=".unpack-", dir=parent))
            try:
                with tarfile.open(archive, "r:xz") as tar:
                    if hasattr(tarfile, "data_filter"):
                        tar.extractall(scratch, filter="data")
                    else:  # pragma: no cover - Python < 3.11.4
                        tar.extractall(scratch)  # noqa: S202 - our own packaged archive
                os.rename(scratch, folder)
            except OSError:
                if not folder.is_dir():
                    raise
            finally:
                shutil.rmtree(scratch, ignore_errors=True)
        _unpacked[archive] = folder
        return folder


class GameFileError(UserError, ValueError):
    """A task without a usable ``game`` field (the dataset's problem, not the model's)."""


def resolve_game(game: Any) -> Path:
    """The game file of a task's ``game`` field: an absolute path, a path from the working
    folder, or the name of a packaged game."""
    if not isinstance(game, str | os.PathLike) or not os.fspath(game).strip():
        raise GameFileError(
            "the task needs a 'game' field: a TextWorld game file (.z8 with its .json beside "
            "it) or a packaged game name such as tw-000.z8"
        )
    path = Path(game).expanduser()
    if path.is_absolute() or path.is_file():
        candidate = path
    else:
        candidate = packaged_games() / path
    if not candidate.is_file():
        raise GameFileError(
            f"TextWorld game {os.fspath(game)!r} not found (give a path, absolute or from the "
            "working folder, or a packaged game name such as tw-000.z8)"
        )
    return candidate


def clean_text(text: str) -> str:
    """Game output without the banner, the ``>`` prompt with its status line, and the
    end-of-game menu; blank lines collapsed."""
    lines = text.splitlines()
    while lines and not re.search(r"[A-Za-z]", lines[0]):  # the ASCII-art banner
        lines.pop(0)
    text = "\n".join(lines)
    text = re.sub(r"(^|\n)>[^\n]*$", "", text.rstrip())  # prompt + status line
    text = _END_LINES.sub("", text)
    return re.sub(r"\n\s*\n(\s*\n)+", "\n\n", text).strip()


def _locked(func, *args):
    with _textworld_lock:
        return func(*args)


class TextWorldEnv(BaseEnv):
    """One TextWorld game at a time.

    Actions: a command string, ``{"command": "open fridge"}``, ``{"op": "admissible"}`` (the
    commands the game accepts now; no move) or ``{"op": "state"}``. Every result is a dict:
    ``observation``, ``score``, ``max_score``, ``won``, ``lost``, ``done``, ``moves`` (and
    ``admissible_commands`` for ``admissible``, or always with ``show_commands=True``, which
    also lists them in every tool observation). Commands after the end do not reach the game.
    """

    def __init__(
        self, max_command_chars: int = MAX_COMMAND_CHARS, show_commands: bool = False
    ) -> None:
        self.max_command_chars = max_command_chars
        self.show_commands = show_commands
        self._game: Any = None
        self._state: dict[str, Any] = {}
        self._admissible: list[str] = []
        self._lock = asyncio.Lock()
        self._interrupted = False
        self.closed = False
        self.game_file: Path | None = None

    # -- lifecycle -----------------------------------------------------------------------------
    async def start(self) -> None:
        import_textworld()

    async def reset(self, task: Mapping[str, Any] | None = None) -> dict[str, Any] | None:
        await self._call(self._unload)
        if task is None:
            return None
        path = resolve_game(task.get("game"))
        return await self._call(self._load, path)

    async def step(self, action: Any) -> dict[str, Any]:
        if self.closed:
            raise RuntimeError("the TextWorld env is closed")
        if isinstance(action, str):
            action = {"command": action}
        if not isinstance(action, Mapping):
            raise TypeError("a TextWorld action is a command string or a dict with 'command'")
        op = action.get("op", "act")
        if self._game is None:
            raise RuntimeError("no game is loaded: the env needs a task with a 'game' field")
        if op == "state":
            return dict(self._state)
        if op == "admissible":
            commands = [] if self._state["done"] else list(self._admissible)
            return {**self._state, "admissible_commands": commands}
        if op != "act":
            raise ValueError(f"unknown op {op!r}; use act, admissible or state")
        command = self._checked(action.get("command"))
        if self._state["done"]:
            return {**self._state, "observation": "The game is over."}
        return await self._call(self._step, command)

    async def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        async with self._lock:
            await asyncio.to_thread(_locked, self._unload)

    async def healthy(self) -> bool:
        return not self.closed and not self._interrupted

    # -- blocking work, in a worker thread ------------------------------------------------------
    async def _call(self, func, *args):
        """Run ``func`` in a thread, one call at a time. A cancelled call marks the env
        unhealthy (its game state is unknown) after waiting briefly for the thread."""
        async with self._lock:
            task = asyncio.ensure_future(asyncio.to_thread(_locked, func, *args))
            try:
                return await asyncio.shield(task)
            except asyncio.CancelledError:
                self._interrupted = True
                await asyncio.wait([task], timeout=CALL_GRACE_S)
                raise

    def _load(self, path: Path) -> dict[str, Any]:
        textworld = import_textworld()
        infos = textworld.EnvInfos(
            score=True, max_score=True, won=True, lost=True, moves=True, admissible_commands=True
        )
        game = textworld.start(str(path), request_infos=infos)
        try:
            state = game.reset()
        except BaseException:
            game.close()
            raise
        self._game, self.game_file = game, path
        return self._record(state, state.feedback, 0, False)

    def _step(self, command: str) -> dict[str, Any]:
        state, score, done = self._game.step(command)
        return self._record(state, state.feedback, score, done)

    def _record(self, state, feedback: str, score: Any, done: bool) -> dict[str, Any]:
        self._admissible = sorted(state.get("admissible_commands") or [])
        won, lost = bool(state.get("won")), bool(state.get("lost"))
        self._state = {
            "observation": clean_text(feedback or ""),
            "score": int(score or 0),
            "max_score": int(state.get("max_score") or 0),
            "won": won,
            "lost": lost,
            "done": bool(done) or won or lost,
            "moves": int(state.get("moves") or 0),
        }
        if self.show_commands:
            commands = [] if self._state["done"] else list(self._admissible)
            self._state["admissible_commands"] = commands
        return dict(self._state)

    def _unload(self) -> None:
        game, self._game, self.game_file = self._game, None, None
        self._state, self._admissible = {}, []
        if game is not None:
            game.close()  # frees the Z-machine and its private copy of libfrotz

    def _checked(self, command: Any) -> str:
        if not isinstance(command, str) or not command.strip():
            raise ValueError("give a game command, e.g. 'look' or 'take apple from table'")
        command = command.strip()
        if "\n" in command:
            raise ValueError("give one command per call (no line breaks)")
        if len(command) > self.max_command_chars:
            raise ValueError(f"the command is longer than {self.max_command_chars} characters")
        return command


TEXTWORLD = EnvSpec(
    name="textworld",
    factory=TextWorldEnv,
    description="A TextWorld text game per trajectory (tw_act / tw_look / tw_inventory / "
    "tw_commands)",
    pool_max=64,
    warm_size=0,
    start_timeout=60.0,
    resources={"cpu": 0.1, "memory_mb": 16.0},
)


def render(result: Mapping[str, Any]) -> ToolResult:
    """A game result as the model sees it: the game's text, then the score; the call ends
    the episode when the game is over."""
    status = f"Score: {result['score']}/{result['max_score']}."
    if result["won"]:
        status += " You won; the game is over."
    elif result["lost"]:
        status += " You lost; the game is over."
    commands = result.get("admissible_commands")
    if commands and not result["done"]:
        status += "\nValid commands: " + ", ".join(commands) + "."
    text = "\n".join(part for part in (result["observation"], status) if part)
    return ToolResult(text, terminal=bool(result["done"]), info={"score": result["score"]})


# Tools that move the game, and the command each runs: the reward replays these.
STEPPING_TOOLS = {"tw_act": None, "tw_look": "look", "tw_inventory": "inventory"}


@tool(env="textworld")
async def tw_act(env: TextWorldEnv, command: str) -> ToolResult:
    """Type a command into the text game, e.g. 'go north', 'open fridge',
    'take apple from table', 'put apple on counter', 'insert apple into fridge'.

    Args:
        command: One game command.
    """
    return render(await env.step({"command": command}))


@tool(env="textworld")
async def tw_look(env: TextWorldEnv) -> ToolResult:
    """Describe the room you are in (the game command 'look')."""
    return render(await env.step({"command": "look"}))


@tool(env="textworld")
async def tw_inventory(env: TextWorldEnv) -> ToolResult:
    """List what you carry (the game command 'inventory')."""
    return render(await env.step({"command": "inventory"}))


@tool(env="textworld")
async def tw_commands(env: TextWorldEnv) -> str:
    """List the commands the game accepts right now (does not use a move)."""
    result = await env.step({"op": "admissible"})
    return "\n".join(result["admissible_commands"]) or "(no commands: the game is over)"
