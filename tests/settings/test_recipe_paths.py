"""One rule for paths: a recipe's relative paths are relative to the recipe file, a flag's to the
current folder; a file that is not there is named by the path that was tried."""

from __future__ import annotations

import json

import pytest

from agentfly_cli.errors import UserError
from agentfly_cli.plugin_host.loading import resolve_reward, resolve_tools
from agentfly_cli.recipes.loader import load_config
from tests.cli.test_cli_bad_input import agentfly, one_line_error

REWARD = "def score(prediction, answer):\n    return float(prediction == answer)\n"
TOOL = "def shout(text: str) -> str:\n    '''Shout.'''\n    return text.upper()\n"


@pytest.fixture
def recipe_folder(tmp_path, monkeypatch):
    """recipes/ holds a recipe, its data and its reward and tool files; the test runs from
    another folder."""
    folder = tmp_path / "recipes"
    folder.mkdir()
    (folder / "tasks.jsonl").write_text(json.dumps({"question": "2+3?", "answer": "5"}) + "\n")
    (folder / "my_reward.py").write_text(REWARD)
    (folder / "my_tools.py").write_text(TOOL)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    return folder


def write_recipe(folder, **fields) -> str:
    body = {"data": {"path": "tasks.jsonl"}, **fields}
    path = folder / "recipe.yaml"
    path.write_text(json.dumps(body))
    return str(path)


@pytest.mark.parametrize(
    "reward",
    ["my_reward.py:score", ["my_reward.py:score"], [{"name": "my_reward.py:score", "weight": 1}]],
)
def test_a_recipe_reward_file_is_read_beside_the_recipe(recipe_folder, reward):
    config = load_config(write_recipe(recipe_folder, reward=reward))
    loaded = resolve_reward(config.reward[0].name)
    assert loaded.name == "score"
    assert loaded.score_sync("5", answer="5").reward == 1.0


@pytest.mark.parametrize("tools", ["my_tools.py:shout", ["my_tools.py:shout"]])
def test_a_recipe_tool_file_is_read_beside_the_recipe(recipe_folder, tools):
    config = load_config(write_recipe(recipe_folder, tools=tools))
    assert [t.name for t in resolve_tools(config.tools[0])] == ["shout"]


def test_registered_names_module_specs_and_mcp_entries_are_left_alone(recipe_folder):
    tools = ["calculator", "tools_builtin:calculator", "mcp:python server.py:x"]
    config = load_config(write_recipe(recipe_folder, tools=tools, reward="exact_match"))
    assert config.tools == tools
    assert [r.name for r in config.reward] == ["exact_match"]


def test_a_missing_recipe_reward_names_the_path_beside_the_recipe(recipe_folder, model_loads):
    recipe = write_recipe(recipe_folder, reward="nope.py:score")
    result = agentfly("rollout", recipe, "--model", "tiny", "--out", recipe_folder / "out.jsonl")
    one_line_error(result, f"no file {recipe_folder / 'nope.py'}")
    assert "current folder" not in result.output
    assert model_loads == []


def test_a_reward_flag_is_relative_to_the_current_folder(recipe_folder):
    (recipe_folder.parent / "elsewhere" / "here.py").write_text(REWARD)
    config = load_config(write_recipe(recipe_folder), reward="here.py:score")
    assert resolve_reward(config.reward[0].name).name == "score"
    with pytest.raises(UserError) as caught:
        resolve_reward(load_config(write_recipe(recipe_folder), reward="my_reward.py:score")
                       .reward[0].name)  # fmt: skip
    where = recipe_folder.parent / "elsewhere"
    assert f"no file {where / 'my_reward.py'} (relative to the current folder, {where})" in str(
        caught.value
    )


def test_a_missing_recipe_data_file_names_the_path_beside_the_recipe(recipe_folder, model_loads):
    recipe = recipe_folder / "recipe.yaml"
    recipe.write_text(json.dumps({"data": {"path": "missing.jsonl"}}))
    result = agentfly("rollout", recipe, "--model", "tiny", "--out", recipe_folder / "out.jsonl")
    one_line_error(result, str(recipe_folder / "missing.jsonl"))
    assert model_loads == []


PARSER = (
    "from agentfly_cli.chat.parser_output import BaseParser, ParsedResponse\n"
    "class Plain(BaseParser):\n    name = 'plain'\n"
    "    def parse_body(self, body):\n        return ParsedResponse(body, [])\n"
)


def test_a_recipe_parser_file_is_read_beside_the_recipe(recipe_folder):
    from agentfly_cli.chat.parsers import get_parser

    (recipe_folder / "my_parser.py").write_text(PARSER)
    config = load_config(write_recipe(recipe_folder, chat={"parser": "my_parser.py:Plain"}))
    assert config.chat.parser == f"{recipe_folder / 'my_parser.py'}:Plain"
    assert get_parser(config.chat.parser).name == "plain"
    flag = load_config(write_recipe(recipe_folder), ["chat.parser=my_parser.py:Plain"])
    assert flag.chat.parser == "my_parser.py:Plain"  # --set: relative to the current folder


def test_a_recipe_agent_given_as_a_string_takes_set_options(recipe_folder):
    """``agent: agent.py:fn`` in the YAML, ``--set agent.timeout_s=90`` on the command line:
    the string is the section's entry (still relative to the recipe), the option is set."""
    (recipe_folder / "agent.py").write_text("def fn(task, base_url):\n    return None\n")
    spec = write_recipe(recipe_folder, agent="agent.py:fn")
    config = load_config(spec, ["agent.timeout_s=90", "agent.concurrency=3"])
    assert config.agent.timeout_s == 90 and config.agent.concurrency == 3
    assert config.agent.entry == f"{recipe_folder / 'agent.py'}:fn"
    with pytest.raises(UserError, match="'path' is not a section"):  # only agent is a shorthand
        load_config(spec, ["data.path.x=1"])
