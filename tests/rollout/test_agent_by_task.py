"""``--agent`` with the scripted backend replays each task's own script line: by the row's id
where the lines have ids, by the task's index where they do not; ``turn`` is the episode's
request number. A plain ``agentfly serve`` session keeps task 0 and its session id."""

from __future__ import annotations

from pathlib import Path

import pytest

from agentfly_cli.trajectory import read_trajectories
from tests.helpers.recipe_checks import agentfly, write_jsonl

pytest.importorskip("openai", reason="the openai SDK is a dev dependency")
pytest.importorskip("uvicorn", reason="the gateway needs the serve extra")

AGENT = Path(__file__).parents[2] / "examples" / "openai_agent" / "recipe.yaml"
ROWS = [
    {"id": "t-a", "question": "What is 70 + 33?", "answer": "103"},
    {"id": "t-b", "question": "What is 84 - 48?", "answer": "36"},
    {"id": "t-c", "question": "What is 35 * 62?", "answer": "2170"},
    {"id": "t-d", "question": "What is 351 + 78?", "answer": "429"},
]
# out of the data's order on purpose; t-c uses the agent's calculator first (two requests)
BY_ID = [
    {"id": "t-d", "responses": ["ANSWER: 428"]},
    {"id": "t-a", "responses": ["ANSWER: 103"]},
    {"id": "t-c", "responses": ["CALC: 35*62", "ANSWER: 2170"]},
    {"id": "t-b", "responses": ["CALC: 84-48", "ANSWER: 35"]},
]
EXPECTED = {"t-a": 1.0, "t-b": 0.0, "t-c": 1.0, "t-d": 0.0}


def rollout(tiny_model, tmp_path, script, rows, command="rollout", *extra):
    out = tmp_path / f"{command}.jsonl"
    result = agentfly(
        command, AGENT, "--model", tiny_model, "--backend", "scripted",
        "--script", write_jsonl(tmp_path / "script.jsonl", script),
        "--data", write_jsonl(tmp_path / "tasks.jsonl", rows), "--n", "2",
        "--out", out, "--quiet", *extra,
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    return read_trajectories(out)


def test_each_task_replays_its_own_line_by_id(tiny_model, tmp_path):
    trajectories = rollout(tiny_model, tmp_path, BY_ID, ROWS)
    assert len(trajectories) == 8  # 4 tasks x 2 episodes, one segment each
    rewards = {}
    for trajectory in trajectories:
        trajectory.check()
        rewards.setdefault(trajectory.task["id"], set()).add(trajectory.reward)
        sampled = [t for t in trajectory.turns if t.sampled_ids is not None]
        calls = 2 if trajectory.task["id"] in ("t-b", "t-c") else 1  # turn = request number
        assert len(sampled) == calls
    assert rewards == {key: {value} for key, value in EXPECTED.items()}
    predictions = {t.task["id"]: t.prediction for t in trajectories}
    assert predictions == {"t-a": "103", "t-b": "35", "t-c": "2170", "t-d": "428"}


def test_plain_lines_go_by_task_index(tiny_model, tmp_path):
    rows = [{k: v for k, v in row.items() if k != "id"} for row in ROWS]
    script = [{"responses": [f"ANSWER: {row['answer'] if i % 2 else 0}"]}
              for i, row in enumerate(rows)]  # fmt: skip
    trajectories = rollout(tiny_model, tmp_path, script, rows)
    by_index = {t.task_index: t.reward for t in trajectories}
    assert by_index == {0: 0.0, 1: 1.0, 2: 0.0, 3: 1.0}


def test_eval_of_an_agent_scores_each_task_by_its_line(tiny_model, tmp_path):
    trajectories = rollout(tiny_model, tmp_path, BY_ID, ROWS, "eval")
    assert {t.task["id"]: t.reward for t in trajectories} == EXPECTED


def test_a_task_without_a_line_is_that_tasks_error_only(tiny_model, tmp_path):
    trajectories = rollout(tiny_model, tmp_path, BY_ID[1:], ROWS)  # no line for t-d
    failed = {t.task["id"] for t in trajectories if t.error}
    assert failed == {"t-d"}
    assert all("none is 't-d'" in t.error for t in trajectories if t.error)


def test_a_plain_serve_session_is_task_zero_with_its_session_id(tiny_model):
    from agentfly_cli.chat.templates import ChatTemplate
    from agentfly_cli.serve.gateway import Gateway

    chat = ChatTemplate.load(str(tiny_model))
    gateway = Gateway(None, chat, None, "m")
    checked = gateway.check({"messages": [{"role": "user", "content": "hi"}]})
    plain = gateway.episode("my-session")  # opened on request, as `agentfly serve` does
    context = gateway.request_args(checked[1], plain, 0)[1]
    assert (context.task_index, context.task_id, context.turn) == (0, "my-session", 0)
    engine = gateway.open_episode("ep-1", task_index=7, task_id="t-7")
    context = gateway.request_args(checked[1], engine, 1)[1]
    assert (context.task_index, context.task_id, context.sample_index) == (7, "t-7", 1)
    rowless = gateway.open_episode("ep-2", task_index=3)  # a row without an id
    assert gateway.request_args(checked[1], rowless, 0)[1].task_id is None
