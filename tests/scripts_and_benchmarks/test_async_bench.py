"""``benchmarks/async_bench.py`` on the tiny model: its slow tool, its JSON, its refusals (the
real comparison runs SmolLM2 for an hour; docs/async.md)."""

from __future__ import annotations

import asyncio
import json
import time

import pytest

from tests.helpers.paths import load_script


@pytest.fixture(scope="module")
def bench():
    return load_script("benchmarks/async_bench.py")


def test_the_slow_tool_waits_its_latency_and_answers_like_the_calculator(bench):
    latencies = [bench.latency_for(f"{a} * {a}") for a in range(200)]
    assert all(0.5 <= x <= 3.0 for x in latencies)
    assert min(latencies) < 0.8 and max(latencies) > 2.7  # spread over the range
    assert bench.latency_for("2 + 2") == bench.latency_for("2 + 2")
    slower = [bench.latency_for(f"{a} * {a}", (3.0, 8.0)) for a in range(200)]
    assert all(3.0 <= x <= 8.0 for x in slower) and max(slower) > 7.5

    tool = bench.slow_calculator_tool()
    assert tool.name == "calculator"
    started = time.perf_counter()
    result = asyncio.run(tool.invoke({"expression": "17 * 23"}))
    assert result.observation == "391"
    assert time.perf_counter() - started >= bench.latency_for("17 * 23") - 0.01


def test_a_sync_run_reports_the_speedup_a_perfect_overlap_would_give(bench, tmp_path):
    steps = [  # rollout 10 s + update 30 s, then rollout 30 s + update 10 s
        {"reward/mean": 0.5, "time/step_s": 40.0, "time/rollout_s": 10.0, "time/train_s": 29.0,
         "time/sync_s": 1.0, "time/cpu_s": 50.0},
        {"reward/mean": 0.7, "time/step_s": 40.0, "time/rollout_s": 30.0, "time/train_s": 9.5,
         "time/sync_s": 0.5, "time/cpu_s": 50.0},
    ]  # fmt: skip
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(s) + "\n" for s in steps))
    result = bench.summarize(tmp_path, wall_s=90.0, cores=2)
    # overlapped, each step lasts as long as its longer phase: 80 s of steps become 60 s
    assert result["overlap_ceiling"] == pytest.approx(80 / 60, abs=1e-3)
    # and its 100 CPU seconds need at least 50 s on 2 cores: no overlap beats 80 / 50 = 1.6x
    assert result["cpu_cores_busy"] == pytest.approx(1.25)
    assert result["cpu_ceiling"] == pytest.approx(1.6)
    assert result["ceiling"] == result["overlap_ceiling"]  # the smaller bound
    # on 3 cores of which the steps kept 1.25 busy the CPU bound is 2.4x; with 62.5 CPU
    # seconds a step (1.56 cores busy) on 2 cores it is 1.28x, and binds
    assert bench.summarize(tmp_path, wall_s=90.0, cores=3)["cpu_ceiling"] == pytest.approx(2.4)
    for step in steps:
        step["time/cpu_s"] = 62.5
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(s) + "\n" for s in steps))
    tight = bench.summarize(tmp_path, wall_s=90.0, cores=2)
    assert tight["ceiling"] == tight["cpu_ceiling"] == pytest.approx(1.28)
    assert result["steps_per_hour"] == pytest.approx(90.0)
    assert result["trainer_idle_fraction"] == pytest.approx(0.5)

    for step in steps:  # an async run: the ceiling is the sync run's alone
        step.update({"async/trainer_wait_s": 0.0, "async/producer_busy_s": 60.0})
        step.update({"async/dropped_groups": 0})
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(s) + "\n" for s in steps))
    assert "overlap_ceiling" not in bench.summarize(tmp_path, wall_s=90.0)


@pytest.mark.slow  # three processes, each loading torch and the model (about 40 s)
def test_one_run_compares_sync_and_async_on_the_tiny_model(bench, tmp_path, tiny_model):
    out = tmp_path / "bench.json"
    code = bench.main(
        [
            "--model", str(tiny_model), "--steps", "2", "--cases", "latency",
            "--modes", "sync,async1", "--out", str(out), "--runs", str(tmp_path / "runs"),
            "--set", "rollout.n=2", "--set", "trainer.tasks_per_step=2",
        ]
    )  # fmt: skip
    assert code == 0
    report = json.loads(out.read_text())
    runs = report["cases"]["latency"]
    assert set(runs) == {"sync", "async1"}
    for result in runs.values():
        assert result["steps"] == 2 and len(result["reward"]) == 2
        assert result["steps_per_hour"] > 0 and 0 <= result["trainer_idle_fraction"] <= 1
        assert 0 <= result["producer_idle_fraction"] <= 1
        assert 0 < result["cpu_cores_busy"] <= report["cores"]  # time/cpu_s is logged
    assert runs["sync"]["speedup_vs_sync"] == 1.0
    assert runs["async1"]["speedup_vs_sync"] == pytest.approx(
        runs["async1"]["steps_per_hour"] / runs["sync"]["steps_per_hour"], rel=1e-2
    )
    assert "staleness_mean" in runs["async1"] and "staleness_mean" not in runs["sync"]
    assert runs["sync"]["overlap_ceiling"] >= 1.0 and "overlap_ceiling" not in runs["async1"]
    sync = runs["sync"]
    assert sync["ceiling"] == min(sync["overlap_ceiling"], sync["cpu_ceiling"])
    assert runs["async1"]["dropped_groups"] == 0
    assert (tmp_path / "bench-latency.png").stat().st_size > 1000


def test_an_unknown_case_or_mode_is_refused_with_exit_2(bench, capsys):
    assert bench.main(["--cases", "latencyy", "--modes", "async3"]) == 2
    assert "unknown case or mode latencyy, async3; cases: latency" in capsys.readouterr().err


@pytest.mark.parametrize(
    "latency, message",
    [("3", "'3' is not LOW,HIGH in seconds"), ("8,3", "'8,3': need 0 <= LOW <= HIGH"),
     ("-1,2", "need 0 <= LOW <= HIGH"), ("a,b", "is not LOW,HIGH")],
)  # fmt: skip
def test_a_bad_latency_range_is_refused_with_exit_2(bench, capsys, latency, message):
    with pytest.raises(SystemExit) as exit_info:
        bench.main([f"--latency={latency}"])
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err


def test_without_matplotlib_the_json_is_still_written_case_by_case(
    bench, tmp_path, monkeypatch, capsys
):
    """A bare GPU machine may lack matplotlib: the bench notes the missing plot and keeps its
    JSON, written after each case (a run stopped by a time limit keeps the cases it ended)."""
    import subprocess
    import types

    def fake_run(command, **_):  # the child: metrics of two steps in its run folder
        assert command[command.index("--latency") + 1] == "2.0,6.0"  # the child's tool waits
        run_dir = tmp_path / "runs" / command[-3] / command[-2]
        run_dir.mkdir(parents=True)
        step = {"reward/mean": 0.5, "time/step_s": 10.0, "time/rollout_s": 4.0,
                "time/train_s": 6.0, "time/sync_s": 0.0, "time/cpu_s": 15.0}  # fmt: skip
        (run_dir / "metrics.jsonl").write_text(json.dumps(step) + "\n" + json.dumps(step) + "\n")
        return types.SimpleNamespace(returncode=0, stderr="")

    def no_matplotlib(*_):
        raise ImportError("No module named 'matplotlib'")

    monkeypatch.setattr(subprocess, "run", fake_run)
    monkeypatch.setattr(bench, "plot", no_matplotlib)
    out = tmp_path / "bench.json"
    runs = str(tmp_path / "runs")
    code = bench.main(["--modes", "sync", "--latency", "2,6", "--out", str(out), "--runs", runs])
    assert code == 0
    report = json.loads(out.read_text())
    assert set(report["cases"]) == {"latency", "calculator"}
    assert report["latency_s"] == [2.0, 6.0]
    assert report["cases"]["calculator"]["sync"]["cpu_cores_busy"] == 1.5
    err = capsys.readouterr().err
    assert "note: no plot of latency (No module named 'matplotlib')" in err
    assert not list(tmp_path.glob("*.png"))
