"""``trainer.mode: async`` on the tiny model: k = 0 is the sync loop bit for bit, k = 1 trains
on groups at most one update old and records every turn's weight version, a resumed run rolls
its checkpoint's untrained groups out again, and a weight sync that hangs is a clear error."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file
from typer.testing import CliRunner

from agentfly_cli.cli.app import build_app
from agentfly_cli.telemetry.step_progress import StepProgress
from agentfly_cli.train.checkpoint import CheckpointManager
from agentfly_cli.train.trainer import Trainer
from agentfly_cli.train_backends.weight_sync import FullPush, WeightSyncTimeout
from agentfly_cli.trajectory import read_trajectories
from tests.train.test_trainer import ON_CPU, make_config, recipe, weights  # noqa: F401 (fixture)

ASYNC_1 = ("trainer.mode=async", "trainer.max_staleness=1")


def step_trajectories(run_dir, step):
    return read_trajectories(run_dir / "trajectories" / f"step-{step:06d}.jsonl")


def turn_versions(trajectory):
    return [t.policy_version for t in trajectory.turns if t.role == "assistant"]


def metric_lines(run_dir):
    return [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]


def test_async_without_staleness_is_the_sync_loop_bit_for_bit(recipe, tmp_path):  # noqa: F811
    sync_dir, async_dir = tmp_path / "sync", tmp_path / "async"
    Trainer(make_config(recipe, "trainer.steps=3", *ON_CPU), run_dir=sync_dir, console=False).fit()
    no_staleness = ("trainer.mode=async", "trainer.max_staleness=0")
    config = make_config(recipe, "trainer.steps=3", *ON_CPU, *no_staleness)
    Trainer(config, run_dir=async_dir, console=False).fit()

    a, b = weights(sync_dir, 3), weights(async_dir, 3)
    differing = [name for name in a if not torch.equal(a[name], b[name])]
    assert not differing, f"async k=0 weights differ from sync: {differing[:3]}"
    initial = load_file(str(Path(recipe["fields"]["model"]) / "model.safetensors"))
    assert any(not torch.equal(b[n], initial[n]) for n in initial if n in b), "nothing trained"
    for step in (1, 2, 3):
        ours, theirs = step_trajectories(async_dir, step), step_trajectories(sync_dir, step)
        assert [t.ids for t in ours] == [t.ids for t in theirs]
        # both loops record the version that sampled each turn: the weights after step - 1
        for trajectory in [*ours, *theirs]:
            assert set(turn_versions(trajectory)) == {step - 1}
    lines = metric_lines(async_dir)
    assert [line["async/staleness_max"] for line in lines] == [0.0, 0.0, 0.0]
    assert all(line["async/dropped_groups"] == 0 for line in lines)


class LiveLines(StepProgress):
    """Keeps what the live display showed as each phase ended."""

    def __init__(self):
        super().__init__()
        self.shown: list[tuple[str, list[str]]] = []

    def end(self):
        self.shown.append((self.phase, self.lines()))
        super().end()


def test_async_trains_on_groups_at_most_one_update_old(recipe, tmp_path):  # noqa: F811
    run_dir = tmp_path / "run"
    config = make_config(recipe, "trainer.steps=3", *ON_CPU, *ASYNC_1)
    trainer = Trainer(config, run_dir=run_dir, console=False)
    trainer.progress = live = LiveLines()
    result = trainer.fit()
    # the live display shows the producer under the trainer's phase, while the run lasts
    waits = [lines for phase, lines in live.shown if phase == "waiting for rollouts"]
    assert len(waits) == 3 and all(lines[0].endswith("s") for lines in waits)
    assert all("2/2 groups" in lines[0] for lines in waits)
    assert all(lines[1].startswith("producer: ") for lines in waits), waits
    assert "on weights v" in waits[-1][1] and not live.companions
    assert not trainer.shared_model  # rollouts go on during the update: their own weights
    assert trainer.engine.backend.stats["weight_updates"] == 3
    lines = metric_lines(run_dir)
    assert [line["step"] for line in lines] == [1, 2, 3]
    for step, line in zip((1, 2, 3), lines, strict=True):
        trajectories = step_trajectories(run_dir, step)
        assert len(trajectories) == config.trainer.tasks_per_step * config.rollout.n
        oldest_by_group: dict[str, int] = {}
        for trajectory in trajectories:
            versions = turn_versions(trajectory)
            assert versions and all(v is not None for v in versions)
            # sampled by the weights of step - 1 or, one update older, of step - 2
            assert all(step - 2 <= v <= step - 1 for v in versions), (step, versions)
            oldest = oldest_by_group.get(trajectory.group_id, versions[0])
            oldest_by_group[trajectory.group_id] = min([oldest, *versions])
        staleness = [step - 1 - v for v in oldest_by_group.values()]
        assert line["async/staleness_max"] == max(staleness) <= 1
        assert line["async/staleness_mean"] == pytest.approx(sum(staleness) / len(staleness))
        assert "async/trainer_wait_s" in line and "async/producer_busy_s" in line
        # stale samples are corrected by truncated importance sampling (on by default)
        assert line["tis/ratio_min"] > 0 and 0 < line["tis/weight_mean"] <= 2.0
    assert result.history[-1]["grad_norm"] > 0
    assert trainer.engine.backend.policy_version == 3  # it holds the last step's weights


def test_a_resumed_async_run_rolls_out_its_untrained_groups_again(recipe, tmp_path):  # noqa: F811
    run_dir = tmp_path / "run"
    config = make_config(recipe, "trainer.steps=3", "trainer.save_every=2", *ON_CPU, *ASYNC_1)
    Trainer(config, run_dir=run_dir, console=False).fit(stop_after=2)
    state = torch.load(CheckpointManager(run_dir).path(2) / "trainer_state.pt", weights_only=False)
    pending = state["extra"]["async_pending"]
    # batch 3 started during step 2 (one update ahead) and was never trained on
    assert [row["position"] for row in pending] == [4, 5]
    assert state["extra"]["task_stream"]["position"] == 6

    Trainer(config, run_dir=run_dir, resume=True, console=False).fit()
    resumed = step_trajectories(run_dir, 3)
    assert sorted({t.task_index for t in resumed}) == [4, 5]
    assert [row["task"] for row in pending] == [t.task for t in resumed[::3]]
    steps = [line["step"] for line in metric_lines(run_dir)]
    assert steps == [1, 2, 3]


class HangingBackend:
    name = "stuck"
    policy_version = 0

    async def update_weights(self, named_tensors):
        await asyncio.sleep(3600)


class FakeTrain:
    def sync_weights(self):
        return {}


def test_a_weight_sync_that_hangs_is_one_clear_error_within_its_timeout():
    backend = HangingBackend()
    sync = FullPush(FakeTrain(), backend)

    with pytest.raises(WeightSyncTimeout) as info:
        asyncio.run(asyncio.wait_for(sync.publish(7, timeout_s=0.2), 10))
    message = str(info.value)
    assert "version 7" in message and "stuck backend" in message and "0.2 s" in message
    assert "trainer.timeouts.weight_sync_s" in message and "\n" not in message
    assert backend.policy_version == 0  # the version moves only when the weights arrived


@pytest.mark.slow  # the same run as above through the CLI (about 20 s)
def test_agentfly_train_with_async_mode_from_the_command_line(recipe, tmp_path):  # noqa: F811
    run_dir = tmp_path / "run"
    fields = recipe["fields"]
    sets = [*recipe["sets"], *ON_CPU, "trainer.steps=2", *ASYNC_1]
    sets += [f"data.path={fields['data.path']}", f"reward={fields['reward']}"]
    args = ["train", "calculator", "--model", fields["model"], "--out", str(run_dir), "--quiet"]
    for item in sets:
        args += ["--set", item]
    result = CliRunner().invoke(build_app(), args)
    assert result.exit_code == 0, result.output
    lines = metric_lines(run_dir)
    assert [line["step"] for line in lines] == [1, 2]
    assert all(line["async/staleness_max"] <= 1 for line in lines)
    config = json.loads((run_dir / "config.json").read_text())
    assert config["trainer"]["mode"] == "async" and config["trainer"]["max_staleness"] == 1


def test_async_with_lookahead_turns_importance_sampling_on_unless_the_recipe_says_otherwise():
    from agentfly_cli.settings.train import TrainerSettings

    assert TrainerSettings(mode="async").algorithm.tis_cap == 2.0
    assert TrainerSettings(mode="async", algorithm={"tis_cap": 3.0}).algorithm.tis_cap == 3.0
    assert TrainerSettings(mode="async", algorithm={"tis_cap": None}).algorithm.tis_cap is None
    assert TrainerSettings(mode="async", max_staleness=0).algorithm.tis_cap is None  # sync loop
    assert TrainerSettings().algorithm.tis_cap is None


def test_a_weight_push_that_hangs_mid_run_ends_the_run_with_one_error(recipe, tmp_path):  # noqa: F811
    config = make_config(recipe, "trainer.steps=3", *ON_CPU, *ASYNC_1,
                         "trainer.timeouts.weight_sync_s=1")  # fmt: skip
    trainer = Trainer(config, run_dir=tmp_path / "run", console=False)
    trainer._setup_then = trainer._setup

    def setup_with_a_stuck_backend():
        trainer._setup_then()
        backend = trainer.engine.backend

        async def never_drains(named_tensors):
            await asyncio.sleep(3600)

        backend.update_weights = never_drains

    trainer._setup = setup_with_a_stuck_backend
    started = time.perf_counter()
    with pytest.raises(WeightSyncTimeout, match=r"version 1\) to the hf backend did not finish"):
        trainer.fit()
    assert time.perf_counter() - started < 120  # the push's 1 s deadline, not an hour


def test_a_rollout_backend_that_dies_mid_run_is_a_clear_error_not_a_hang(recipe, tmp_path):  # noqa: F811
    from agentfly_cli.errors import UserError

    config = make_config(recipe, "trainer.steps=4", *ON_CPU, *ASYNC_1)
    trainer = Trainer(config, run_dir=tmp_path / "run", console=False)
    optimize = trainer._optimize

    def optimize_then_kill_the_backend(step, batch):
        metrics = optimize(step, batch)
        if step == 2:  # from the update's thread, while the producer rolls batch 3 out
            loop = trainer.loop
            asyncio.run_coroutine_threadsafe(trainer.engine.backend.close(), loop).result(30)
        return metrics

    async def fit_and_keep_the_loop():
        trainer.loop = asyncio.get_running_loop()
        return await trainer.fit_async()

    trainer._optimize = optimize_then_kill_the_backend
    started = time.perf_counter()
    failed = r"weight sync \(full push of version 2\) failed: the hf backend is closed"
    with pytest.raises(UserError, match=failed) as info:
        asyncio.run(fit_and_keep_the_loop())
    assert "\n" not in str(info.value)
    assert time.perf_counter() - started < 120
    lines = metric_lines(tmp_path / "run")
    assert [line["step"] for line in lines] == [1]  # step 2's push met the closed backend
