"""The agentfly CLI, through typer.testing.CliRunner."""

from __future__ import annotations

import json
import re

import pytest
import typer
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
    for command in ("plugins", "tools", "rewards", "env", "recipes"):
        assert command in result.stdout


def test_root_help_lists_every_visible_command_with_its_summary_and_hides_the_rest():
    """The root page is drawn by cli/root_help.py (not Typer's): it must miss nothing."""
    app = build_app()

    @app.command("hello-plugin")
    def hello() -> None:
        """Say hello [plugin], as a plugin's command would.

        This second paragraph stays off the root page.
        """

    result = runner.invoke(app, ["--help"], env={"TERMINAL_WIDTH": "200"})
    assert result.exit_code == 0, result.output
    page = result.stdout
    assert "Usage: agentfly [OPTIONS] COMMAND [ARGS]..." in page
    assert "Train LM agents with reinforcement learning" in page
    rows = dict(re.findall(r"^│ (\S+) +(.*?) *│$", page, flags=re.MULTILINE))
    assert rows["--version"] == "Show the version and exit."
    assert rows["hello-plugin"] == "Say hello [plugin], as a plugin's command would."
    assert "second paragraph" not in page
    assert rows["train"].startswith("Train a model with RL on a recipe")
    group = typer.main.get_command(app)
    visible = {name for name, cmd in group.commands.items() if not cmd.hidden}
    assert {"tools", "env", "train", "eval"} <= visible
    assert visible | {"--version", "--help"} == set(rows)
    assert "envs" not in rows and "--local_rank" not in page  # hidden ones stay hidden


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
    missing = one_line_error(agentfly("rewards", "call", "exact_match", "-p", "1"))
    assert "needs dataset field(s) answer" in missing and "--fields" in missing
    assert "--fields is not valid JSON" in one_line_error(
        agentfly("rewards", "call", "exact_match", "-p", "1", "-f", "{")
    )
    assert "unknown reward" in one_line_error(agentfly("rewards", "call", "nope", "-p", "1"))


def test_env_list_shows_the_registered_kinds():
    result = agentfly("env", "list", "--json")
    envs = {item["name"]: item for item in json.loads(result.stdout)}
    assert envs["scratchpad"]["tools"] == ["notes_list", "notes_read", "notes_write"]
    assert envs["scratchpad"]["plugin"] == "builtin_envs"
    assert "factory" not in envs["scratchpad"]
    assert "scratchpad" in agentfly("env", "list").stdout


def test_env_is_the_one_noun_and_the_first_names_still_work_unlisted():
    top = agentfly("--help").stdout
    assert re.search(r"\benv\b", top) and not re.search(r"\benvs\b", top)
    group = agentfly("env", "--help").stdout
    for command in ("list", "up", "servers", "down"):
        assert re.search(rf"\b{command}\b", group), command
    assert not re.search(r"\bls\b", group)
    assert json.loads(agentfly("envs", "list", "--json").stdout) == json.loads(
        agentfly("env", "list", "--json").stdout
    )
    assert agentfly("env", "ls", "--json").exit_code == 0


def test_recipes_list_shows_the_packaged_recipes():
    result = agentfly("recipes", "list", "--json")
    assert result.exit_code == 0
    recipes = {item["name"]: item for item in json.loads(result.stdout)}
    assert set(recipes) >= {"calculator", "calculator-json"}
    assert recipes["calculator"]["plugin"] == "builtin_recipes"
    assert recipes["calculator"]["path"].endswith("calculator.yaml")


def test_recipes_show_lists_the_data_and_what_where_can_select():
    result = agentfly("recipes", "show", "code_math", "--json")
    assert result.exit_code == 0, result.output
    info = json.loads(result.stdout)
    assert info["plugin"] == "builtin_recipes" and info["path"].endswith("code_math.yaml")
    assert info["data"]["rows"] == 308
    assert info["data"]["fields"] == ["id", "question", "answer", "kind", "solution"]
    assert list(info["data"]["choices"]) == ["kind"]  # ids, questions, answers: too many values
    assert len(info["data"]["choices"]["kind"]) == 11
    assert set(info["data"]["choices"]["kind"].values()) == {28}
    assert info["config"]["tools"] == ["python", "answer"]
    human = agentfly("recipes", "show", "textworld")
    assert human.exit_code == 0, human.output
    for text in ("tw_act", "textworld_score", "--where level=...", "easy (80)"):
        assert text in human.stdout, text
    assert re.search(r"│ rows\s+│ 240\s", human.stdout), human.stdout


def test_recipes_show_a_plugin_recipe_without_data(make_plugin, tmp_path):
    recipe = tmp_path / "bare.yaml"
    recipe.write_text("model: tiny\ntools: [calculator]\n")
    make_plugin(
        f"""
from agentfly_cli import hookimpl

@hookimpl
def register_recipes(register):
    register("bare", {str(recipe)!r}, description="no data of its own")
"""
    )
    result = agentfly("recipes", "show", "bare", "--json")
    assert result.exit_code == 0, result.output
    info = json.loads(result.stdout)
    assert info["data"] == {"path": None, "rows": 0, "fields": [], "choices": {}}
    human = agentfly("recipes", "show", "bare")
    assert human.exit_code == 0 and "select tasks" not in human.stdout
    assert "no data of its own" in human.stdout and "calculator" in human.stdout


def test_recipes_show_unknown_is_one_line_and_exit_2():
    result = agentfly("recipes", "show", "code_mth")
    assert result.exit_code == 2
    assert "unknown recipe 'code_mth'; did you mean 'code_math'?" in result.output
    assert len(result.output.strip().splitlines()) == 1


def test_help_lists_the_rollout_commands():
    result = agentfly("--help")
    for command in ("rollout", "eval", "view", "models"):
        assert command in result.stdout


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


USER_FILE = """
from agentfly_cli import reward, tool


class Toolbox:
    @tool
    def look(self) -> str:
        return "inside"


toolbox = Toolbox()


@reward(on_error="raise")
def strict(prediction):
    raise ValueError("gold is malformed")


@reward
def lenient(prediction, answer):
    return float(prediction == answer)
"""


@pytest.fixture
def user_module(tmp_path, monkeypatch):
    (tmp_path / "user_components.py").write_text(USER_FILE)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr("sys.path", [p for p in __import__("sys").path if p not in ("", ".")])
    yield "user_components"
    __import__("sys").modules.pop("user_components", None)


def test_module_specs_are_found_in_the_current_directory(user_module):
    result = agentfly("tools", "call", f"{user_module}:toolbox.look")
    assert result.exit_code == 0, result.output
    assert result.stdout == "inside\n"


def test_wrong_kind_and_unbound_specs_are_user_errors(user_module):
    unbound = one_line_error(agentfly("tools", "call", f"{user_module}:Toolbox.look"))
    assert "method tool read from its class" in unbound
    reward_as_tool = one_line_error(agentfly("tools", "call", f"{user_module}:lenient"))
    assert "is a reward, not a tool" in reward_as_tool
    tool_as_reward = one_line_error(
        agentfly("rewards", "call", f"{user_module}:toolbox.look", "-p", "x")
    )
    assert "is a tool, not a reward" in tool_as_reward


def test_raising_reward_is_a_failed_score_not_a_crash(user_module):
    result = agentfly("rewards", "call", f"{user_module}:strict", "-p", "x", "--json")
    assert result.exit_code == 1
    payload = json.loads(result.stdout)
    assert payload["failed"] and "gold is malformed" in payload["error"]


def test_every_group_without_a_command_shows_help():
    for group in ("tools", "rewards", "env", "recipes"):
        result = agentfly(group)
        assert "Usage" in result.output and "list" in result.output, group


@pytest.mark.parametrize(
    ("variable", "value", "fragment"),
    [
        ("AGENTFLY_TOOL_TIMEOUT", "abc", "a positive number of seconds or 'none'"),
        ("AGENTFLY_TOOL_TIMEOUT", "-1", "AGENTFLY_TOOL_TIMEOUT must be"),
        ("AGENTFLY_TOOL_TIMEOUT", "nan", "AGENTFLY_TOOL_TIMEOUT must be"),
        ("AGENTFLY_WORKER_THREADS", "x", "AGENTFLY_WORKER_THREADS must be a positive integer"),
        ("AGENTFLY_MAX_OBSERVATION_CHARS", "0", "positive integer"),
    ],
)
def test_bad_settings_are_one_line_errors(monkeypatch, variable, value, fragment):
    monkeypatch.setenv(variable, value)
    assert fragment in one_line_error(agentfly("tools", "list"))


def test_no_timeout_setting(monkeypatch):
    from agentfly_cli import tool

    monkeypatch.setenv("AGENTFLY_TOOL_TIMEOUT", "none")
    assert tool(lambda: 1, name="t").timeout is None
    monkeypatch.setenv("AGENTFLY_TOOL_TIMEOUT", "2.5")
    assert tool(lambda: 1, name="t").timeout == 2.5
