"""docs/python.md works: its code blocks run in order, on the tiny model, and say what they say."""

from __future__ import annotations

import contextlib
import io
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
    assert lines[0] == "2 2"
    assert lines[1] == "16" and lines[2] == "True True"
    assert lines[3] == "['mean@2', 'n', 'pass@1', 'pass@2', 'tasks']"
    steps, rewards = lines[4].split(" ", 1)
    assert steps == "2" and len(eval(rewards)) == 2  # noqa: S307 (our own printed list)
    assert "cannot start an event loop inside a running one" in lines[5]
    assert lines[6] == "16"
    run = namespace["run"]
    assert (Path(run.run_dir) / "metrics.jsonl").is_file()


def test_cell_objects_replace_the_recipes_components(tmp_path):
    import json

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
