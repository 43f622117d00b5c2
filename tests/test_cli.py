"""The agentfly CLI, through typer.testing.CliRunner."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from agentfly_cli import __version__
from agentfly_cli.cli.app import build_app

runner = CliRunner()


def agentfly(*arguments, env=None):
    return runner.invoke(build_app(), list(arguments), env=env)


def test_version():
    result = agentfly("--version")
    assert result.exit_code == 0 and result.stdout.strip() == f"agentfly-cli {__version__}"


def test_help_lists_the_command_groups():
    result = agentfly("--help")
    assert result.exit_code == 0
    for command in ("plugins", "tools", "rewards", "envs", "recipes"):
        assert command in result.stdout


def test_tools_list_json_attributes_builtins():
    result = agentfly("tools", "list", "--json")
    assert result.exit_code == 0, result.output
    tools = {item["name"]: item for item in json.loads(result.stdout)}
    for name in ("calculator", "answer"):
        assert tools[name]["plugin"] == "builtin_tools"
        assert tools[name]["distribution"] == "agentfly-cli"
        assert tools[name]["builtin"] is True
        assert tools[name]["conflict"] is None
    assert tools["answer"]["terminal"] is True
    assert tools["calculator"]["schema"]["function"]["name"] == "calculator"
    assert tools["notes_write"]["env"] == "scratchpad"


def test_tools_list_human():
    result = agentfly("tools", "list")
    assert result.exit_code == 0
    assert "calculator" in result.stdout and "builtin_tools" in result.stdout


def test_tools_show():
    result = agentfly("tools", "show", "calculator", "--json")
    assert result.exit_code == 0
    schema = json.loads(result.stdout)
    assert schema["function"]["parameters"]["required"] == ["expression"]
    human = agentfly("tools", "show", "answer")
    assert human.exit_code == 0 and "terminal" in human.stdout and '"answer"' in human.stdout


def test_tools_call_calculator():
    result = agentfly("tools", "call", "calculator", "--args", '{"expression": "2**10 + 3*7"}')
    assert result.exit_code == 0, result.output
    assert result.stdout == "1045\n"


def test_tools_call_json_output():
    result = agentfly("tools", "call", "calculator", "--args", '{"expression": "1+1"}', "--json")
    payload = json.loads(result.stdout)
    assert payload["observation"] == "2" and payload["status"] == "ok"
    assert payload["tool"] == "calculator" and "latency_s" in payload["info"]


@pytest.mark.timeout(10)
def test_tools_call_huge_power_is_an_error_at_once():
    result = agentfly(
        "tools", "call", "calculator", "--args", '{"expression": "9**9**9**9"}', "--json"
    )
    assert result.exit_code == 1
    payload = json.loads(result.stdout)
    assert payload["status"] == "error" and "too large" in payload["observation"]
    assert payload["info"]["latency_s"] < 1.0


def one_line_error(result, code=2):
    assert result.exit_code == code, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("error: ")
    assert "Traceback" not in result.output
    return lines[0]


def test_unknown_tool_is_one_line_exit_2():
    line = one_line_error(agentfly("tools", "call", "nosuch"))
    assert "unknown tool 'nosuch'" in line and "agentfly tools list" in line


def test_unknown_tool_suggests_close_name():
    assert "did you mean 'calculator'" in one_line_error(agentfly("tools", "show", "calculatr"))


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        ("{not json", "--args is not valid JSON"),
        ("[1]", "--args must be a JSON object"),
    ],
)
def test_bad_args_json_is_one_line_exit_2(args, fragment):
    assert fragment in one_line_error(agentfly("tools", "call", "calculator", "--args", args))


def test_invalid_arguments_exit_2_with_observation():
    result = agentfly("tools", "call", "calculator", "--args", '{"expr": "1"}')
    assert result.exit_code == 2
    assert "unknown argument 'expr'" in result.stdout
    assert "missing required argument 'expression'" in result.stdout


def test_debug_shows_the_traceback():
    result = agentfly("tools", "call", "nosuch", env={"AGENTFLY_DEBUG": "1"})
    assert result.exit_code != 0
    assert result.exception is not None and "unknown tool" in str(result.exception)


def test_tools_call_env_tool_gets_a_fresh_env():
    result = agentfly("tools", "call", "notes_write", "--args", '{"key": "a", "text": "b"}')
    assert result.exit_code == 0 and "saved note 'a'" in result.stdout
    again = agentfly("tools", "call", "notes_read", "--args", '{"key": "a"}')
    assert again.exit_code == 1 and "no note named 'a'" in again.stdout


def test_tools_call_from_a_user_file(tmp_path):
    source = tmp_path / "my_tools.py"
    source.write_text(
        "from agentfly_cli import tool\n\n"
        "@tool\ndef greet(name: str) -> str:\n    '''Greet.'''\n    return f'hi {name}'\n\n"
        "def plain(x: int) -> int:\n    return x * 2\n"
    )
    result = agentfly("tools", "call", f"{source}:greet", "--args", '{"name": "ada"}')
    assert result.exit_code == 0 and result.stdout == "hi ada\n"
    plain = agentfly("tools", "call", f"{source}:plain", "--args", '{"x": 21}')
    assert plain.stdout == "42\n"
    missing = one_line_error(agentfly("tools", "call", f"{source}:nothing"))
    assert "has no attribute 'nothing'" in missing
    assert "no file" in one_line_error(agentfly("tools", "call", "nofile.py:x"))


def test_tools_call_timeout_option():
    assert "--timeout must be a positive" in one_line_error(
        agentfly("tools", "call", "calculator", "--args", '{"expression": "1"}', "--timeout", "0")
    )


def test_rewards_list_json():
    result = agentfly("rewards", "list", "--json")
    rewards = {item["name"]: item for item in json.loads(result.stdout)}
    assert set(rewards) >= {"exact_match", "math_equal", "qa_em", "qa_f1"}
    assert rewards["exact_match"]["fields"] == ["answer"]
    assert rewards["qa_f1"]["plugin"] == "builtin_rewards"


def test_rewards_call():
    result = agentfly(
        "rewards",
        "call",
        "qa_f1",
        "-p",
        "the cat sat",
        "-f",
        '{"answer": "a cat sat down"}',
        "--json",
    )
    payload = json.loads(result.stdout)
    assert payload["reward"] == pytest.approx(0.8) and payload["failed"] is False
    missing = agentfly("rewards", "call", "exact_match", "-p", "1")
    assert missing.exit_code == 1 and "needs dataset field(s) 'answer'" in missing.stdout
    assert "--fields is not valid JSON" in one_line_error(
        agentfly("rewards", "call", "exact_match", "-p", "1", "-f", "{")
    )
    assert "unknown reward" in one_line_error(agentfly("rewards", "call", "nope", "-p", "1"))


def test_envs_list():
    result = agentfly("envs", "list", "--json")
    envs = {item["name"]: item for item in json.loads(result.stdout)}
    assert envs["scratchpad"]["tools"] == ["notes_list", "notes_read", "notes_write"]
    assert envs["scratchpad"]["plugin"] == "builtin_envs"
    assert "factory" not in envs["scratchpad"]
    assert "scratchpad" in agentfly("envs", "list").stdout


def test_recipes_list_is_empty_but_valid():
    result = agentfly("recipes", "list", "--json")
    assert result.exit_code == 0 and json.loads(result.stdout) == []


def test_plugins_json_and_human():
    result = agentfly("plugins", "--json")
    payload = json.loads(result.stdout)
    plugins = {p["name"]: p for p in payload["plugins"]}
    assert plugins["builtin_tools"]["builtin"] is True
    assert plugins["builtin_tools"]["hooks"] == ["register_tools"]
    assert plugins["builtin_tools"]["error"] is None
    human = agentfly("plugins")
    assert human.exit_code == 0 and "builtin_tools" in human.stdout


def test_no_plugins_loaded(monkeypatch):
    monkeypatch.setenv("AGENTFLY_LOAD_PLUGINS", "")
    result = agentfly("tools", "list", "--json")
    assert result.exit_code == 0 and json.loads(result.stdout) == []


def test_usage_errors_exit_2():
    assert agentfly("tools", "call").exit_code == 2
    assert agentfly("tools", "frobnicate").exit_code == 2
