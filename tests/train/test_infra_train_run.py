"""A training run whose reward raises for one chain of a group: the chain is counted under
``infra/failures/reward_error`` and the step trains on the others."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from agentfly_cli.cli.app import build_app
from agentfly_cli.trajectory import read_trajectories

FLAKY_REWARD = """
from agentfly_cli.components.rewards import reward


@reward
def flaky(prediction, trajectory) -> float:
    if trajectory.sample_index == 0:
        raise ConnectionError("the judge server is down")
    return float(trajectory.sample_index)
"""


def train(tmp_path, tiny_model, n: int, *extra: str):
    data = tmp_path / "data.jsonl"
    data.write_text(json.dumps({"question": "What is 2 + 3?", "answer": "5"}) + "\n")
    (tmp_path / "flaky.py").write_text(FLAKY_REWARD)
    run_dir = tmp_path / f"run{n}-{len(extra)}"
    arguments = [
        "train", "--model", tiny_model, "--data", data, "--steps", "1", "--out", run_dir, "-q",
        "--reward", f"{tmp_path / 'flaky.py'}:flaky",
        "--set", f"rollout.n={n}", "--set", "rollout.max_turns=1",
        "--set", "rollout.max_tokens_per_turn=4", "--set", "trainer.tasks_per_step=1",
        "--set", "trainer.telemetry.sinks=[jsonl]", *extra,
    ]  # fmt: skip
    result = CliRunner().invoke(build_app(), [str(a) for a in arguments])
    assert result.exit_code == 0, result.output
    [line] = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    [written] = (run_dir / "trajectories").glob("step-*.jsonl")
    return line, read_trajectories(written), " ".join(result.output.split())


def test_a_reward_that_raises_is_counted_and_left_out(tmp_path, tiny_model):
    line, trajectories, output = train(tmp_path, tiny_model, 3)
    assert len(trajectories) == 3  # every chain is kept in the run's record
    assert "ConnectionError" in trajectories[0].reward_extras["error"]
    assert line["infra/failures/reward_error"] == 1.0 and line["infra/dropped_groups"] == 0.0
    assert line["train/trajectories"] == 2.0
    assert "1 chain(s) ended in infrastructure failures (reward_error: 1)" in output
    off, _, _ = train(
        tmp_path, tiny_model, 3, "--set", "trainer.algorithm.exclude_infra_failures=false"
    )
    assert off["infra/failures/reward_error"] == 1.0 and off["train/trajectories"] == 3.0


def test_held_out_eval_leaves_failed_chains_out_and_counts_them(tmp_path, tiny_model):
    rows = [{"question": f"What is 2 + {i}?", "answer": str(2 + i)} for i in range(4)]
    data = tmp_path / "data.jsonl"
    data.write_text("".join(json.dumps(row) + "\n" for row in rows))
    (tmp_path / "flaky.py").write_text(FLAKY_REWARD)
    run_dir = tmp_path / "run-eval"
    arguments = [
        "train", "--model", tiny_model, "--data", data, "--steps", "1", "--out", run_dir, "-q",
        "--reward", f"{tmp_path / 'flaky.py'}:flaky", "--set", "data.holdout=0.5",
        "--set", "trainer.eval.every=1", "--set", "trainer.eval.n=3",
        "--set", "rollout.n=2", "--set", "rollout.max_turns=1",
        "--set", "rollout.max_tokens_per_turn=4", "--set", "trainer.tasks_per_step=1",
        "--set", "trainer.telemetry.sinks=[jsonl]",
    ]  # fmt: skip
    result = CliRunner().invoke(build_app(), [str(a) for a in arguments])
    assert result.exit_code == 0, result.output
    lines = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    evals = [line for line in lines if "eval/reward_mean" in line]
    assert evals, lines
    for line in evals:  # sample 0 of each held-out task raised: 2 tasks, 2 chains left out
        assert line["eval/infra_failures"] == 2.0
        # the others score their sample index (1 and 2): the mean of 1.5, not (0 + 1 + 2) / 3
        assert line["eval/reward_mean"] == 1.5
