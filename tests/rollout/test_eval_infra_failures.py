"""Held-out evaluation leaves chains that an infrastructure failure ended out of pass@k and
mean@k, and counts them by cause (agentfly eval, trainer.eval)."""

from __future__ import annotations

from agentfly_cli.rollout.summary import evaluate
from agentfly_cli.train.tasks.evaluation import eval_metrics
from agentfly_cli.trajectory import Trajectory

BACKEND = "RuntimeError: backend died"
GATEWAY = "AgentError: APIConnectionError: refused"


def chain(task: int, reward: float, error: str | None = None, **meta) -> Trajectory:
    t = Trajectory(group_id=f"g{task}", reward=reward, finish_reason="abort" if error else "answer")
    t.task_index = task
    t.error = error
    t.append("assistant", [1, 2], sampled=True)
    t.meta.update(meta)
    return t


def test_a_failed_chain_is_not_a_zero_sample_and_is_counted_by_cause():
    rows = [
        chain(0, 1.0), chain(0, 0.0), chain(0, 1.0, "EnvStartError: no sandbox"),
        chain(1, 1.0), chain(1, 1.0), chain(1, 0.0),
    ]  # fmt: skip
    report = evaluate(rows)
    overall = report["overall"]
    # task 0 has 2 samples of the policy left: n is 2 for every task (task 1's first two)
    assert overall["n"] == 2
    by_task = {row["task_index"]: row for row in report["tasks"]}
    assert by_task[0]["correct"] == 1 and by_task[0]["mean@2"] == 0.5
    assert by_task[0]["infra_failed"] == 1 and "infra_failed" not in by_task[1]
    assert by_task[1]["mean@2"] == 1.0
    assert overall["mean@2"] == 0.75  # counted as a 0 it would be (1/3 + 2/3) / 2 = 0.5
    assert overall["infra_failures"] == {"env_start": 1}
    assert overall["unscored_tasks"] == 0
    assert eval_metrics(report["tasks"], 1.0)["eval/reward_mean"] == 0.75


def test_a_task_whose_chains_all_failed_is_unscored_and_episodes_go_whole():
    rows = [
        chain(0, 0.0, BACKEND), chain(0, 0.0, BACKEND),
        chain(1, 1.0), chain(1, 0.0),
        # an agent episode of two segments whose first failed at the gateway: one chain, lost
        chain(1, 1.0, GATEWAY, episode="e", segment=0, segments=2),
        chain(1, 1.0, episode="e", segment=1, segments=2),
    ]  # fmt: skip
    report = evaluate(rows)
    assert [row["task_index"] for row in report["tasks"]] == [1]
    assert report["overall"]["unscored_tasks"] == 1
    assert report["overall"]["infra_failures"] == {"backend": 2, "gateway": 1}
    assert report["tasks"][0]["n"] == 2 and report["tasks"][0]["infra_failed"] == 1


def test_no_failure_leaves_the_report_as_it_was():
    report = evaluate([chain(0, 1.0), chain(0, 0.0)])
    assert "infra_failures" not in report["overall"]
    assert "infra_failed" not in report["tasks"][0]
    # the model's own failures stay samples: a wrong answer and a turn limit score 0
    wrong = chain(0, 0.0)
    wrong.finish_reason = "max_turns"
    assert evaluate([chain(0, 1.0), wrong])["overall"]["mean@2"] == 0.5
