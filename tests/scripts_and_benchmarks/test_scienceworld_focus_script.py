"""scripts/scienceworld_focus.py: the focus counts docs/learning.md cites, on hand-made chats."""

from __future__ import annotations

import json

from agentfly_cli.trajectory import Trajectory, write_trajectories
from tests.helpers.paths import load_script

QUESTION = "Your task is to find a(n) animal. First, focus on the thing."
EXAMPLE = [  # the prompt's worked example: a right focus that is not the chain's
    {"role": "user", "content": "Your task is to find a(n) non-living thing."},
    {"role": "assistant", "content": "ACTION: focus on chair"},
    {"role": "user", "content": "You focus on the chair.\nScore: 67/100."},
]


def chain(turns, reward=0.0, task_name="find-animal") -> Trajectory:
    messages = [{"role": "system", "content": "You do science tasks."}, *EXAMPLE]
    messages.append({"role": "user", "content": QUESTION})
    for action, reply in turns:
        messages.append({"role": "assistant", "content": f"ACTION: {action}"})
        messages.append({"role": "user", "content": reply})
    task = {"id": "t", "task_name": task_name, "question": QUESTION}
    return Trajectory(messages=messages, task=task, reward=reward)


TELEPORT = ("teleport to outside", "You teleport to the outside.\nScore: 25/100.")
UNKNOWN = ("focus on dragon", "No known action matches that input. Actions look like: ...")


def test_first_focus_kinds():
    script = load_script("scripts/scienceworld_focus.py")
    kind = lambda turns: script.first_focus(script.actions(chain(turns)))  # noqa: E731
    right = ("focus on frog", "You focus on the frog.\nScore: 75/100.")
    assert kind([TELEPORT, UNKNOWN, right]) == "right"
    assert kind([TELEPORT, right]) == "right"
    wrong = ("focus on axe", "You focus on the axe.\nThe task has failed. Score: -100/100.")
    assert kind([TELEPORT, UNKNOWN, wrong]) == "wrong"
    assert kind([TELEPORT, UNKNOWN, UNKNOWN]) == "unknown_only"
    # the worked example's right focus is the prompt's, not the chain's
    assert kind([TELEPORT]) == "never"
    assert kind([("focus on frog", "You focus on the frog.\nScore: 0/100.")]) == "other"


def test_summary_counts_per_file(tmp_path, capsys):
    script = load_script("scripts/scienceworld_focus.py")
    rows = [
        chain([TELEPORT, ("focus on frog", "You focus on the frog.\nScore: 75/100.")], 1.0),
        chain([TELEPORT, UNKNOWN], 0.25, task_name="find-plant"),
        chain([TELEPORT], 0.25, task_name="find-plant"),
    ]
    path = tmp_path / "eval.jsonl"
    write_trajectories(path, rows)
    assert script.main([str(path), "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["chains"] == 3 and result["completed"] == 1
    assert result["first_focus"] == {
        "right": 1,
        "wrong": 0,
        "other": 0,
        "unknown_only": 1,
        "never": 1,
    }
    assert result["by_type"] == {"find-animal": 1.0, "find-plant": 0.25}
    assert script.main([str(tmp_path / "missing.jsonl")]) == 2
    assert "not found" in capsys.readouterr().err
