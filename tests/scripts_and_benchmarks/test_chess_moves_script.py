"""scripts/chess_moves.py: the move-rule scores and chain counts docs/learning.md cites."""

from __future__ import annotations

import json

import pytest

from agentfly_cli.trajectory import ToolCallRecord, Trajectory, write_trajectories
from tests.helpers.paths import load_script

pytest.importorskip("chess")

# Mate in 1 with three listed checks: Qxf7+ (not mate: the king takes), Qb8# and Ra8#.
MATE_IN_1 = {
    "id": "m1",
    "fen": "6k1/5ppp/8/8/8/1Q6/5PPP/R5K1 w - - 0 1",
    "mate_in": 1,
    "winning_moves": ["b3b8", "a1a8"],
    "question": "Chess puzzle.\nLegal moves: Qxf7+ Qb8+ Ra8+ Qc2 Kf1",
}
# Mate in 2 (the packaged chess-000): Na7+ Kb8 Rd8#, or Rc7+ first.
MATE_IN_2 = {
    "id": "m2",
    "fen": "2k5/5Rb1/1p5p/1N4P1/P1P1p3/4B3/1P4PP/2KR4 w - - 6 37",
    "mate_in": 2,
    "winning_moves": ["f7c7", "b5a7"],
    "question": "Chess puzzle.\nLegal moves: Rf8+ Rc7+ Na7+ Nd6+ Rd8+ Rxg7 Re7",
}


def chain(task, moves, reward) -> Trajectory:
    """A chain that played ``moves``: (SAN, observation) of each successful chess_move call."""
    calls = [
        ToolCallRecord(
            turn=i,
            id=f"c{i}",
            name="chess_move",
            arguments={"move": san},
            observation=observation,
            status="ok",
        )
        for i, (san, observation) in enumerate(moves)
    ]
    return Trajectory(task=task, tool_calls=calls, reward=reward)


def test_listed_move_rules_score_each_pick():
    script = load_script("scripts/chess_moves.py")
    scores = script.rules([MATE_IN_1, MATE_IN_2])
    one = scores["mate_in_1"]
    assert one["puzzles"] == 1
    assert one["uniform_check"] == pytest.approx(2 / 3, abs=1e-4)
    assert one["first_check"] == 0.0  # Qxf7+: the king takes the queen
    assert one["last_check"] == 1.0
    assert one["piece_order"] == 0.0  # the queen's capture comes first, and is not mate
    two = scores["mate_in_2"]
    assert two["winning_first_move_is_check"] == 1.0
    assert two["uniform_check_first_move_wins"] == pytest.approx(2 / 5)


def look(turn, san, uci, observation, status="ok") -> ToolCallRecord:
    return ToolCallRecord(
        turn=turn,
        id=f"look{turn}",
        name="chess_replies",
        arguments={"move": san},
        observation=f"After {san} ({uci}), Black has {observation}. Nothing was played.",
        status=status,
    )


def test_chains_count_looks_ahead_and_whether_the_found_move_was_played():
    script = load_script("scripts/chess_moves.py")
    found = chain(MATE_IN_1, [("Ra8+", "You played Ra8# (a1a8). Checkmate!")], 1.0)
    found.tool_calls[:0] = [
        look(0, "Qxf7+", "b3f7", "1 legal reply: Kxf7"),
        look(1, "Ra8+", "a1a8", "no legal reply"),
    ]
    ignored = chain(MATE_IN_1, [("Qxf7+", "You played Qxf7+ (b3f7). Puzzle failed.")], 0.0)
    ignored.tool_calls[:0] = [look(0, "Qb8+", "b3b8", "no legal reply")]
    failed_look = chain(MATE_IN_1, [], 0.0)
    failed_look.tool_calls = [look(0, "Kh9", "h9h9", "no legal reply", status="error")]
    summary = script.summarize([found, ignored, failed_look])["mate_in_1"]
    assert summary["looked"] == 2 and summary["looks"] == 3  # an error is no look
    assert summary["found_no_reply"] == 2 and summary["first_move_found"] == 1


def test_chains_count_first_moves_and_mates_after_a_winning_start():
    script = load_script("scripts/chess_moves.py")
    reply = "You played Na7+ (b5a7). Opponent replied Kb8 (c8b8)."
    rows = [
        chain(MATE_IN_1, [("Ra8+", "You played Ra8# (a1a8). Checkmate!")], 1.0),
        chain(MATE_IN_1, [("Qc2", "You played Qc2 (b3c2). Puzzle failed.")], 0.0),
        chain(MATE_IN_2, [("Na7+", reply), ("Rd8", "You played Rd8# (d1d8). Checkmate!")], 1.0),
        chain(MATE_IN_2, [("Na7+", reply), ("Re7", "You played Re7 (f7e7). Puzzle failed.")], 0.0),
        chain(MATE_IN_2, [("Rf8+", "You played Rf8+ (f7f8). Opponent replied Bxf8 (g7f8).")], 0.0),
        chain(MATE_IN_2, [], 0.0),  # no legal move played
    ]
    summary = script.summarize(rows)
    assert summary["chains"] == 6
    no_looks = {"looked": 0, "looks": 0, "found_no_reply": 0, "first_move_found": 0}
    assert summary["mate_in_1"] == {
        "chains": 2,
        "mean": 0.5,
        "first_move_check": 1,
        "solved": 1,
        **no_looks,
    }
    assert summary["mate_in_2"] == {
        "chains": 4,
        "mean": 0.25,
        "first_move_check": 3,
        "solved": 1,
        **no_looks,
        "first_move_winning": 2,
        "solved_after_winning_first_move": 1,
    }


def test_cli_reads_files_and_names_a_bad_one(tmp_path, capsys):
    script = load_script("scripts/chess_moves.py")
    path = tmp_path / "eval.jsonl"
    write_trajectories(path, [chain(MATE_IN_1, [("Ra8", "Checkmate!")], 1.0)])
    assert script.main([str(path), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["mate_in_1"]["solved"] == 1
    bad = tmp_path / "bad.jsonl"
    bad.write_text("{not json\n", encoding="utf-8")
    assert script.main([str(bad)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and str(bad) in err and "Traceback" not in err
    not_puzzles = tmp_path / "rows.jsonl"
    not_puzzles.write_text('{"id": 1}\n', encoding="utf-8")
    assert script.main(["--rules", "--puzzles", str(not_puzzles)]) == 2
    err = capsys.readouterr().err
    assert (
        err
        == "error: a row has no 'mate_in' field; give a chess_puzzles puzzle or trajectory file\n"
    )


def test_derive_writes_each_reached_mate_in_1_once(tmp_path, capsys):
    script = load_script("scripts/chess_moves.py")
    reply = "You played Na7+ (b5a7). Opponent replied Kb8 (c8b8)."
    chains = [
        chain(MATE_IN_2, [("Na7+", reply), ("Re7", "You played Re7 (f7e7). Puzzle failed.")], 0.0),
        chain(MATE_IN_2, [("b5a7", reply)], 0.0),  # the same position, reached in UCI
        chain(MATE_IN_2, [("Rf8+", "You played Rf8+ (f7f8). Opponent replied Bxf8 (g7f8).")], 0.0),
        chain(MATE_IN_1, [("Ra8+", "You played Ra8# (a1a8). Checkmate!")], 1.0),
    ]
    assert len(script.derived_mates_in_1(chains)) == 1
    path = tmp_path / "eval.jsonl"
    write_trajectories(path, chains)
    write_trajectories(tmp_path / "again.jsonl", chains)  # a second file reaching it again
    out = tmp_path / "derived.jsonl"
    assert script.main([str(path), str(tmp_path / "again.jsonl"), "--derive", str(out)]) == 0
    assert f"wrote 1 mate-in-1 positions to {out}" in capsys.readouterr().out
    (row,) = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
    assert row["fen"].startswith("1k6/N4Rb1/")  # the knight on a7, the king driven to b8
    assert row["mate_in"] == 1 and row["winning_moves"] == ["d1d8"]
    assert "Checkmate within 1 move." in row["question"]
    assert "Rd8+" in script.listed_moves(row["question"])  # the mate, listed as a check
