"""A first prompt that fills ``rollout.max_total_tokens`` leaves no turn: one warning per run,
with the numbers and the setting to raise, not silence (and not one line per chain)."""

from __future__ import annotations

import asyncio
import json
import logging
import subprocess
import sys

from tests.rollout.test_rollout_engine import chat, make_engine  # noqa: F401

TASKS = [
    {"question": "What is 2 + 3?", "answer": "5"},
    {"question": "What is 1 + 1?", "answer": "2"},
]


def warnings_of(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]


def test_prompts_over_the_budget_give_one_warning_with_the_numbers(chat, caplog):  # noqa: F811
    engine = make_engine(chat, [["5"]] * 4, n=2, max_total_tokens=8)
    prompt = len(chat.render_prompt([{"role": "user", "content": TASKS[0]["question"]}],
                                    engine.tool_schemas))  # fmt: skip
    with caplog.at_level(logging.WARNING):
        trajectories = asyncio.run(engine.run(TASKS))
    assert [(t.finish_reason, t.num_turns) for t in trajectories] == [("length", 0)] * 4
    [line] = warnings_of(caplog)
    assert "4 of 4 chains ended before their first turn" in line
    assert "rollout.max_total_tokens is 8" in line and "raise rollout.max_total_tokens" in line
    assert f"up to {max(prompt, max(len(t.ids) for t in trajectories))} tokens" in line
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        asyncio.run(engine.run(TASKS))  # a second batch of the same run (a training step)
    assert warnings_of(caplog) == []


def test_prompts_within_the_budget_give_no_warning(chat, caplog):  # noqa: F811
    engine = make_engine(chat, [["5"]] * 2, n=1)
    with caplog.at_level(logging.WARNING):
        trajectories = asyncio.run(engine.run(TASKS))
    assert all(t.num_turns == 1 for t in trajectories)
    assert warnings_of(caplog) == []


def test_rollout_prints_the_warning_once(tiny_model, tmp_path):
    data = tmp_path / "data.jsonl"
    data.write_text("".join(json.dumps(t) + "\n" for t in TASKS * 3))
    script = tmp_path / "script.jsonl"
    script.write_text(json.dumps({"responses": ["5"]}) + "\n")
    result = subprocess.run([
        sys.executable, "-m", "agentfly_cli", "rollout", "--model", str(tiny_model),
        "--backend", "scripted", "--script", str(script), "--data", str(data), "--n", "2",
        "--set", "rollout.max_total_tokens=8", "--quiet", "--out", str(tmp_path / "out.jsonl"),
    ], capture_output=True, text=True, timeout=300)  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert result.stderr.count("ended before their first turn") == 1, result.stderr
    assert "warning: 12 of 12 chains" in result.stderr
