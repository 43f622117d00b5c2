"""``chess``: a mate-in-N chess puzzle per trajectory, with Stockfish as the opponent and judge.

``reset(task)`` sets up the row's position (``fen``; the agent plays the side to move) and its
move budget (``mate_in``). The agent moves with ``chess_move``; Stockfish answers each move with
its best reply. The puzzle is *solved* when the agent checkmates within ``mate_in`` moves, and
*failed* when the budget runs out, the game ends otherwise, or (``strict``, the default) a move
leaves no forced mate within the moves left, by Stockfish's analysis. ``chess_board`` and
``chess_legal_moves`` read the position without moving; ``chess_replies`` looks one move ahead
(the opponent's legal answers to a move, which is not played). One Stockfish process per env
(python-chess's async UCI client), started in ``start`` and quit in ``close``. Actions and
results are JSON values. See ``docs/recipes/chess_puzzles.md``.
"""

from __future__ import annotations

import asyncio
import os
import re
import shutil
from collections.abc import Mapping
from typing import Any

from agentfly_cli.components.tools import ToolErrorKind, ToolResult, tool
from agentfly_cli.envs.base import BaseEnv, EnvSpec
from agentfly_cli.errors import UserError

DEBIAN_STOCKFISH = "/usr/games/stockfish"  # Debian's package puts it outside a user's PATH
INSTALL_CHESS = "python-chess is not installed; run: pip install 'agentfly-cli[tasks]'"
MAX_MOVE_CHARS = 100
QUIT_TIMEOUT_S = 2.0
SHOWN_LEGAL_MOVES = 12  # how many legal moves an illegal-move error lists
_MOVE_NUMBER = re.compile(r"^\d+\s*\.+\s*")  # "12." or "12..." before a move


def import_chess():
    """The ``chess`` module, or a one-line UserError saying how to install it."""
    try:
        import chess
        import chess.engine
    except ImportError:
        raise UserError(INSTALL_CHESS) from None
    return chess


def find_stockfish(path: str | os.PathLike | None = None) -> str:
    """The Stockfish binary: ``path`` if given, else ``stockfish`` on PATH, else Debian's
    ``/usr/games/stockfish``; a one-line UserError when there is none."""
    if path is not None:
        found = shutil.which(os.fspath(path))
        if found is None:
            raise UserError(
                f"Stockfish not found at {os.fspath(path)!r} (envs.chess.options.engine_path): "
                "give the path of an executable stockfish binary"
            )
        return found
    found = shutil.which("stockfish") or shutil.which(DEBIAN_STOCKFISH)
    if found is None:
        raise UserError(
            "Stockfish not found: install it (Debian/Ubuntu: apt-get install stockfish) or set "
            "envs.chess.options.engine_path to its binary"
        )
    return found


class PuzzleError(UserError, ValueError):
    """A task without a usable puzzle (the dataset's problem, not the model's)."""


class IllegalMoveError(ValueError):
    """A move the position does not allow; the message lists some legal moves."""


class PuzzleOverError(RuntimeError):
    """A move after the puzzle was solved or failed."""


def side_name(color: bool) -> str:
    return "White" if color else "Black"


def parse_move(board, text: Any):
    """The legal move ``text`` names in SAN (``Qxf7#``, ``Nf3``) or UCI (``d1h5``);
    IllegalMoveError otherwise. Check marks, ``!``/``?`` and a move number are ignored. When the
    text holds several words (``Nf3 Nc6 Bb5``, as small models write), the first one is the move.
    """
    if not isinstance(text, str) or not text.strip():
        raise IllegalMoveError("give a move in SAN (e.g. Qh5) or UCI (e.g. d1h5)")
    if len(text) > MAX_MOVE_CHARS:
        raise IllegalMoveError(f"the move is longer than {MAX_MOVE_CHARS} characters")
    cleaned = _MOVE_NUMBER.sub("", text.strip())
    for candidate in dict.fromkeys([cleaned, cleaned.split()[0] if cleaned else ""]):
        move = _legal_move(board, candidate.rstrip("!?.,;").strip())
        if move is not None:
            return move
    raise IllegalMoveError(
        f"illegal move {text.strip()!r}: {side_name(board.turn)} to move. "
        f"Legal moves include: {' '.join(legal_sans(board)[:SHOWN_LEGAL_MOVES])}"
    )


def _legal_move(board, text: str):
    if not text:
        return None
    try:
        move = board.parse_san(text)
    except ValueError:
        try:
            move = import_chess().Move.from_uci(text.lower())
        except ValueError:
            return None
    # a null move ("--", "0000", "Z0") passes the turn: never a legal puzzle move
    return move if move and move in board.legal_moves else None


def legal_sans(board) -> list[str]:
    """The legal moves in SAN, checks first, the way players scan forcing moves first.

    A check is marked ``+``, and so is a mate: ``#`` would give the answer away. Marking checks
    lets a small model find mates by trying checks (a random check mates in one about 30 % of the
    time in the packaged puzzles, a random legal move about 3 %): a reward signal RL can climb.
    """
    checks, others = [], []
    for move in board.legal_moves:
        san = legal_san(board, move)
        (checks if san.endswith("+") else others).append(san)
    return checks + others


def legal_san(board, move) -> str:
    """``move`` in SAN as the move lists write it: a mate marked ``+`` like any check."""
    return as_listed(board.san(move))


def as_listed(san: str) -> str:
    """A SAN move as the env's move lists show it: checks and mates both end in ``+``."""
    return san.rstrip("+#") + "+" if san.endswith(("+", "#")) else san


def render_board(board) -> str:
    """The board as text, rank 8 at the top (uppercase: White), with rank and file labels."""
    rows = [f"{8 - i} {row}" for i, row in enumerate(str(board).splitlines())]
    return "\n".join([*rows, "  a b c d e f g h"])


def puzzle_question(board, mate_in: int) -> str:
    """A puzzle's question as the packaged data writes it: the task, board, FEN, side to move
    and the listed legal moves (checks first)."""
    side = side_name(board.turn)
    return "\n".join(
        [
            f"Chess puzzle: you play {side}. Checkmate within {_moves(mate_in)}.",
            render_board(board),
            f"FEN: {board.fen()}",
            f"{side} to move (move {board.fullmove_number}).",
            "Legal moves: " + " ".join(legal_sans(board)),
        ]
    )


def _moves(count: int) -> str:
    return f"{count} move" + ("" if count == 1 else "s")


class ChessPuzzleEnv(BaseEnv):
    """One puzzle at a time against one Stockfish process.

    Actions: a move string, ``{"op": "move", "move": "Qh5"}``, ``{"op": "replies", "move":
    "Qh5"}`` (look ahead without moving), ``{"op": "board"}``, ``{"op": "legal_moves"}`` or
    ``{"op": "state"}``. Results are dicts: ``fen``, ``player``,
    ``turn``, ``fullmove``, ``mate_in``, ``moves_made``, ``moves_left``, ``status``
    (playing | solved | failed), ``reason``, ``board`` (text), and per op ``agent_move`` /
    ``opponent_move`` (``{"san", "uci"}``), ``legal_moves``, or ``probed_move`` and ``replies``.
    """

    def __init__(
        self,
        engine_path: str | None = None,
        depth: int = 12,
        think_time: float = 2.0,
        threads: int = 1,
        hash_mb: int = 16,
        strict: bool = True,
        list_moves: bool = False,
    ) -> None:
        if depth < 1 or think_time <= 0 or threads < 1 or hash_mb < 1:
            raise UserError(
                "chess env options: depth, threads and hash_mb must be >= 1 and think_time > 0"
            )
        self.engine_path = engine_path
        self.depth, self.think_time = int(depth), float(think_time)
        self.threads, self.hash_mb = int(threads), int(hash_mb)
        self.strict, self.list_moves = bool(strict), bool(list_moves)
        self.engine: Any = None
        self._transport: Any = None
        self._lock = asyncio.Lock()
        self._interrupted = False
        self.closed = False
        self._clear()

    def _clear(self) -> None:
        self.board: Any = None
        self.player = True
        self.mate_in = 0
        self.moves_made = 0
        self.status: str | None = None
        self.reason = ""
        self._game = object()  # a new key makes python-chess send ucinewgame (clears the hash)

    # -- lifecycle -----------------------------------------------------------------------------
    async def start(self) -> None:
        chess = import_chess()
        path = find_stockfish(self.engine_path)
        transport, engine = await chess.engine.popen_uci(path)
        try:
            await engine.configure({"Threads": self.threads, "Hash": self.hash_mb})
        except BaseException:
            transport.close()  # kills the process
            raise
        self._transport, self.engine = transport, engine

    async def reset(self, task: Mapping[str, Any] | None = None) -> dict[str, Any] | None:
        self._clear()
        if task is None:
            return None
        chess = import_chess()
        fen, mate_in = task.get("fen"), task.get("mate_in")
        if not isinstance(fen, str) or not fen.strip():
            raise PuzzleError("the task needs a 'fen' field: the puzzle's position (FEN)")
        if isinstance(mate_in, bool) or not isinstance(mate_in, int) or not 1 <= mate_in <= 20:
            raise PuzzleError("the task needs a 'mate_in' field: the move budget, 1 to 20")
        try:
            board = chess.Board(fen)
        except ValueError as exc:
            raise PuzzleError(f"the task's 'fen' is not a valid FEN: {exc}") from None
        if not board.is_valid() or board.is_game_over():
            raise PuzzleError(f"the task's position is illegal or already over: {fen!r}")
        self.board, self.player, self.mate_in = board, board.turn, mate_in
        self.status = "playing"
        return self._state()

    async def step(self, action: Any) -> dict[str, Any]:
        if self.closed:
            raise RuntimeError("the chess env is closed")
        if isinstance(action, str):
            action = {"op": "move", "move": action}
        if not isinstance(action, Mapping):
            raise TypeError("a chess action is a move string or a dict with 'op'")
        op = action.get("op", "move")
        if self.board is None:
            raise RuntimeError("no puzzle is loaded: the env needs a task with 'fen' and 'mate_in'")
        if op == "state" or op == "board":
            return self._state()
        if op == "legal_moves":
            moves = legal_sans(self.board) if self.status == "playing" else []
            return {**self._state(), "legal_moves": moves}
        if op == "replies":
            return self._replies(action.get("move"))
        if op != "move":
            raise ValueError(f"unknown op {op!r}; use move, replies, board, legal_moves or state")
        async with self._lock:
            try:
                return await self._move(action.get("move"))
            except asyncio.CancelledError:
                self._interrupted = True  # the engine may still be thinking: replace the env
                raise

    async def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        engine, transport, self.engine, self._transport = self.engine, self._transport, None, None
        if engine is not None:
            try:
                await asyncio.wait_for(engine.quit(), QUIT_TIMEOUT_S)
            except (Exception, asyncio.CancelledError):
                pass
            finally:
                transport.close()  # kills the process if it has not exited

    async def healthy(self) -> bool:
        if self.closed or self._interrupted or self.engine is None:
            return False
        return not self.engine.returncode.done()

    @property
    def pid(self) -> int | None:
        """The Stockfish process id (for tests and debugging)."""
        return None if self._transport is None else self._transport.get_pid()

    # -- moves ---------------------------------------------------------------------------------
    def _limit(self):
        return import_chess().engine.Limit(depth=self.depth, time=self.think_time)

    async def _move(self, text: Any) -> dict[str, Any]:
        if self.status != "playing":
            raise PuzzleOverError(f"the puzzle is over ({self.status}): no more moves")
        if self.engine is None:
            raise RuntimeError("the chess env is not started")
        board = self.board.copy()
        move = parse_move(board, text)
        agent = {"san": board.san(move), "uci": move.uci()}
        board.push(move)
        made, status, reason, reply = self.moves_made + 1, "playing", "", None
        left = self.mate_in - made
        if board.is_checkmate():
            status, reason = "solved", "checkmate"
        elif board.is_game_over():
            status, reason = "failed", f"the game ended without mate ({_termination(board)})"
        elif left == 0:
            status, reason = "failed", f"no checkmate within {_moves(self.mate_in)}"
        elif self.strict and not await self._mate_within(board, left):
            status = "failed"
            reason = f"no forced mate in {_moves(left)} after that move (Stockfish)"
        if status == "playing":
            played = await self.engine.play(board, self._limit(), game=self._game)
            reply = {"san": board.san(played.move), "uci": played.move.uci()}
            board.push(played.move)
            if board.is_game_over():
                status, reason = "failed", f"the game ended without mate ({_termination(board)})"
        self.board, self.moves_made, self.status, self.reason = board, made, status, reason
        return {**self._state(), "agent_move": agent, "opponent_move": reply}

    def _replies(self, text: Any) -> dict[str, Any]:
        """The opponent's legal answers to ``text`` in SAN (checks first); nothing is played."""
        if self.status != "playing":
            raise PuzzleOverError(f"the puzzle is over ({self.status}): no more moves")
        board = self.board.copy()
        move = parse_move(board, text)
        probed = {"san": legal_san(board, move), "uci": move.uci()}
        board.push(move)
        return {**self._state(), "probed_move": probed, "replies": legal_sans(board)}

    async def _mate_within(self, board, moves: int) -> bool:
        """Stockfish's judgement: does the player still force mate within ``moves``?"""
        info = await self.engine.analyse(board, self._limit(), game=self._game)
        mate = info["score"].pov(self.player).mate()
        return mate is not None and 0 < mate <= moves

    def _state(self) -> dict[str, Any]:
        board = self.board
        state = {
            "fen": board.fen(),
            "player": side_name(self.player).lower(),
            "turn": side_name(board.turn).lower(),
            "fullmove": board.fullmove_number,
            "mate_in": self.mate_in,
            "moves_made": self.moves_made,
            "moves_left": self.mate_in - self.moves_made,
            "status": self.status,
            "reason": self.reason,
            "board": render_board(board),
        }
        if self.list_moves and self.status == "playing":
            state["legal_moves"] = legal_sans(board)
        return state


def _termination(board) -> str:
    outcome = board.outcome(claim_draw=False)
    return outcome.termination.name.lower().replace("_", " ") if outcome else "game over"


CHESS = EnvSpec(
    name="chess",
    factory=ChessPuzzleEnv,
    description="A mate-in-N chess puzzle per trajectory, Stockfish as the opponent "
    "(chess_move / chess_replies / chess_board / chess_legal_moves)",
    pool_max=16,
    warm_size=0,
    start_timeout=30.0,
    resources={"cpu": 0.5, "memory_mb": 140.0},  # Stockfish 15.1 holds about 136 MB (its NNUE net)
)


# -- tools -----------------------------------------------------------------------------------
def describe(state: Mapping[str, Any]) -> str:
    """The position as the model sees it: the board, whose move, and the moves left."""
    lines = [state["board"], f"FEN: {state['fen']}"]
    if state["status"] == "playing":
        lines.append(
            f"{state['turn'].capitalize()} to move (move {state['fullmove']}). Checkmate "
            f"within {_moves(state['moves_left'])}."
        )
        if "legal_moves" in state:
            lines.append("Legal moves: " + " ".join(state["legal_moves"]))
    else:
        lines.append(f"The puzzle is over: {state['status']} ({state['reason']}).")
    return "\n".join(lines)


# The reward (rewards_builtin/chess.py) reads the opponent's reply from this text.
OPPONENT_REPLY = re.compile(r"Opponent replied \S+ \(([a-h][1-8][a-h][1-8][qrbn]?)\)")


def render_move(result: Mapping[str, Any]) -> ToolResult:
    """A move's outcome: both moves, then the new position, or the verdict (terminal)."""
    agent, reply = result["agent_move"], result["opponent_move"]
    text = f"You played {agent['san']} ({agent['uci']})."
    if reply is not None:
        text += f" Opponent replied {reply['san']} ({reply['uci']})."
    if result["status"] == "solved":
        text += " Checkmate! Puzzle solved."
    elif result["status"] == "failed":
        text += f" Puzzle failed: {result['reason']}."
    if result["status"] == "playing" or reply is not None:
        text += "\n" + describe(result)
    done = result["status"] != "playing"
    return ToolResult(text, terminal=done, info={"status": result["status"]})


@tool(env="chess")
async def chess_move(env: ChessPuzzleEnv, move: str) -> ToolResult:
    """Play your move; the opponent (Stockfish) replies at once.

    Args:
        move: The move in SAN (Qxf7, Nf3, O-O, e8=Q) or UCI (d1h5, e7e8q).
    """
    try:
        result = await env.step({"op": "move", "move": move})
    except (IllegalMoveError, PuzzleOverError) as exc:
        return move_error(exc)
    return render_move(result)


def move_error(exc: Exception) -> ToolResult:
    """An illegal move, or one after the end, as the model's tool error (nothing is played)."""
    message = str(exc)
    return ToolResult.error(message[:1].upper() + message[1:], ToolErrorKind.INVALID_ARGUMENTS)


def render_replies(result: Mapping[str, Any]) -> str:
    """A look-ahead's answer: the opponent's legal replies to the probed move, or that it has
    none. It says neither mate nor stalemate: the ``+`` on the move tells them apart."""
    probed, replies = result["probed_move"], result["replies"]
    side = side_name(result["turn"] != "white")
    head = f"After {probed['san']} ({probed['uci']}), {side}"
    if not replies:
        return f"{head} has no legal reply. Nothing was played."
    count = f"{len(replies)} legal repl{'y' if len(replies) == 1 else 'ies'}"
    return f"{head} has {count}: {' '.join(replies)}. Nothing was played."


@tool(env="chess")
async def chess_replies(env: ChessPuzzleEnv, move: str) -> ToolResult:
    """Look one move ahead: list the opponent's legal replies to a move without playing it.

    Args:
        move: The move to look at, in SAN (Qxf7, Nf3) or UCI (d1h5).
    """
    try:
        result = await env.step({"op": "replies", "move": move})
    except (IllegalMoveError, PuzzleOverError) as exc:
        return move_error(exc)
    return ToolResult(render_replies(result))


@tool(env="chess")
async def chess_board(env: ChessPuzzleEnv) -> str:
    """Show the board, whose move it is and how many moves are left (no move is made)."""
    return describe(await env.step({"op": "board"}))


@tool(env="chess")
async def chess_legal_moves(env: ChessPuzzleEnv) -> str:
    """List the legal moves of the side to move, in SAN (no move is made)."""
    state = await env.step({"op": "legal_moves"})
    if state["status"] != "playing":
        return f"No moves: the puzzle is over ({state['status']})."
    return "Legal moves: " + " ".join(state["legal_moves"])
