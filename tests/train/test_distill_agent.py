"""``agentfly train --agent`` with a teacher: the gateway-captured segments of an agent
program go through the same batch, so they are distilled like the recipe's chains."""

from __future__ import annotations

import json

import pytest

from agentfly_cli.models.tiny import build_tiny_model
from tests.train.test_trainer import recipe  # noqa: F401 (fixture)

pytest.importorskip("openai", reason="the openai SDK is a dev dependency")

from tests.rollout.test_agent_training import agents, cli  # noqa: E402, F401 (fixture)


def test_an_agent_program_is_distilled_through_the_gateway(recipe, agents, tmp_path):  # noqa: F811
    teacher = build_tiny_model(tmp_path / "teacher", seed=1)
    run_dir = tmp_path / "run"
    result = cli(recipe, f"{agents}:chatty", "train", "--out", str(run_dir), "--quiet",
                 "--steps", "2", "--set", f"trainer.distill.teacher={teacher}",
                 "--set", "trainer.distill.mode=only")  # fmt: skip
    assert result.exit_code == 0, result.output
    lines = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [line["step"] for line in lines] == [1, 2]
    for line in lines:
        assert line["train/trajectories"] == 6  # 2 tasks x 3 episodes, two turns each
        assert line["distill/reverse_kl"] > 0.01  # the teacher scored the captured tokens
        assert line["grad_norm"] > 0  # and the term alone trains them
