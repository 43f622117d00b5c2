"""`agentfly rollout` on rows that bring their own tools (data.tools_field), with the scripted
backend; and the one-line errors such rows can cause, before any model loads."""

from __future__ import annotations

import json

import pytest

from agentfly_cli.trajectory import read_trajectories
from tests.cli.test_cli_bad_input import agentfly, one_line_error

WEATHER = {
    "name": "get_weather",
    "description": "The weather of a city.",
    "parameters": {
        "type": "dict",
        "properties": {"city": {"type": "string"}},
        "required": ["city"],
    },
}
TIME = {
    "type": "function",
    "function": {
        "name": "get_time",
        "description": "The local time of a city.",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
    },
}


def call(name: str, **arguments) -> str:
    return "<tool_call>\n" + json.dumps({"name": name, "arguments": arguments}) + "\n</tool_call>"


def write_jsonl(path, rows) -> str:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


@pytest.fixture
def files(tmp_path):
    rows = [
        {"id": "w", "question": "Weather in Oslo?", "tools": [WEATHER], "city": "Oslo"},
        {"id": "t", "question": "Time in Lima?", "tools": [TIME, WEATHER], "city": "Lima"},
        {"id": "c", "question": "What is 2 + 3?", "answer": "5"},  # no tools of its own
    ]
    script = [
        {
            "id": "w",
            "responses": [
                call("get_weather", town="Oslo"),
                call("get_weather", city="Oslo"),
                "Fine.",  # read only where the call does not end the chain (on_call: mock)
            ],
        },
        {"id": "t", "responses": [call("get_time", city="Lima"), "Noon."]},
        {"id": "c", "responses": [call("calculator", expression="2 + 3"), "5"]},
    ]
    return write_jsonl(tmp_path / "data.jsonl", rows), write_jsonl(tmp_path / "s.jsonl", script)


def args(tiny_model, data, script, out, *extra):
    return [
        "--model", tiny_model, "--backend", "scripted", "--script", script, "--data", data,
        "--tools", "calculator", "--n", "1", "--max-turns", "3", "--out", out,
        "--parser", "hermes", *extra,
    ]  # fmt: skip


def test_rollout_on_rows_with_their_own_tools(tiny_model, files, tmp_path):
    out = tmp_path / "out.jsonl"
    result = agentfly("rollout", *args(tiny_model, *files, out))
    assert result.exit_code == 0, result.output
    weather, time, calc = read_trajectories(out)
    for trajectory in (weather, time, calc):
        trajectory.check()
    assert [(c.name, c.status, c.error_kind) for c in weather.tool_calls] == [
        ("get_weather", "error", "invalid_arguments"),
        ("get_weather", "ok", None),
    ]
    assert weather.finish_reason == time.finish_reason == "declared_call"
    assert time.tool_calls[0].arguments == {"city": "Lima"}
    assert calc.finish_reason == "answer" and calc.tool_calls[0].observation == "5"
    assert "declared_call" in result.stdout and "invalid_arguments" in result.stdout


def test_mock_mode_from_the_command_line(tiny_model, files, tmp_path):
    out = tmp_path / "out.jsonl"
    extra = ["--set", "rollout.task_tools.on_call=mock", "--set", "rollout.task_tools.mock=fine"]
    result = agentfly("rollout", *args(tiny_model, *files, out, *extra))
    assert result.exit_code == 0, result.output
    weather = read_trajectories(out)[0]
    assert [c.observation for c in weather.tool_calls][1] == "fine"
    assert weather.finish_reason == "answer" and weather.prediction == "Fine."


def test_a_malformed_row_schema_names_the_file_row_and_fix(tmp_path, files, model_loads):
    data, script = files
    rows = [json.loads(line) for line in open(data)]
    rows[1]["tools"][1] = {"name": "get_weather", "parameters": {"type": "dict", "required": 3}}
    bad = write_jsonl(tmp_path / "bad.jsonl", rows)
    result = agentfly("rollout", *args("tiny", bad, script, tmp_path / "o.jsonl"))
    one_line_error(
        result,
        f"{bad} row 2: tools[1] ('get_weather') has parameters.required 3, which is not a list",
    )
    assert model_loads == []


def test_a_row_tool_named_like_a_run_tool_names_both(tmp_path, files, model_loads):
    data, script = files
    clash = {"question": "q", "tools": [{"name": "calculator"}]}
    bad = write_jsonl(tmp_path / "bad.jsonl", [{"question": "q"}, clash])
    result = agentfly("rollout", *args("tiny", bad, script, tmp_path / "o.jsonl"))
    one_line_error(result, f"{bad} row 2: tools[0] 'calculator' has the name of the run's tool")
    assert model_loads == []


def test_env_mode_needs_its_env_named(tmp_path, files, model_loads):
    result = agentfly(
        "rollout", *args("tiny", *files, tmp_path / "o.jsonl", "--set",
                         "rollout.task_tools.on_call=env"),
    )  # fmt: skip
    one_line_error(result, "rollout.task_tools", "on_call: env needs rollout.task_tools.env")
    assert model_loads == []


def test_env_mode_with_an_unknown_env_is_one_line(tmp_path, files, model_loads):
    extra = ["--set", "rollout.task_tools={on_call: env, env: no_such_env}"]
    result = agentfly("rollout", *args("tiny", *files, tmp_path / "o.jsonl", *extra))
    one_line_error(result, "rollout.task_tools.env: unknown env 'no_such_env'")
    assert model_loads == []


def test_a_tools_field_of_another_name(tiny_model, tmp_path):
    rows = [{"id": "w", "question": "Weather?", "function": [WEATHER], "tools": "not schemas"}]
    data = write_jsonl(tmp_path / "data.jsonl", rows)
    script = write_jsonl(tmp_path / "s.jsonl", [{"responses": [call("get_weather", city="X")]}])
    out = tmp_path / "out.jsonl"
    result = agentfly(
        "rollout", *args(tiny_model, data, script, out, "--set", "data.tools_field=function")
    )
    assert result.exit_code == 0, result.output
    assert read_trajectories(out)[0].finish_reason == "declared_call"
