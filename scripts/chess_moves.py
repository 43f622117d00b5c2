"""Which moves `chess_puzzles` chains play, and what simple move rules score (docs/learning.md).

Two reports, each optional:

- ``--rules``: on the recipe's packaged puzzles (or ``--puzzles FILE``), how often a rule that
  reads only the listed moves (SAN text, checks first and marked ``+``) picks a winning move:
  a uniform pick among the checks, the first or last check, and the piece-order rule (queen,
  rook, bishop, knight, pawn; captures first), for mates in 1; for mates in 2, how often the
  winning first move is a check and how often a uniform check wins.
- trajectory files (``agentfly eval --out``, or a run's ``trajectories/*.jsonl``): per level
  (``mate_in``), the chains, their mean reward, how many played a listed check first, and for
  mates in 2 how many first moves were winning ones and how many of those went on to mate; and
  the look-ahead (``REPLIES``): how many chains looked (and how often), how many of them found
  a move with no legal reply, and how many played such a move first.
- ``--derive OUT``: the positions those mates in 2 reached after a winning first move and the
  opponent's reply, written as mate-in-1 puzzles (one row per distinct position) for
  ``agentfly eval chess_puzzles --data OUT --set data.holdout=0``: is the second move harder
  inside the chain than as a fresh puzzle?

Run: .venv/bin/python scripts/chess_moves.py [--rules] [FILE.jsonl ...] [--derive OUT] [--json]
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

from agentfly_cli.errors import UserError
from agentfly_cli.trajectory import Trajectory, read_trajectories
from envs_builtin.chess_env import (
    IllegalMoveError,
    import_chess,
    legal_san,
    parse_move,
    puzzle_question,
)
from rewards_builtin.calls import call_records
from rewards_builtin.chess_puzzles import played_moves, replay

PUZZLES = Path(__file__).resolve().parents[1] / "agentfly_cli/recipes/data/chess_puzzles.jsonl"
PIECE_ORDER = {"Q": 4, "R": 3, "B": 2, "N": 1}
LOOK_TOOL = "chess_replies"
NO_REPLY = re.compile(r"^After \S+ \(([a-h][1-8][a-h][1-8][qrbn]?)\), \w+ has no legal reply")


def listed_moves(question: str) -> list[str]:
    """The SAN moves of the question's ``Legal moves:`` line, in their listed order."""
    for line in question.splitlines():
        if line.startswith("Legal moves:"):
            return line.removeprefix("Legal moves:").split()
    raise ValueError("the question has no 'Legal moves:' line")


def winning_san(row: dict[str, Any]) -> set[str]:
    """The row's winning first moves, written as the move list writes them (a mate as ``+``)."""
    board = import_chess().Board(row["fen"])
    moves = (parse_move(board, uci) for uci in row["winning_moves"])
    return {legal_san(board, move) for move in moves}


def piece_order(move: str) -> tuple[int, bool]:
    return PIECE_ORDER.get(move[0], 0), "x" in move


def rules(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """What each listed-move rule scores on the mates in 1, and the mates in 2's first moves."""
    picks: dict[str, list[float]] = defaultdict(list)
    for row in (r for r in rows if r["mate_in"] == 1):
        checks = [m for m in listed_moves(row["question"]) if m.endswith("+")]
        wins = winning_san(row)
        if not checks:
            continue
        picks["uniform_check"].append(sum(m in wins for m in checks) / len(checks))
        picks["first_check"].append(float(checks[0] in wins))
        picks["last_check"].append(float(checks[-1] in wins))
        picks["piece_order"].append(float(max(checks, key=piece_order) in wins))
    first_is_check, uniform = [], []
    for row in (r for r in rows if r["mate_in"] == 2):
        checks = [m for m in listed_moves(row["question"]) if m.endswith("+")]
        wins = winning_san(row)
        first_is_check.append(float(any(m.endswith("+") for m in wins)))
        uniform.append(sum(m in wins for m in checks) / len(checks) if checks else 0.0)
    return {
        "mate_in_1": {
            "puzzles": len(picks["uniform_check"]),
            **{name: round(statistics.mean(v), 4) for name, v in picks.items()},
        },
        "mate_in_2": {
            "puzzles": len(uniform),
            "winning_first_move_is_check": _mean(first_is_check),
            "uniform_check_first_move_wins": _mean(uniform),
        },
    }


def first_move(task: dict[str, Any], moves: list[tuple[str, str | None]]):
    """(the start position, the chain's first move on it), or None when it played no legal move."""
    if not moves:
        return None
    board = import_chess().Board(task["fen"])
    try:
        return board, parse_move(board, moves[0][0])
    except IllegalMoveError:
        return None


def looks(row: Trajectory) -> tuple[int, list[str]]:
    """How many successful looks (``REPLIES``) a chain made, and the moves (UCI) they found
    with no legal reply, in order."""
    count, found = 0, []
    for record in call_records(row):
        if record.get("name") != LOOK_TOOL or record.get("status") != "ok":
            continue
        count += 1
        empty = NO_REPLY.match(str(record.get("observation") or ""))
        if empty:
            found.append(empty.group(1))
    return count, found


def chain_moves(row: Trajectory) -> dict[str, Any]:
    """A chain's first move (listed check or not, winning or not), whether it mated, and its
    looks ahead: how many, how many found no reply, whether its first move was one so found."""
    task, moves = row.task, played_moves(row)
    count, found = looks(row)
    result = {
        "first_check": False,
        "first_winning": False,
        "solved": (row.reward or 0.0) >= 1.0,
        "looks": count,
        "found": len(found),
        "first_move_found": False,
    }
    opening = first_move(task, moves)
    if opening is None:
        return result
    board, first = opening
    result["first_move_found"] = first.uci() in found
    result["first_check"] = board.gives_check(first)
    result["first_winning"] = first.uci() in task["winning_moves"]
    result["solved"] = replay(task["fen"], task["mate_in"], moves)["solved"]
    return result


def derived_mates_in_1(rows: list[Trajectory]) -> list[dict[str, Any]]:
    """Mate-in-1 puzzle rows of the positions mates in 2 reached after a winning first move and
    the opponent's recorded reply, one per distinct position, in the order first reached."""
    seen, out = set(), []
    for row in rows:
        task, moves = row.task, played_moves(row)
        opening = first_move(task, moves) if task["mate_in"] == 2 else None
        if opening is None or moves[0][1] is None:
            continue
        board, first = opening
        if first.uci() not in task["winning_moves"]:
            continue
        board.push(first)
        board.push_uci(moves[0][1])
        if board.fen() in seen:
            continue
        seen.add(board.fen())
        mates = [m.uci() for m in board.legal_moves if _mates(board, m)]
        out.append(
            {
                "id": f"{task['id']}-after-{first.uci()}-{moves[0][1]}",
                "fen": board.fen(),
                "side": task.get("side", ""),
                "mate_in": 1,
                "winning_moves": mates,
                "legal_moves": board.legal_moves.count(),
                "question": puzzle_question(board, 1),
            }
        )
    return out


def _mates(board: Any, move: Any) -> bool:
    board.push(move)
    try:
        return board.is_checkmate()
    finally:
        board.pop()


def summarize(rows: list[Trajectory]) -> dict[str, Any]:
    levels: dict[int, list[dict[str, Any]]] = defaultdict(list)
    rewards: dict[int, list[float]] = defaultdict(list)
    for row in rows:
        levels[row.task["mate_in"]].append(chain_moves(row))
        rewards[row.task["mate_in"]].append(row.reward or 0.0)  # no reward (a failed chain): 0
    out: dict[str, Any] = {"chains": len(rows)}
    for level, chains in sorted(levels.items()):
        entry = {
            "chains": len(chains),
            "mean": _mean(rewards[level]),
            "first_move_check": sum(c["first_check"] for c in chains),
            "solved": sum(c["solved"] for c in chains),
            "looked": sum(c["looks"] > 0 for c in chains),
            "looks": sum(c["looks"] for c in chains),
            "found_no_reply": sum(c["found"] > 0 for c in chains),
            "first_move_found": sum(c["first_move_found"] for c in chains),
        }
        if level > 1:
            winning = [c for c in chains if c["first_winning"]]
            entry["first_move_winning"] = len(winning)
            entry["solved_after_winning_first_move"] = sum(c["solved"] for c in winning)
        out[f"mate_in_{level}"] = entry
    return out


def _mean(values: list[float]) -> float | None:
    return round(statistics.mean(values), 4) if values else None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("files", nargs="*", type=Path)
    parser.add_argument("--rules", action="store_true", help="score the listed-move rules")
    parser.add_argument("--puzzles", type=Path, default=PUZZLES, help="puzzle file for --rules")
    parser.add_argument("--derive", type=Path, help="write the reached mate-in-1 positions here")
    parser.add_argument("--json", action="store_true", help="one JSON object per report")
    args = parser.parse_args(argv)
    if not args.rules and not args.files:
        parser.error("give --rules, trajectory files, or both")
    reports, every_chain = [], []
    try:
        if args.rules:
            with args.puzzles.open(encoding="utf-8") as handle:
                rows = [json.loads(line) for line in handle if line.strip()]
            reports.append({"puzzles": str(args.puzzles), **rules(rows)})
        for path in args.files:
            chains = read_trajectories(path)
            reports.append({"file": str(path), **summarize(chains)})
            every_chain.extend(chains)
        if args.derive is not None:
            derived = derived_mates_in_1(every_chain)  # a position once, whichever file
            text = "".join(json.dumps(row) + "\n" for row in derived)
            args.derive.write_text(text, encoding="utf-8")
            reports.append({"derived": str(args.derive), "positions": len(derived)})
    except UserError as exc:  # a trajectory file: its one-line error names the fix
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except (OSError, ValueError, KeyError) as exc:
        problem = f"a row has no {exc.args[0]!r} field" if isinstance(exc, KeyError) else exc
        print(f"error: {problem}; give a chess_puzzles puzzle or trajectory file", file=sys.stderr)
        return 2
    for report in reports:
        print(json.dumps(report) if args.json else _text(report))
    return 0


def _text(report: dict[str, Any]) -> str:
    if "derived" in report:
        return f"wrote {report['positions']} mate-in-1 positions to {report['derived']}"
    head = report.get("file") or report["puzzles"]
    lines = [f"{head}:"]
    for key, value in report.items():
        if isinstance(value, dict):
            lines.append(f"  {key}: " + ", ".join(f"{k} {v}" for k, v in value.items()))
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
