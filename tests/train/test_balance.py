"""``trainer.balance``: each step's tasks dealt evenly over a data field's values, resumable,
within a curriculum's level too, and a clear error for a field the data lacks."""

from __future__ import annotations

from collections import Counter

import pytest

from agentfly_cli.errors import UserError
from agentfly_cli.settings.run import DataSettings
from agentfly_cli.settings.train import CurriculumSettings, TrainerSettings
from agentfly_cli.train.tasks.balance import BalancedStream
from agentfly_cli.train.tasks.curriculum import task_stream
from agentfly_cli.train.tasks.plan import TaskPlan

# Nine kinds of unequal size (as search_qa's question types): kind k has 3 + 2k tasks.
ROWS = [{"id": f"k{k}-{i}", "type": f"k{k}"} for k in range(9) for i in range(3 + 2 * k)]


def kinds(picked) -> Counter:
    return Counter(task["type"] for _, task in picked)


def test_every_step_of_nine_holds_each_kind_once():
    stream = BalancedStream(ROWS, "type", seed=0)
    for _ in range(12):
        assert kinds(stream.take(9)) == Counter({f"k{k}": 1 for k in range(9)})


def test_a_plain_stream_leaves_kinds_out_of_steps():
    """What balancing fixes: a shuffled stream of the same rows gives steps without some kinds."""
    plain = task_stream(ROWS, CurriculumSettings(), seed=0, shuffle=True)
    assert any(len(kinds(plain.take(9))) < 9 for _ in range(12))


def test_small_kinds_repeat_and_big_kinds_cycle_through_their_tasks():
    stream = BalancedStream(ROWS, "type", seed=1)
    picked = stream.take(9 * 19)  # 19 rounds: the largest kind (19 tasks) once through
    by_kind: dict[str, list[str]] = {}
    for _, task in picked:
        by_kind.setdefault(task["type"], []).append(task["id"])
    assert sorted(by_kind["k8"]) == sorted(r["id"] for r in ROWS if r["type"] == "k8")
    assert len(by_kind["k0"]) == 19 and len(set(by_kind["k0"])) == 3  # 3 tasks, each again
    assert [position for position, _ in picked] == list(range(9 * 19))


def test_steps_that_do_not_fill_a_round_still_spread_kinds():
    stream = BalancedStream(ROWS, "type", seed=2)
    counts = kinds(stream.take(4 * 9))  # 9 steps of 4 = 4 whole rounds
    assert set(counts.values()) == {4}


def test_a_resumed_stream_continues_exactly():
    first = BalancedStream(ROWS, "type", seed=5)
    first.take(13)
    second = BalancedStream(ROWS, "type", seed=5)
    second.load_state_dict(first.state_dict())
    assert first.take(40) == second.take(40)


def test_the_seed_changes_the_order():
    one, two = BalancedStream(ROWS, "type", seed=1), BalancedStream(ROWS, "type", seed=2)
    assert [t["id"] for _, t in one.take(18)] != [t["id"] for _, t in two.take(18)]


def test_balance_within_each_curriculum_level():
    rows = [{"id": f"{level}-{k}-{i}", "level": level, "type": f"k{k}"}
            for level in (1, 2) for k in range(3) for i in range(2 + k)]  # fmt: skip
    curriculum = CurriculumSettings(field="level", promote_at=0.5, window=1)
    stream = task_stream(rows, curriculum, seed=0, shuffle=True, balance="type")
    for _ in range(4):
        picked = stream.take(3)
        assert {task["level"] for _, task in picked} == {1}
        assert kinds(picked) == Counter({"k0": 1, "k1": 1, "k2": 1})
    assert stream.record(0.9) == "2"
    picked = stream.take(6)
    assert {task["level"] for _, task in picked} == {2}
    assert kinds(picked) == Counter({"k0": 2, "k1": 2, "k2": 2})


def test_the_trainer_setting_reaches_the_task_plan():
    settings = TrainerSettings(tasks_per_step=9, steps=5, balance="type")
    plan = TaskPlan(ROWS, settings, DataSettings(path="tasks.jsonl"))
    for _ in range(5):
        assert len(kinds(plan.take())) == 9


def test_a_field_some_tasks_lack_is_a_clear_error():
    rows = [*ROWS, {"id": "odd"}]
    lacking = r"trainer.balance: 1 of \d+ training tasks have no field 'type'"
    with pytest.raises(UserError, match=lacking):
        BalancedStream(rows, "type")


def test_a_field_of_lists_is_a_clear_error():
    rows = [{"id": "a", "hops": [1, 2]}, {"id": "b", "hops": [1]}]
    with pytest.raises(UserError, match="holds a list, not a value to group tasks by"):
        BalancedStream(rows, "hops")
