"""docs/python.md works: its code blocks run in order, on the tiny model, and say what they say."""

from __future__ import annotations

import contextlib
import io
import json
import re
from pathlib import Path

import pytest

PAGE = Path(__file__).resolve().parents[2] / "docs" / "python.md"


def blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", PAGE.read_text(encoding="utf-8"), flags=re.S)


def test_the_python_page_runs_and_trains_the_tiny_model(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    namespace: dict = {"RUN_DIR": str(tmp_path / "run")}
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        for code in blocks():
            exec(compile(code, str(PAGE), "exec"), namespace)
    lines = printed.getvalue().splitlines()
    assert lines[0] == "True 2 2"
    assert lines[1] == "9 1" and lines[2] == "['calculator', 'answer']"
    assert lines[3] == "True 18" and lines[4] == "True True" and lines[5] == "18"
    assert lines[6] == "True 2 [1, 2]"
    assert lines[7] == "['mean@2', 'n', 'pass@1', 'pass@2', 'tasks']"
    assert lines[8] == "True 1"
    assert lines[9] == "True 2 2" and lines[10] == "True"
    assert lines[11] == "6"
    assert lines[12] == "['mean@2', 'n', 'pass@1', 'pass@2', 'tasks']"
    assert "rollout() cannot start an event loop inside a running one" in lines[13]
    assert lines[14] == "18"
    assert len(lines) == 15
    run = namespace["run"]
    assert (Path(run.run_dir) / "metrics.jsonl").is_file()
    kept = (Path(run.run_dir) / "tasks.jsonl").read_text(encoding="utf-8").splitlines()
    assert [json.loads(line) for line in kept] == namespace["tasks"]  # the rows it trained on


def test_the_first_call_patterns_still_work(tmp_path, monkeypatch):
    """load_config(sets=...), run_eval's report read as a dict, run_training's fields."""
    from agentfly_cli import load_config, run_eval, run_training

    monkeypatch.chdir(tmp_path)
    config = load_config(
        "calculator",
        model="tiny",
        data={"limit": 8},
        rollout={"n": 2, "max_turns": 2, "max_tokens_per_turn": 8},
        trainer={"steps": 1, "tasks_per_step": 2, "eval": {"every": 0}},
        sets=["trainer.save_trajectories=false"],
    )
    assert config.rollout.n == 2 and config.trainer.steps == 1
    report = run_eval(config, threshold=0.5)
    assert sorted(report["overall"]) == ["mean@2", "n", "pass@1", "pass@2", "tasks"]
    assert report["threshold"] == 0.5 and dict(report) == report.to_dict()
    run = run_training(config, out=tmp_path / "run")
    assert run.steps == 1 and len(run.history) == 1 and run.is_main
    assert run.final_metrics == run.history[-1] and "reward/mean" in run.history[0]


def test_cell_objects_replace_the_recipes_components(tmp_path):
    from agentfly_cli import load_config, reward, run_rollout, tool

    @tool
    def calculator(expression: str) -> str:
        """A marked calculator.

        Args:
            expression: Ignored.
        """
        return f"cell says {expression}"

    @reward
    def always_half(prediction: str) -> float:
        """0.5."""
        return 0.5

    script = tmp_path / "script.jsonl"
    script.write_text(json.dumps({"responses": ["CALC: 70 + 33", "ANSWER: 103"]}) + "\n")
    config = load_config(
        "calculator",
        model="tiny",
        backend={"name": "scripted", "script": script},
        data={"limit": 1},
        rollout={"n": 1},
    )
    [chain] = run_rollout(config, tools=[calculator, "answer"], reward=always_half).trajectories
    assert [c.name for c in chain.tool_calls] == ["calculator", "answer"]
    assert any("cell says 70 + 33" in str(m.get("content")) for m in chain.messages)
    assert chain.reward == 0.5 and chain.prediction == "103"


def test_a_cell_tool_clashing_with_a_named_one_is_a_clear_error(tmp_path):
    from agentfly_cli import UserError, load_config, run_rollout, tool

    @tool
    def answer(answer: str) -> str:
        """Give the answer.

        Args:
            answer: The answer.
        """
        return answer

    config = load_config("calculator", model="tiny", data={"limit": 1}, rollout={"n": 1})
    with pytest.raises(UserError, match="the name 'answer' is given by both 'answer' and 'a Tool"):
        run_rollout(config, tools=["answer", answer])
