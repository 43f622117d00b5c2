"""`agentfly eval` with a reward that raises for some chains: they are left out of pass@k and
mean@k and named in the report; when every chain failed so, one line and exit 2."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from agentfly_cli.cli.app import build_app

FLAKY_REWARD = """
from agentfly_cli.components.rewards import reward


@reward
def flaky(prediction, trajectory) -> float:
    if trajectory.sample_index < {down}:
        raise ConnectionError("the judge server is down")
    return 1.0
"""


def run_eval(tmp_path, tiny_model, down: int):
    data = tmp_path / "data.jsonl"
    data.write_text(json.dumps({"question": "What is 2 + 3?", "answer": "5"}) + "\n")
    (tmp_path / "flaky.py").write_text(FLAKY_REWARD.format(down=down))
    arguments = [
        "eval", "--model", tiny_model, "--data", data, "--n", "3", "--json",
        "--reward", f"{tmp_path / 'flaky.py'}:flaky", "--out", tmp_path / "out.jsonl",
        "--set", "rollout.max_turns=1", "--set", "rollout.max_tokens_per_turn=4",
    ]  # fmt: skip
    return CliRunner().invoke(build_app(), [str(a) for a in arguments])


def test_failed_chains_are_left_out_of_the_scores(tmp_path, tiny_model):
    result = run_eval(tmp_path, tiny_model, down=1)
    assert result.exit_code == 0, result.output
    overall = json.loads(result.output)["eval"]["overall"]
    assert overall["n"] == 2 and overall["mean@2"] == 1.0  # as a 0 it would be 0.667
    assert overall["infra_failures"] == {"reward_error": 1}


def test_every_chain_failed_is_one_line_and_exit_2(tmp_path, tiny_model):
    result = run_eval(tmp_path, tiny_model, down=3)
    assert result.exit_code == 2, result.output
    assert "every chain of the eval ended in an infrastructure failure (reward_error 3)" in (
        " ".join(result.output.split())
    )
    assert "Traceback" not in result.output
    assert (tmp_path / "out.jsonl").read_text().count("\n") == 3  # the record is kept
