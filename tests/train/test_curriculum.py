"""``trainer.curriculum``: tasks level by level, promotion on the training reward, resume."""

from __future__ import annotations

import json

import pytest

from agentfly_cli.errors import UserError
from agentfly_cli.settings.train import CurriculumSettings
from agentfly_cli.train.tasks.curriculum import CurriculumStream, level_names, task_stream
from agentfly_cli.train.tasks.stream import TaskStream
from agentfly_cli.trajectory import read_trajectories
from tests.helpers.recipe_checks import agentfly

ROWS = [{"id": f"t{i}", "level": 1 + i % 3} for i in range(30)]


def settings(**fields) -> CurriculumSettings:
    return CurriculumSettings(field="level", **fields)


def levels_of(picked) -> list[int]:
    return [task["level"] for _, task in picked]


def test_levels_default_to_the_fields_values_sorted_numerically():
    rows = [{"level": v} for v in (10, 2, 1, 2)]
    assert level_names(rows, settings()) == ["1", "2", "10"]
    assert level_names(rows, settings(levels=[10, 1, 2])) == ["10", "1", "2"]
    words = [{"level": v} for v in ("hard", "easy")]
    assert level_names(words, settings()) == ["easy", "hard"]


def test_tasks_come_from_the_current_level_until_the_window_reaches_promote_at():
    stream = CurriculumStream(ROWS, settings(promote_at=0.5, window=2), seed=3)
    assert levels_of(stream.take(4)) == [1, 1, 1, 1]
    assert stream.record(0.9) is None  # one step: the window is not full
    assert stream.record(0.05) is None  # mean 0.475 < 0.5
    assert stream.current == "1"
    assert stream.record(0.95) == "2"  # the last two: (0.05 + 0.95) / 2 = 0.5
    assert levels_of(stream.take(4)) == [2, 2, 2, 2]
    assert stream.record(1.0) is None  # the window restarts at a new level
    assert stream.record(1.0) == "3"
    assert stream.record(1.0) is None and stream.record(1.0) is None  # the last level stays
    assert stream.metrics() == {"curriculum/level": 2.0, "data/position": 8.0}


def test_positions_are_global_and_each_level_cycles_through_all_its_tasks():
    stream = CurriculumStream(ROWS, settings(), seed=0)
    picked = stream.take(10) + stream.take(10)
    assert [position for position, _ in picked] == list(range(20))
    ids = [task["id"] for _, task in picked]
    assert sorted(ids[:10]) == sorted(r["id"] for r in ROWS if r["level"] == 1)  # an epoch
    assert set(ids[10:]) <= {r["id"] for r in ROWS if r["level"] == 1}


def test_review_mixes_easier_levels_in_after_a_promotion():
    stream = CurriculumStream(ROWS, settings(review=0.25, window=1, start=3), seed=1)
    counts = []
    for _ in range(50):
        picked = levels_of(stream.take(8))
        assert set(picked) <= {1, 2, 3}
        counts.append(sum(level < 3 for level in picked))
    assert sum(counts) == pytest.approx(0.25 * 8 * 50, rel=0.1)  # 2 of 8 per step on average
    first = CurriculumStream(ROWS, settings(review=0.5), seed=1)
    assert levels_of(first.take(8)) == [1] * 8  # nothing easier than the first level


def test_the_order_is_seeded_and_a_restored_stream_continues_exactly():
    def run(stream, rewards):
        out = []
        for reward in rewards:
            out.append([task["id"] for _, task in stream.take(3)])
            stream.record(reward)
        return out

    rewards = [0.0, 0.7, 0.8, 0.1, 0.9, 0.9, 0.2]
    config = settings(review=0.3)
    whole = run(CurriculumStream(ROWS, config, seed=5), rewards)
    assert whole == run(CurriculumStream(ROWS, config, seed=5), rewards)
    assert whole != run(CurriculumStream(ROWS, config, seed=6), rewards)
    first = CurriculumStream(ROWS, config, seed=5)
    head = run(first, rewards[:3])
    state = json.loads(json.dumps(first.state_dict()))  # it survives a checkpoint
    resumed = CurriculumStream(ROWS, config, seed=5)
    resumed.load_state_dict(state)
    assert head + run(resumed, rewards[3:]) == whole


def test_bad_curriculum_settings_are_one_line_errors():
    with pytest.raises(UserError, match="no training row has a field 'difficulty'"):
        CurriculumStream(ROWS, CurriculumSettings(field="difficulty"))
    with pytest.raises(UserError, match="no training task has level = '4'; the data holds 1, 2, 3"):
        CurriculumStream(ROWS, settings(levels=[1, 4]))
    with pytest.raises(UserError, match="start: 7 is not one of the levels 1, 2, 3"):
        CurriculumStream(ROWS, settings(start=7))
    stream = CurriculumStream(ROWS, settings(levels=[1, 2]))
    with pytest.raises(UserError, match="has 3 levels, these settings 2"):
        stream.load_state_dict({"level": 0, "position": 0, "window": [], "positions": [0, 0, 0]})


def test_without_a_field_the_stream_is_the_plain_one():
    stream = task_stream(ROWS, CurriculumSettings(), seed=0, shuffle=True)
    assert isinstance(stream, TaskStream) and stream.record(1.0) is None
    stream.take(5)
    assert stream.metrics() == {"data/position": 5.0}
    assert stream.state_dict() == {"position": 5}


def test_a_training_run_moves_up_a_level_and_resumes_there(tiny_model, tmp_path):
    run = tmp_path / "run"
    args = [
        "train", "calculator", "--model", tiny_model, "--out", run, "--quiet",
        "--set", "trainer.tasks_per_step=2", "--set", "rollout.n=2",
        "--set", "trainer.save_every=1",
        "--set", "trainer.curriculum={field: kind, levels: [add, sub, mul], promote_at: 0.0, "
        "window: 2}",
    ]  # fmt: skip
    result = agentfly(*args, "--steps", "3")
    assert result.exit_code == 0, result.output
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    levels = [r["curriculum/level"] for r in records if "curriculum/level" in r]
    assert levels == [0.0, 0.0, 1.0]  # promoted after step 2 (a window of 2 steps)
    kinds = [
        {t.task["kind"] for t in read_trajectories(run / "trajectories" / f"step-{s:06d}.jsonl")}
        for s in (1, 2, 3)
    ]
    assert kinds == [{"add"}, {"add"}, {"sub"}]
    resumed = agentfly(*args, "--steps", "5", "--resume")
    assert resumed.exit_code == 0, resumed.output
    step5 = read_trajectories(run / "trajectories" / "step-000005.jsonl")
    assert {t.task["kind"] for t in step5} == {"mul"}  # the window carried over the resume


def test_rows_outside_the_levels_are_counted_and_the_run_says_so(tiny_model, tmp_path):
    assert CurriculumStream(ROWS, settings(levels=[1, 2])).unlevelled == 10
    result = agentfly(
        "train", "calculator", "--model", tiny_model, "--out", tmp_path / "run", "--steps", "1",
        "--set", "trainer.tasks_per_step=1", "--set", "rollout.n=2",
        "--set", "trainer.curriculum={field: kind, levels: [add, sub]}",
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert "training rows have no kind among the levels add, sub" in result.output


def test_an_unknown_curriculum_field_stops_the_run_in_one_line(tiny_model, tmp_path):
    result = agentfly(
        "train", "calculator", "--model", tiny_model, "--out", tmp_path / "run", "--quiet",
        "--set", "trainer.curriculum.field=difficulty", "--steps", "1",
    )  # fmt: skip
    assert result.exit_code == 2, result.output
    assert "trainer.curriculum.field: no training row has a field 'difficulty'" in result.output
    assert "Traceback" not in result.output
