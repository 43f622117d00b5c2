"""`agentfly rollout`, `agentfly eval` and `agentfly view`, through CliRunner."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from agentfly_cli.cli.app import build_app
from agentfly_cli.trajectory import read_trajectories

runner = CliRunner()


def agentfly(*arguments):
    return runner.invoke(build_app(), [str(a) for a in arguments])


def call(name: str, **arguments) -> str:
    return "<tool_call>\n" + json.dumps({"name": name, "arguments": arguments}) + "\n</tool_call>"


@pytest.fixture
def files(tmp_path):
    data = tmp_path / "data.jsonl"
    rows = [
        {"id": "t0", "question": "What is 2 + 3?", "answer": "5"},
        {"id": "t1", "question": "What is 4 * 4?", "answer": "16"},
    ]
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    script = tmp_path / "script.jsonl"
    lines = [
        {"responses": [call("calculator", expression="2 + 3"), call("answer", answer="5")]},
        {"responses": [call("calculator", expression="4 * 4"), call("answer", answer="15")]},
    ]
    script.write_text("".join(json.dumps(r) + "\n" for r in lines))
    return data, script, tmp_path / "out.jsonl"


def scripted_args(tiny_model, files, *extra):
    data, script, out = files
    return [
        "--model",
        tiny_model,
        "--backend",
        "scripted",
        "--script",
        script,
        "--data",
        data,
        "--tools",
        "calculator,answer",
        "--reward",
        "math_equal",
        "--n",
        "2",
        "--max-turns",
        "4",
        "--out",
        out,
        "--parser",
        "hermes",
        *extra,
    ]


def test_rollout_scripted_writes_token_exact_trajectories(tiny_model, files):
    result = agentfly("rollout", *scripted_args(tiny_model, files))
    assert result.exit_code == 0, result.output
    trajectories = read_trajectories(files[2])
    assert len(trajectories) == 4
    for trajectory in trajectories:
        trajectory.check()
    assert [t.reward for t in trajectories] == [1.0, 1.0, 0.0, 0.0]
    for text in ("tool calls", "calculator", "finish reasons", "terminal_tool", "0.500"):
        assert text in result.stdout


def test_rollout_json_summary(tiny_model, files):
    result = agentfly("rollout", *scripted_args(tiny_model, files), "--json")
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)["summary"]
    assert summary["chains"] == 4 and summary["tasks"] == 2
    assert summary["reward_mean"] == 0.5 and summary["reward_max"] == 1.0
    assert summary["tool_calls"]["calculator"] == {"calls": 4, "errors": 0}
    assert summary["finish_reasons"] == {"terminal_tool": 4}
    assert summary["token_exact"] is True


def test_eval_reports_pass_at_k(tiny_model, files):
    result = agentfly("eval", *scripted_args(tiny_model, files), "--json")
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)["eval"]
    assert report["overall"]["pass@1"] == 0.5
    assert report["overall"]["pass@2"] == 0.5
    assert [t["correct"] for t in report["tasks"]] == [2, 0]
    human = agentfly("eval", *scripted_args(tiny_model, files))
    assert human.exit_code == 0 and "pass@2" in human.stdout


def test_view_shows_trained_tokens_and_writes_html(tiny_model, files, tmp_path):
    assert agentfly("rollout", *scripted_args(tiny_model, files), "-q").exit_code == 0
    result = agentfly("view", files[2], "--index", "1")
    assert result.exit_code == 0, result.output
    assert "terminal_tool" in result.stdout and "calculator" in result.stdout
    page = tmp_path / "t.html"
    result = agentfly("view", files[2], "--html", page)
    assert result.exit_code == 0, result.output
    html = page.read_text()
    assert "class='t'" in html and "class='m'" in html
    trained = html.count("class='t' title=")  # one span per trained token (the legend has none)
    assert trained == sum(read_trajectories(files[2])[0].loss_mask)


def test_recipe_with_overrides(tiny_model, files):
    data, script, out = files
    result = agentfly(
        "rollout",
        "calculator",
        "--model",
        tiny_model,
        "--backend",
        "scripted",
        "--script",
        script,
        "--data",
        data,
        "--parser",
        "hermes",
        "--out",
        out,
        "--set",
        "rollout.n=1",
        "--set",
        "chat.observation.role=tool",
        "--json",
    )
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["summary"]["chains"] == 2


def test_where_selects_tasks_by_field(tiny_model, files):
    result = agentfly("eval", *scripted_args(tiny_model, files, "--where", "id=t1"), "--json")
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["summary"]["tasks"] == 1 and report["summary"]["chains"] == 2
    assert [task["id"] for task in report["eval"]["tasks"]] == ["t1"]
    both = agentfly("eval", *scripted_args(tiny_model, files, "--where", "id=t1,t0"), "--json")
    assert [task["id"] for task in json.loads(both.stdout)["eval"]["tasks"]] == ["t0", "t1"]


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--where", "id"], "--where 'id': expected FIELD=VALUE"),
        (["--where", "id=t9"], "data.where.id=t9 keeps none of 2 rows"),
        (["--where", "idx=t1"], "data.where.idx: no row of"),
        (["--set", "rollout.nn=3"], "rollout.nn: unknown key; did you mean 'n'?"),
        (["--set", "rollout.n=0"], "rollout.n"),
        (["--set", "envs.python.poolmax=3"], "envs.python.poolmax: unknown key; did you mean"),
        (["--set", "envs.python.pool_max=3"], "no tool of this run uses an env named 'python'"),
        (["--set", "envs.python.provider=docker"], "envs.python.provider"),
        (["--set", "oops"], "expected KEY=VALUE"),
        (["--backend", "nosuch"], "unknown backend 'nosuch'"),
        (["--reward", "nosuch"], "unknown reward 'nosuch'"),
        (["--tools", "calculator,nosuch"], "unknown tool 'nosuch'"),
        (["--parser", "nosuch"], "nosuch"),
        (["--template", "nosuch"], "nosuch"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(tiny_model, files, extra, message):
    result = agentfly("rollout", *scripted_args(tiny_model, files), *extra)
    assert result.exit_code == 2, result.output
    assert message in result.output
    assert "Traceback" not in result.output
    assert len(result.output.strip().splitlines()) == 1


def test_missing_files_and_fields(tiny_model, files, tmp_path):
    data, script, out = files
    result = agentfly("rollout", *scripted_args(tiny_model, files), "--data", tmp_path / "no.jsonl")
    assert result.exit_code == 2 and "not found" in result.output
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"prompt": "x"}\n')
    result = agentfly("rollout", *scripted_args(tiny_model, files), "--data", bad)
    assert result.exit_code == 2 and "'question'" in result.output
    result = agentfly("rollout", *scripted_args(tiny_model, files), "--model", tmp_path / "none")
    assert result.exit_code == 2 and "neither a folder nor a known alias" in result.output
    noanswer = tmp_path / "noanswer.jsonl"
    noanswer.write_text('{"question": "x"}\n')
    result = agentfly("rollout", *scripted_args(tiny_model, files), "--data", noanswer)
    assert result.exit_code == 2 and "answer" in result.output


def test_out_must_be_a_writable_file(tiny_model, files, tmp_path):
    result = agentfly("rollout", *scripted_args(tiny_model, files), "--out", tmp_path)
    assert result.exit_code == 2 and "is a folder" in result.output


def test_view_errors(tmp_path, files):
    assert agentfly("view", tmp_path / "none.jsonl").exit_code == 2
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"nope": 1}\n')
    result = agentfly("view", bad)
    assert result.exit_code == 2 and "bad.jsonl:1" in result.output
