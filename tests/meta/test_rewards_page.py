"""docs/rewards.md works: every example prints what its comments say, its table of the
trajectory's fields is the real list, and the trajectory example scores a real rollout."""

from __future__ import annotations

import ast
import asyncio
import contextlib
import dataclasses
import io
import re
from pathlib import Path

import pytest

from agentfly_cli.trajectory import Trajectory
from tests.rollout.test_rollout_engine import call, chat, make_engine  # noqa: F401

PAGE = Path(__file__).resolve().parents[2] / "docs" / "rewards.md"


def blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", PAGE.read_text(encoding="utf-8"), flags=re.S)


def expected_prints(code: str) -> list[str]:
    """The ``# comment`` on the last line of each print(...) call, in order."""
    lines = code.splitlines()
    calls = [
        node
        for node in ast.walk(ast.parse(code))
        if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "print"
    ]
    return [lines[node.end_lineno - 1].split("#", 1)[1].strip() for node in calls]


def run_block(code: str) -> tuple[dict, list[str]]:
    namespace: dict = {}
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        exec(compile(code, str(PAGE), "exec"), namespace)
    return namespace, printed.getvalue().splitlines()


def trajectory_block() -> str:
    return next(code for code in blocks() if "def careful" in code)


@pytest.mark.parametrize("index", range(len(blocks())))
def test_every_example_prints_what_it_says(index):
    code = blocks()[index]
    _, printed = run_block(code)
    assert printed == expected_prints(code)


def test_the_trajectory_table_lists_every_field():
    section = PAGE.read_text(encoding="utf-8").split("\n## What a reward receives", 1)[1]
    section = section.split("\n## ", 1)[0]
    cells = [line.split("|")[1] for line in section.splitlines() if line.startswith("| `")]
    named = {name for cell in cells for name in re.findall(r"`(\w+)`", cell)}
    fields = {f.name for f in dataclasses.fields(Trajectory)}
    assert named == fields | {"num_turns", "env_reward"}


def test_the_trajectory_example_scores_a_real_rollout(chat):  # noqa: F811
    from tools_builtin.answer import answer
    from tools_builtin.calculator import calculator

    careful = run_block(trajectory_block())[0]["careful"]
    seen = {}

    async def probe(trajectory):  # what the reward is handed, field by field
        seen.update(reward=trajectory.reward, turns=trajectory.num_turns,
                    roles=[m["role"] for m in trajectory.messages])  # fmt: skip
        return await careful.score(trajectory.prediction, trajectory, trajectory.task)

    script = [[call("calculator", expression="2 +"), call("answer", answer="5")]]
    engine = make_engine(chat, script, (calculator, answer), careful)
    engine.reward = type("Probe", (), {"score": lambda self, p, t, f: probe(t)})()
    [trajectory] = asyncio.run(engine.run([{"question": "What is 2 + 3?", "answer": "5"}]))
    assert [c.status for c in trajectory.tool_calls] == ["error", "ok"]
    assert trajectory.reward == 0.75
    assert trajectory.reward_extras == {"failed_calls": ["calculator"], "finish": "terminal_tool"}
    assert seen == {"reward": None, "turns": 2,
                    "roles": ["user", "assistant", "tool", "assistant", "tool"]}  # fmt: skip


def test_the_example_record_is_a_record():
    """The page's JSON example of what a reward receives reads as a trajectory record, and its
    env_reward is the sum of its reports."""
    import json

    from agentfly_cli.trajectory import record_from_json

    [example] = re.findall(r"```json\n(.*?)```", PAGE.read_text(encoding="utf-8"), flags=re.S)
    data = json.loads(example)
    trajectory = record_from_json(data, "docs/rewards.md")
    assert trajectory.env_reward == data["env_reward"]
    assert trajectory.tool_calls[0].info == {"reward": 1.0, "done": True}
    assert trajectory.finish_reason == "env_done"
