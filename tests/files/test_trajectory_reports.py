"""The reward channel in the trajectory record: ``tool_calls[].info``, ``env_reports`` and the
derived ``env_reward`` survive JSONL, are shape-checked, and records written before them read."""

from __future__ import annotations

import json

import pytest

from agentfly_cli.errors import UserError
from agentfly_cli.trajectory import (
    ToolCallRecord,
    Trajectory,
    read_trajectories,
    write_trajectories,
)

REPORT = {"turn": 0, "source": "tool:move", "reward": 0.5, "done": True, "info": {"score": 5}}


def reporting() -> Trajectory:
    trajectory = Trajectory(ids=[1, 2], loss_mask=[0, 1], logprobs=[None, -0.5])
    trajectory.tool_calls = [ToolCallRecord(0, "c0", "move", {"to": "e4"}, "ok", "ok",
                                            info={"score": 5, "done": True})]  # fmt: skip
    trajectory.env_reports = [
        {"turn": -1, "source": "env:game", "reward": None, "done": False, "info": {}},
        REPORT,
    ]
    return trajectory


def test_reports_and_call_info_round_trip_with_the_derived_env_reward(tmp_path):
    path = tmp_path / "t.jsonl"
    write_trajectories(path, [reporting()])
    line = json.loads(path.read_text())
    assert line["env_reward"] == 0.5 and line["env_reports"][1] == REPORT
    assert line["tool_calls"][0]["info"] == {"score": 5, "done": True}
    [back] = read_trajectories(path)
    assert back.to_dict() == reporting().to_dict() and back.env_reward == 0.5
    assert Trajectory().env_reward is None  # nothing reported a reward


def test_a_record_written_before_the_reward_channel_reads(tmp_path):
    old = {"ids": [5], "loss_mask": [0], "logprobs": [None],
           "turns": [{"role": "prompt", "start": 0, "end": 1}],
           "tool_calls": [{"turn": 0, "id": "c", "name": "calc", "arguments": {},
                           "observation": "2", "status": "ok"}],
           "finish_reason": "answer"}  # fmt: skip
    path = tmp_path / "old.jsonl"
    path.write_text(json.dumps(old) + "\n")
    [trajectory] = read_trajectories(path)
    assert trajectory.env_reports == [] and trajectory.env_reward is None
    assert trajectory.tool_calls[0].info == {}


@pytest.mark.parametrize(
    ("field", "value", "fragment"),
    [
        ("env_reports", {"turn": 0}, "env_reports must be a list"),
        ("env_reports", [{"turn": 0}], "env_reports hold objects with the keys"),
        ("env_reports", [{**REPORT, "reward": "high"}], "reward must be a number or null"),
        ("env_reports", [{**REPORT, "done": 1}], "done must be true or false"),
        ("env_reports", [{**REPORT, "turn": "0"}], "turn must be an integer"),
    ],
)
def test_a_bad_report_is_a_bad_record(tmp_path, field, value, fragment):
    record = {"ids": [], "loss_mask": [], "logprobs": [], field: value}
    path = tmp_path / "bad.jsonl"
    path.write_text(json.dumps(record) + "\n")
    with pytest.raises(UserError) as caught:
        read_trajectories(path)
    assert f"{path}:1 is not a trajectory record" in str(caught.value)
    assert fragment in str(caught.value)


def test_a_call_whose_info_is_not_an_object_is_a_bad_record(tmp_path):
    call = {"turn": 0, "id": "c", "name": "n", "arguments": {}, "observation": "", "status": "ok",
            "info": [1]}  # fmt: skip
    path = tmp_path / "bad.jsonl"
    path.write_text(json.dumps({"ids": [], "loss_mask": [], "logprobs": [],
                                "tool_calls": [call]}) + "\n")  # fmt: skip
    with pytest.raises(UserError, match="tool_calls\\[\\].info must be objects"):
        read_trajectories(path)
