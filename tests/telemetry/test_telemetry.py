"""Training telemetry: rollout metrics, the step timer and the Telemetry sinks."""

from __future__ import annotations

import io
import json
import math
import subprocess
import sys
import types

import pytest

from agentfly_cli.errors import UserError
from agentfly_cli.telemetry.metrics import (
    StepTimer,
    groups_with_spread,
    rollout_metrics,
    total_tokens,
)
from agentfly_cli.telemetry.sinks import (
    Telemetry,
    format_step_line,
    plot_metrics,
    read_metrics,
    training_bar_fields,
)
from agentfly_cli.telemetry.step_progress import StepProgress
from agentfly_cli.trajectory import FINISH_REASONS, ToolCallRecord, Trajectory

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def call(name: str, status: str = "ok", error_kind: str | None = None) -> ToolCallRecord:
    return ToolCallRecord(0, "c", name, {}, "obs", status, error_kind)


def chain(reward, turns: int, calls=(), finish: str = "answer") -> Trajectory:
    """A prompt of 3 ids, then ``turns`` assistant turns of 2 ids, each but the last
    followed by an observation of 4 ids."""
    t = Trajectory(reward=reward, finish_reason=finish, tool_calls=list(calls))
    t.append("prompt", [1, 2, 3], sampled=False)
    for i in range(turns):
        t.append("assistant", [10, 11], sampled=True, logprobs=[-0.1, -0.2])
        if i < turns - 1:
            t.append("observation", [20, 21, 22, 23], sampled=False)
    t.check()
    return t


def sample_trajectories() -> list[Trajectory]:
    return [
        chain(1.0, 2, [call("calculator")], "answer"),
        chain(0.0, 3, [call("calculator"), call("search", "error", "timeout")], "max_turns"),
        chain(0.5, 1, [call("", "error", "parse")], "answer"),
        chain(None, 1, [], "abort"),  # not scored: left out of the reward statistics
    ]


# -- rollout_metrics ---------------------------------------------------------------------
def test_rollout_metrics_exact_numbers():
    m = rollout_metrics(sample_trajectories())
    assert m["rollout/trajectories"] == 4
    assert m["reward/mean"] == pytest.approx(0.5)
    assert m["reward/std"] == pytest.approx(math.sqrt((0.25 + 0.25 + 0) / 3))  # population std
    assert (m["reward/min"], m["reward/max"]) == (0.0, 1.0)
    assert m["turns/mean"] == pytest.approx((2 + 3 + 1 + 1) / 4)
    assert m["tokens/sampled"] == 2 * (2 + 3 + 1 + 1)
    # prompt 3 + 2 per assistant turn + 4 per observation (turns - 1 of them)
    assert m["tokens/total"] == (3 + 4 + 4) + (3 + 6 + 8) + 5 + 5
    assert m["tokens/total"] == total_tokens(sample_trajectories())
    assert m["tools/calls/calculator"] == 2
    assert m["tools/calls/search"] == 1
    assert m["tools/calls/_parse_error"] == 1
    assert m["tools/calls_total"] == 4
    assert m["tools/errors"] == 2
    assert m["tools/error_rate"] == pytest.approx(0.5)
    assert m["finish/answer"] == pytest.approx(0.5)
    assert m["finish/max_turns"] == pytest.approx(0.25)
    assert m["finish/abort"] == pytest.approx(0.25)
    for reason in FINISH_REASONS:
        assert f"finish/{reason}" in m
    assert m["finish/length"] == 0.0
    assert sum(v for k, v in m.items() if k.startswith("finish/")) == pytest.approx(1.0)
    assert all(isinstance(v, float) for v in m.values())


def test_rollout_metrics_count_tool_errors_by_kind():
    """Markup the parser did not read, a turn over the call cap and a parse error are three
    different failures of the model: each has its own count."""
    calls = [
        call("", "error", "unparsed_call"),
        call("", "error", "unparsed_call"),
        call("calculator", "error", "too_many_calls"),
        call("", "error", "parse_error"),
        call("search", "error"),  # no kind recorded
        call("calculator"),
    ]
    m = rollout_metrics([chain(1.0, 2, calls)])
    assert m["tools/errors"] == 5
    assert m["tools/errors/unparsed_call"] == 2
    assert m["tools/errors/too_many_calls"] == 1
    assert m["tools/errors/parse_error"] == 1
    assert m["tools/errors/error"] == 1
    assert sum(v for k, v in m.items() if k.startswith("tools/errors/")) == m["tools/errors"]


def test_rollout_metrics_empty_and_unscored():
    m = rollout_metrics([])
    assert m["rollout/trajectories"] == 0 and m["turns/mean"] == 0
    assert m["tools/error_rate"] == 0 and "reward/mean" not in m
    assert all(m[f"finish/{r}"] == 0 for r in FINISH_REASONS)
    m = rollout_metrics([chain(None, 1)])
    assert "reward/mean" not in m and m["rollout/trajectories"] == 1


def grouped(group_id: str, reward) -> Trajectory:
    t = chain(reward, 1)
    t.group_id = group_id
    return t


def test_groups_with_spread_counts_the_groups_a_group_advantage_learns_from():
    chains = [
        grouped("s0:0", 1.0), grouped("s0:0", 0.0),  # spread
        grouped("s0:1", 0.5), grouped("s0:1", 0.5), grouped("s0:1", None),  # all equal
        grouped("s0:2", 1.0),  # one chain: not a group
    ]  # fmt: skip
    assert groups_with_spread(chains) == 0.5
    assert rollout_metrics(chains)["reward/groups_with_spread"] == 0.5
    assert groups_with_spread([grouped("a", 0.0), grouped("a", 0.0)]) == 0.0
    assert groups_with_spread([grouped("a", 1.0), grouped("b", None)]) is None
    assert "reward/groups_with_spread" not in rollout_metrics([grouped("a", 1.0)])


# -- StepTimer ---------------------------------------------------------------------------
def test_step_timer_split_and_throughput():
    now, cpu = [100.0], [7.0]
    timer = StepTimer(clock=lambda: now[0], cpu_clock=lambda: cpu[0])
    with timer.section("rollout"):
        now[0] += 3.0
        cpu[0] += 1.5  # the rollout waited on its tools half the time (one core)
    with timer.section("train"):
        now[0] += 1.5
        cpu[0] += 3.0  # the update kept two cores busy
    with pytest.raises(RuntimeError), timer.section("train"):  # counted even when it raises
        now[0] += 0.5
        raise RuntimeError
    now[0] += 1.0
    m = timer.metrics(tokens=1200)
    assert m["time/rollout_s"] == 3.0
    assert m["time/train_s"] == 2.0
    assert m["time/sync_s"] == 0.0
    assert m["time/step_s"] == 6.0
    assert m["time/cpu_s"] == 4.5
    assert m["cpu/cores_busy"] == 0.75
    assert m["throughput/tokens_per_s"] == 200.0
    timer.reset()
    assert timer.metrics(tokens=5) == {
        "time/rollout_s": 0.0,
        "time/train_s": 0.0,
        "time/sync_s": 0.0,
        "time/step_s": 0.0,
        "time/cpu_s": 0.0,
        "cpu/cores_busy": 0.0,
        "throughput/tokens_per_s": 0.0,
    }


def test_step_timer_counts_the_cpu_of_every_thread_of_the_process():
    """The step's CPU time holds what other threads used (the async trainer's update and its
    producer's rollouts run in threads of one process), not only the calling thread's: two
    threads hash while this one waits for them."""
    import hashlib
    import threading
    import time

    timer = StepTimer()
    block = bytes(1 << 20)
    used: list[float] = []

    def hash_for_a_while():
        begin, end = time.thread_time(), time.perf_counter() + 0.3
        while time.perf_counter() < end:
            hashlib.sha256(block).digest()
        used.append(time.thread_time() - begin)

    workers = [threading.Thread(target=hash_for_a_while) for _ in range(2)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    m = timer.metrics()
    assert min(used) > 0.02  # both threads ran
    assert m["time/cpu_s"] >= sum(used) - 0.01  # this thread only waited: it is theirs
    assert m["cpu/cores_busy"] == pytest.approx(m["time/cpu_s"] / m["time/step_s"])


# -- Telemetry ---------------------------------------------------------------------------
def step_metrics(step: int) -> dict[str, float]:
    return {
        "reward/mean": 0.1 * step,
        "reward/std": 0.05,
        "kl": 0.001 * step,
        "entropy": 1.0 - 0.01 * step,
        "clip_frac": 0.02,
        "grad_norm": 1.5,
        "loss/policy": -0.1,
        "tools/error_rate": 0.1,
        "turns/mean": 2.0,
        "throughput/tokens_per_s": 1234.0,
        "time/rollout_s": 3.25,
        "time/train_s": 1.5,
    }


def test_telemetry_writes_every_sink(tmp_path):
    out = io.StringIO()
    run = tmp_path / "run"
    with Telemetry(
        run, total_steps=5, config={"model": "tiny", "lr": 1e-6}, console_file=out
    ) as telemetry:
        for step in range(1, 6):  # steps are numbered from 1
            telemetry.log(step, step_metrics(step - 1))
    assert telemetry.closed
    telemetry.close()  # idempotent

    records = read_metrics(run / "metrics.jsonl")
    assert [r["step"] for r in records] == [1, 2, 3, 4, 5]
    assert records[2]["reward/mean"] == pytest.approx(0.2)
    assert isinstance(records[0]["time"], float)
    assert json.loads((run / "config.json").read_text()) == {"model": "tiny", "lr": 1e-6}

    events = list((run / "tensorboard").glob("events.out.tfevents*"))
    assert events and events[0].stat().st_size > 0

    png = (run / "plot.png").read_bytes()
    assert png[:8] == PNG_MAGIC and len(png) > 5_000
    import matplotlib.image

    image = matplotlib.image.imread(run / "plot.png")
    assert image.shape[0] > 300 and image.shape[1] > 600

    text = out.getvalue()
    assert "step 3/5 | reward 0.200 | kl 0.002 | entropy 0.980 | clip 0.020" in text
    assert "gnorm 1.5 | tok/s 1234 | rollout 3.2s | train 1.5s" in text
    assert "step 5/5" in text


def test_resume_drops_later_steps(tmp_path):
    run = tmp_path / "run"
    with Telemetry(run, total_steps=6, sinks=("jsonl",), console=False) as telemetry:
        for step in range(1, 6):
            telemetry.log(step, {"reward/mean": float(step)})
    with open(run / "metrics.jsonl", "a") as torn:  # a crash mid-line
        torn.write('{"step": 6, "rew')
    # checkpoint after step 3: the resumed run logs steps 4, 5, 6 again
    with Telemetry(run, total_steps=6, sinks=("jsonl",), console=False, start_step=4) as telemetry:
        for step in range(4, 7):
            telemetry.log(step, {"reward/mean": 10.0 + step})
    records = read_metrics(run / "metrics.jsonl")
    assert [r["step"] for r in records] == [1, 2, 3, 4, 5, 6]
    assert [r["reward/mean"] for r in records] == [1.0, 2.0, 3.0, 14.0, 15.0, 16.0]
    # a fresh run (start_step=0) in the same folder starts over
    with Telemetry(run, total_steps=1, sinks=("jsonl",), console=False) as telemetry:
        telemetry.log(0, {"reward/mean": 7.0})
    assert [r["reward/mean"] for r in read_metrics(run / "metrics.jsonl")] == [7.0]


def test_close_runs_on_interrupt(tmp_path):
    run = tmp_path / "run"
    with pytest.raises(KeyboardInterrupt):
        with Telemetry(
            run, total_steps=10, sinks=("jsonl",), console_file=io.StringIO()
        ) as telemetry:
            telemetry.log(0, {"reward/mean": 1.0, "not_a_number": "text", "bad": math.nan})
            raise KeyboardInterrupt
    assert telemetry.closed
    assert (run / "plot.png").read_bytes()[:8] == PNG_MAGIC
    (record,) = read_metrics(run / "metrics.jsonl")
    assert record["not_a_number"] == "text" and record["bad"] is None


def test_tensorboard_missing_warns_and_skips(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "torch.utils.tensorboard", None)  # import fails
    out = io.StringIO()
    with Telemetry(tmp_path, total_steps=1, console_file=out) as telemetry:
        telemetry.log(0, {"reward/mean": 1.0})
    warnings = [line for line in out.getvalue().splitlines() if line.startswith("warning:")]
    assert len(warnings) == 1 and "tensorboard sink skipped" in warnings[0]
    assert not (tmp_path / "tensorboard").exists()
    assert (tmp_path / "metrics.jsonl").exists()


def test_wandb_missing_is_a_user_error(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "wandb", None)  # import fails, installed or not
    with pytest.raises(UserError) as info:
        Telemetry(tmp_path / "run", total_steps=1, sinks=("jsonl", "wandb"), console=False)
    assert str(info.value) == (
        "wandb sink asked for but wandb is not installed; "
        "pip install wandb or drop it from trainer.telemetry.sinks"
    )
    assert "\n" not in str(info.value)
    assert not (tmp_path / "run").exists()  # nothing written before the check


def test_wandb_sink_with_a_fake_module(tmp_path, monkeypatch):
    calls = {"log": [], "finish": 0}

    class Run:
        def log(self, data, step):
            calls["log"].append((step, data))

        def finish(self):
            calls["finish"] += 1

    def init(**kwargs):
        calls["init"] = kwargs
        return Run()

    monkeypatch.setitem(sys.modules, "wandb", types.SimpleNamespace(init=init))
    with Telemetry(
        tmp_path,
        total_steps=2,
        sinks=["wandb"],
        console=False,
        wandb_project="proj",
        config={"a": 1},
    ) as telemetry:
        telemetry.log(0, {"reward/mean": 0.5, "note": "x"})
    assert calls["init"] == {
        "project": "proj",
        "dir": str(tmp_path),
        "mode": "offline",
        "config": {"a": 1},
    }
    assert calls["log"] == [(0, {"reward/mean": 0.5})] and calls["finish"] == 1
    assert not (tmp_path / "metrics.jsonl").exists()
    assert (tmp_path / "plot.png").exists()  # drawn from the in-memory records


def test_unknown_sink(tmp_path):
    with pytest.raises(UserError, match="unknown telemetry sink 'csv'"):
        Telemetry(tmp_path, total_steps=1, sinks=("csv",), console=False)


def test_plot_metrics_standalone(tmp_path):
    path = tmp_path / "metrics.jsonl"
    path.write_text("".join(json.dumps({"step": s, "loss/kl": 0.1 * s}) + "\n" for s in range(3)))
    out = plot_metrics(path, tmp_path / "p.png")
    assert out.read_bytes()[:8] == PNG_MAGIC


def test_format_step_line_skips_missing():
    assert format_step_line(1, None, {"reward/mean": 1}) == "step 1/? | reward 1.000"


def test_import_does_not_load_torch():
    code = (
        "import sys, agentfly_cli.telemetry.sinks, agentfly_cli.telemetry.metrics; "
        "print(sorted(m for m in ('torch', 'matplotlib', 'wandb', 'tensorboard') "
        "if m in sys.modules))"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"


def test_wandb_offline_run_with_the_real_package(tmp_path, monkeypatch):
    """W&B in offline mode writes its run under the run folder (no network, no account)."""
    pytest.importorskip("wandb", reason="wandb is not installed (pip install wandb)")
    monkeypatch.setenv("WANDB_SILENT", "true")
    monkeypatch.setenv("WANDB_DISABLE_GIT", "true")
    with Telemetry(
        tmp_path, total_steps=2, sinks=("jsonl", "wandb"), console=False,
        wandb_project="agentfly-test", config={"lr": 1e-5},
    ) as telemetry:  # fmt: skip
        telemetry.log(0, {"reward/mean": 0.25})
        telemetry.log(1, {"reward/mean": 0.75})
    runs = list((tmp_path / "wandb").glob("offline-run-*"))
    assert len(runs) == 1
    assert list(runs[0].glob("*.wandb"))  # the run's event log, ready for `wandb sync`


def test_an_sft_run_shows_its_loss_and_plots_no_empty_reward_panel(tmp_path):
    """SFT logs a loss, no reward: the bar and the step line show the loss, notes are records
    of their own, and the plot holds only the two loss panels (no empty reward panel)."""
    import matplotlib.image

    out = io.StringIO()
    bar = (("loss", ("sft/loss",), "{:.3f}"),)
    with Telemetry(
        tmp_path, total_steps=2, sinks=("jsonl",), console_file=out, bar_fields=bar
    ) as telemetry:
        for step in (1, 2):
            telemetry.log(step, {"sft/loss": 0.5 / step})
        telemetry.log_note(2, {"sft/heldout_loss": 0.3}, "held-out loss after 2 steps: 0.300")
    text = out.getvalue()
    assert "step 1/2 | loss 0.500" in text and "step 2/2 | loss 0.250" in text
    assert "held-out loss after 2 steps: 0.300" in text
    records = read_metrics(tmp_path / "metrics.jsonl")
    assert [(r["step"], sorted(r)[0]) for r in records] == [
        (1, "sft/loss"),
        (2, "sft/loss"),
        (2, "sft/heldout_loss"),
    ]
    image = matplotlib.image.imread(tmp_path / "plot.png")
    assert image.shape[0] < 400  # one row: loss, held-out loss (a reward panel adds a row)


def test_step_progress_line_counts_units_tokens_and_seconds():
    now = [100.0]
    progress = StepProgress(clock=lambda: now[0])
    assert progress.line() == ""  # no phase yet
    sampled = [0]
    progress.begin("rollout", step=3, total=32, unit="chains", live_tokens=lambda: sampled[0])
    now[0] += 14.2
    sampled[0] = 1204
    progress.advance()
    progress.advance(2)
    assert progress.line() == "step 3 rollout: 3/32 chains | 1,204 tokens | 14s"
    progress.begin("train", step=3, total=4, unit="micro-batches")
    progress.advance(tokens=500)
    assert progress.line() == "step 3 train: 1/4 micro-batches | 500 tokens | 0s"
    progress.end()
    assert progress.line() == ""


def test_the_live_display_shows_the_running_phase_under_the_bar(tmp_path):
    """A SmolLM2 step is a minute or two: the display says what runs inside it."""
    progress = StepProgress(clock=lambda: 7.0)
    with Telemetry(
        tmp_path, total_steps=3, sinks=("jsonl",), console_file=io.StringIO(),
        step_progress=progress,
    ) as telemetry:  # fmt: skip
        telemetry.log(1, {"reward/mean": 0.5})
        progress.begin("rollout", step=2, total=32, unit="chains")
        progress.advance(5, tokens=120)
        lines = telemetry.live_text().splitlines()
        assert lines[0].startswith("steps done 1/3") and "reward 0.500" in lines[0]
        assert lines[1].strip() == "step 2 rollout: 5/32 chains | 120 tokens | 0s"
        progress.end()
        assert len(telemetry.live_text().splitlines()) == 1


def test_no_kl_column_when_the_run_has_no_kl(tmp_path):
    for kl in (False, True):
        with Telemetry(
            tmp_path / str(kl), total_steps=2, sinks=("jsonl",), console_file=io.StringIO(),
            bar_fields=training_bar_fields(kl=kl),
        ) as telemetry:  # fmt: skip
            telemetry.log(1, {"reward/mean": 0.5, "entropy": 0.1})
            assert (" kl " in telemetry.live_text()) is kl


def test_gpu_memory_metrics_read_and_reset_the_cuda_peak(monkeypatch):
    from agentfly_cli.telemetry.metrics import gpu_memory_metrics

    resets = []
    cuda = types.SimpleNamespace(
        is_initialized=lambda: True,
        max_memory_allocated=lambda: 3 * 2**29,
        reset_peak_memory_stats=lambda: resets.append(1),
    )
    monkeypatch.setitem(sys.modules, "torch", types.SimpleNamespace(cuda=cuda))
    assert gpu_memory_metrics() == {"memory/gpu_peak_gib": 1.5}
    assert resets == [1]  # each step reports its own peak


def test_gpu_memory_metrics_are_empty_and_start_nothing_without_cuda(monkeypatch):
    import torch

    from agentfly_cli.telemetry.metrics import gpu_memory_metrics

    # torch imported, CUDA never initialised (on a GPU machine other tests in this process may
    # have initialised it: hide that)
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: False)
    assert gpu_memory_metrics() == {}
    monkeypatch.delitem(sys.modules, "torch")
    assert gpu_memory_metrics() == {}  # torch not imported: not imported here either
    assert "torch" not in sys.modules
