"""Tool-call parsers are plugin components: the built-ins come from an entry point, and a
third-party plugin's parser is used by name like theirs."""

from __future__ import annotations

import importlib
import importlib.metadata
import json
import subprocess
import sys

import pytest
from typer.testing import CliRunner

from agentfly_cli.chat.builtin_parsers import BUILTIN_PARSERS
from agentfly_cli.chat.parsers import get_parser, parser_names
from agentfly_cli.cli.app import build_app
from agentfly_cli.errors import ComponentConflictError, UnknownComponentError, UserError
from agentfly_cli.plugin_host.plugins import load_plugins
from agentfly_cli.trajectory import read_trajectories

# the names declared in chat/builtin_parsers.py (tests/chat/test_parsers.py checks the list itself)
BUILTINS = sorted(
    getattr(importlib.import_module(module, "agentfly_cli.chat"), class_name).name
    for module, class_name, _ in BUILTIN_PARSERS
)

BANG = '''
import json

from agentfly_cli import hookimpl
from agentfly_cli.chat.parser_output import BaseParser, ParsedResponse, ToolCall


class Bang(BaseParser):
    """Calls written as `!tool {json}`, one a line.

    The rest of the turn is text."""

    name = "bang"

    def parse_body(self, body):
        calls, text = [], []
        for line in body.splitlines():
            if line.startswith("!"):
                tool, _, arguments = line[1:].partition(" ")
                calls.append(ToolCall(tool, json.loads(arguments)))
            else:
                text.append(line)
        return ParsedResponse("\\n".join(text), calls)


@hookimpl
def register_parsers(register):
    register(Bang)
'''


def agentfly(*arguments):
    return CliRunner().invoke(build_app(), [str(a) for a in arguments])


def listed() -> dict[str, dict]:
    result = agentfly("parsers", "list", "--json")
    assert result.exit_code == 0, result.output
    return {item["name"]: item for item in json.loads(result.stdout)}


def plugin_registering(register_lines: str) -> str:
    """A plugin module whose register_parsers hook runs ``register_lines``."""
    return (
        "from agentfly_cli import hookimpl\n"
        "from agentfly_cli.chat.formats.json_calls import HermesParser\n\n"
        "class Other(HermesParser):\n    name = 'other'\n\n"
        "@hookimpl\ndef register_parsers(register):\n"
        + "".join(f"    {line}\n" for line in register_lines.splitlines())
    )


def test_hook_register_parsers(make_plugin):
    dist = make_plugin(BANG, entry_point="bangs")
    host = load_plugins(only={"agentfly-cli", dist})
    entry = host.components.parsers.entry("bang")
    assert entry.provenance.plugin == "bangs" and entry.provenance.distribution == dist
    assert not entry.provenance.builtin
    assert entry.description == "Calls written as `!tool {json}`, one a line."
    parser = get_parser("bang", host=host)
    parsed = parser.parse('<think>!calculator {"expression": "9"}</think>hi\n!answer {"answer": 5}')
    assert parser.name == "bang" and parsed.content == "hi"
    assert [(c.name, c.arguments) for c in parsed.calls] == [("answer", {"answer": 5})]
    assert parser_names(host) == sorted([*BUILTINS, "bang"])


def test_a_plugin_parser_is_usable_by_name_and_listed(make_plugin):
    dist = make_plugin(BANG, entry_point="bangs")  # installed: the default plugin host finds it
    assert get_parser("bang").name == "bang"
    assert "bang" in parser_names()
    item = listed()["bang"]
    assert item["plugin"] == "bangs" and item["distribution"] == dist
    assert item["builtin"] is False and item["conflict"] is None
    assert item["description"].startswith("Calls written as")
    human = agentfly("parsers", "list")
    assert human.exit_code == 0 and "bang" in human.stdout and "bangs" in human.stdout


def test_a_rollout_uses_a_plugin_parser(make_plugin, tiny_model, tmp_path):
    make_plugin(BANG)
    data, script, out = tmp_path / "data.jsonl", tmp_path / "script.jsonl", tmp_path / "o.jsonl"
    data.write_text(json.dumps({"question": "What is 2 + 3?", "answer": "5"}) + "\n")
    turns = ['!calculator {"expression": "2 + 3"}', '!answer {"answer": "5"}']
    script.write_text(json.dumps({"responses": turns}) + "\n")
    result = agentfly(
        "rollout", "--model", tiny_model, "--backend", "scripted", "--script", script,
        "--data", data, "--tools", "calculator,answer", "--reward", "math_equal",
        "--n", "1", "--max-turns", "3", "--parser", "bang", "--out", out, "--json",
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["summary"]["tool_calls"]["calculator"]["calls"] == 1
    assert [t.reward for t in read_trajectories(out)] == [1.0]


def test_builtin_parsers_come_from_the_entry_point(monkeypatch):
    (entry_point,) = importlib.metadata.entry_points(group="agentfly", name="builtin_parsers")
    assert entry_point.value == "agentfly_cli.chat.builtin_parsers"
    assert entry_point.dist.name == "agentfly-cli"
    host = load_plugins(only={"agentfly-cli"})
    assert host.plugin("builtin_parsers").hooks == ["register_parsers"]
    assert host.plugin("builtin_parsers").ok
    for entry in host.components.parsers.entries():
        assert entry.provenance.plugin == "builtin_parsers"
        assert entry.provenance.distribution == "agentfly-cli" and entry.provenance.builtin
        assert entry.description and entry.obj.name == entry.name
    assert parser_names(host) == BUILTINS
    for item in listed().values():
        assert item["plugin"] == "builtin_parsers" and item["builtin"] is True

    monkeypatch.setenv("AGENTFLY_LOAD_PLUGINS", "")  # no plugins: no parsers, not even hermes
    assert parser_names(load_plugins()) == []
    with pytest.raises(UnknownComponentError, match="use one of: none; no plugin registers"):
        get_parser("hermes", host=load_plugins())


def test_a_name_registered_twice_is_a_conflict(make_plugin):
    dist = make_plugin(plugin_registering("register(Other, name='hermes')"), entry_point="rival")
    host = load_plugins(only={"agentfly-cli", dist})
    message = host.plugin("rival").hook_errors["register_parsers"]
    assert message == (
        "parser 'hermes' is registered by both plugin 'builtin_parsers' (agentfly-cli 0.1.0) and "
        f"plugin 'rival' ({dist} 1.2.3); rename one of them or uninstall one plugin"
    )
    with pytest.raises(ComponentConflictError, match="registered by both"):
        get_parser("hermes", host=host)
    assert get_parser("mistral", host=host).name == "mistral"  # the others are unaffected
    assert listed()["hermes"]["conflict"] == message
    assert "(CONFLICT)" in agentfly("parsers", "list").stdout


def test_a_name_registered_twice_by_one_plugin(make_plugin):
    dist = make_plugin(plugin_registering("register(Other)\nregister(Other)"), entry_point="dup")
    host = load_plugins(only={dist})
    message = host.plugin("dup").hook_errors["register_parsers"]
    assert message == "parser 'other' is registered twice by plugin 'dup' " + (
        f"({dist} 1.2.3); register each name once"
    )


@pytest.mark.parametrize(
    ("register_lines", "fragment"),
    [
        (
            "register(Other())",
            "takes a parser class (a subclass of agentfly_cli.chat.parser_output.",
        ),
        ("register('hermes')", "got str 'hermes'"),
        ("register(dict)", "parser class dict has no parse or from_options method; subclass"),
        ("register(Other, name='a:b')", "name must be a non-empty string without ':'"),
        ("Other.name = ''\nregister(Other)", "got ''; set its name attribute or pass name="),
    ],
)
def test_a_bad_registration_is_a_one_line_user_error(make_plugin, register_lines, fragment):
    dist = make_plugin(plugin_registering(register_lines), entry_point="bad")
    host = load_plugins(only={"agentfly-cli", dist})
    message = host.plugin("bad").hook_errors["register_parsers"]
    assert message.startswith("UserError: ") and fragment in message
    assert "\n" not in message
    assert parser_names(host) == BUILTINS  # nothing of the failed hook is kept


def test_a_parser_registered_under_another_name(make_plugin):
    dist = make_plugin(plugin_registering("register(Other, name='qwen', description='Qwen')"))
    host = load_plugins(only={dist})
    parser = get_parser("qwen", host=host)
    assert parser.name == "qwen" and host.components.parsers.entry("qwen").description == "Qwen"
    calls = parser.parse('<tool_call>{"name": "f", "arguments": {}}</tool_call>').calls
    assert [c.name for c in calls] == ["f"]


def test_a_plugin_parser_that_fails_to_build_is_one_line(make_plugin):
    source = plugin_registering("register(Broken)").replace(
        "@hookimpl",
        "class Broken(Other):\n    name = 'broken'\n\n"
        "    @classmethod\n    def from_options(cls, options=None):\n"
        "        raise ValueError('needs a vocabulary')\n\n@hookimpl",
    )
    host = load_plugins(only={make_plugin(source)})
    with pytest.raises(UserError, match="parser 'broken' failed to build: ValueError: needs a"):
        get_parser("broken", host=host)


def test_unknown_parser_suggests_a_close_name_and_lists_the_rest(make_plugin):
    with pytest.raises(UnknownComponentError) as caught:
        get_parser("hermez")
    assert str(caught.value) == (
        "unknown tool-call parser 'hermez'; did you mean 'hermes'? "
        f"use one of: {', '.join(BUILTINS)}"
    )
    broken = make_plugin("raise ImportError('no')\n", entry_point="mine")
    host = load_plugins(only={"agentfly-cli", broken})
    with pytest.raises(UnknownComponentError, match=r"plugin\(s\) mine failed to load"):
        get_parser("json", host=host)


def test_building_the_cli_imports_no_parser_module():
    """The built-in parsers' plugin loads with the CLI; their format modules wait for use."""
    code = (
        "import sys\n"
        "from agentfly_cli.cli.app import build_app\n"
        "from agentfly_cli.plugin_host.plugins import get_plugin_host\n"
        "build_app()\n"
        "chat = sorted(m for m in sys.modules if m.startswith('agentfly_cli.chat'))\n"
        "print(chat)\n"
        "get_plugin_host().components\n"
        "print('agentfly_cli.chat.formats.json_calls' in sys.modules)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    )
    assert result.stdout.splitlines() == [
        "['agentfly_cli.chat', 'agentfly_cli.chat.builtin_parsers']",
        "True",
    ]
