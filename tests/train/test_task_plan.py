"""``TaskPlan``: what each training step trains on (the split, each rank's share, the
curriculum's promotion line, the checkpointed state)."""

from __future__ import annotations

import pytest

from agentfly_cli.errors import UserError
from agentfly_cli.settings.run import DataSettings
from agentfly_cli.settings.train import TrainerSettings
from agentfly_cli.train.tasks.plan import TaskPlan

ROWS = [{"id": f"t{i}", "level": 1 + i % 2} for i in range(40)]
DATA = DataSettings(path="tasks.jsonl")


def plan(**trainer) -> TaskPlan:
    settings = TrainerSettings(**{"tasks_per_step": 4, "steps": 10, **trainer})
    return TaskPlan(ROWS, settings, DATA)


def ids(picked) -> list[str]:
    return [task["id"] for _, task in picked]


def test_held_out_tasks_never_reach_a_step():
    from agentfly_cli.train.tasks.run_tasks import RunTasks

    data = DataSettings(path="tasks.jsonl", holdout=0.1)  # 4 of the 40 rows
    run = RunTasks.of_rows(ROWS, data, "tasks.jsonl")
    settings = TrainerSettings(tasks_per_step=4, steps=10, eval={"every": 5})
    tasks = TaskPlan(run.train, settings, data, file_rows=run.rows)
    held = {row["id"] for row in tasks.split.eval}
    assert len(held) == 4
    drawn = [i for _ in range(20) for i in ids(tasks.take())]
    assert len(drawn) == 80 and set(drawn) == {r["id"] for r in ROWS} - held


def test_the_ranks_share_one_draw_without_overlap():
    ranks = [plan(), plan()]
    alone = plan()
    for _ in range(3):
        first, second = ranks[0].take(0, 2), ranks[1].take(1, 2)
        assert ids(first) + ids(second) == ids(alone.take())
        assert len(first) == len(second) == 2


def test_a_promotion_returns_its_line_and_a_restored_plan_continues():
    tasks = plan(curriculum={"field": "level", "promote_at": 0.5, "window": 1})
    assert {task["level"] for _, task in tasks.take()} == {1}
    assert tasks.record(1, {"tools/errors": 0.0}) is None  # no reward logged: nothing to feed
    line = tasks.record(1, {"reward/mean": 0.75})
    assert line == "curriculum: after step 1 the training reward reached 0.5; moving up to level 2"
    assert tasks.metrics()["curriculum/level"] == 1.0
    restored = plan(curriculum={"field": "level", "promote_at": 0.5, "window": 1})
    restored.load_state_dict(tasks.state_dict(), tasks.position)
    assert ids(restored.take()) == ids(tasks.take())


def test_training_on_the_held_out_side_is_refused():
    data = DataSettings(path="tasks.jsonl", holdout=0.1, split="heldout")
    with pytest.raises(UserError, match="data.split: heldout would train on the held-out"):
        TaskPlan(ROWS, TrainerSettings(), data)
