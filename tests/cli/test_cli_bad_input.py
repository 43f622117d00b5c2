"""Bad input is one line naming the problem and the fix, exit code 2, before any model loads.

Each case runs the real command through CliRunner with a guard that records any attempt to
resolve or load a model; the guard must stay untouched. Nothing the user had is lost.
"""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from agentfly_cli.cli.app import build_app

runner = CliRunner()
UNWRITABLE = "/proc/agentfly-test/out"  # /proc takes no new files, not even from root


def agentfly(*arguments):
    return runner.invoke(build_app(), [str(a) for a in arguments])


def one_line_error(result, *fragments: str) -> str:
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1, result.output
    assert lines[0].startswith("error: "), lines[0]
    for fragment in fragments:
        assert fragment in lines[0], lines[0]
    return lines[0]


def says_at_least_one(line: str) -> bool:
    """Click's wording of a range error: this Typer's, or an older one's (seen on a GPU box)."""
    return "greater than or equal to 1" in line or "not in the range x>=1" in line


@pytest.fixture
def good(tmp_path):
    """A valid data file and script, and an existing file holding earlier results."""
    data = tmp_path / "data.jsonl"
    data.write_text(json.dumps({"question": "What is 2 + 3?", "answer": "5"}) + "\n")
    script = tmp_path / "script.jsonl"
    script.write_text(json.dumps({"responses": ["5"]}) + "\n")
    earlier = tmp_path / "earlier.jsonl"
    earlier.write_text("precious\n")
    return data, script, earlier


def rollout_args(good, *extra):
    data, script, _ = good
    return ["--model", "tiny", "--backend", "scripted", "--script", script, "--data", data, *extra]


# ---- data files --------------------------------------------------------------------------------
def _deep(levels: int) -> str:
    return "[" * levels + "]" * levels


@pytest.mark.parametrize(
    ("name", "content", "fragments"),
    [
        ("binary.jsonl", b"\x00\x01\x02\xff" * 64, ("binary.jsonl:1", "NUL bytes", "binary")),
        ("latin1.jsonl", '{"question": "café"}\n'.encode("latin-1"), ("0xe9", "not UTF-8")),
        (
            "deep.jsonl",
            ('{"question": "q", "x": ' + _deep(100_000) + "}\n").encode(),
            ("deep.jsonl:1", "nested too deeply", "flatten"),
        ),
        ("deep.json", _deep(100_000).encode(), ("deep.json", "nested too deeply")),
        ("broken.parquet", b"PAR1 not really", ("not a readable Parquet file",)),
    ],
)
def test_unreadable_data_file(tmp_path, good, model_loads, name, content, fragments):
    path = tmp_path / name
    path.write_bytes(content)
    result = agentfly("rollout", *rollout_args(good, "--data", path, "--out", good[2]))
    one_line_error(result, *fragments)
    assert model_loads == []
    assert good[2].read_text() == "precious\n"  # --out was checked, not truncated


@pytest.mark.parametrize("name", ["plain_folder", "looks_like.jsonl"])
def test_folder_that_is_not_a_dataset(tmp_path, good, model_loads, name):
    folder = tmp_path / name
    folder.mkdir()
    (folder / "notes.txt").write_text("not a dataset")
    result = agentfly("rollout", *rollout_args(good, "--data", folder))
    one_line_error(result, "is a folder but not one saved with datasets' save_to_disk", ".jsonl")
    assert model_loads == []


# ---- counts ------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("command", "flag", "value"),
    [
        ("rollout", "--n", "0"),
        ("rollout", "--n", "-2"),
        ("rollout", "--max-turns", "0"),
        ("rollout", "--limit", "0"),
        ("rollout", "--limit", "-1"),
        ("eval", "--n", "0"),
        ("train", "--steps", "0"),
        ("train", "--steps", "-3"),
        ("train", "--n", "0"),
        ("train", "--limit", "0"),
        ("rollout", "--n", "many"),
    ],
)
def test_counts_below_one_are_one_line(good, model_loads, command, flag, value):
    data = good[0]
    result = agentfly(command, "--model", "tiny", "--data", data, flag, value)
    line = one_line_error(result, flag, f"agentfly {command} --help")
    assert says_at_least_one(line) or "integer" in line or "valid int" in line
    assert model_loads == []


def test_sft_epochs_and_batch_size_below_one(good, tmp_path, model_loads):
    for flag in ("--epochs", "--batch-size"):
        result = agentfly("sft", good[0], "--out", tmp_path / "run", flag, "0")
        assert says_at_least_one(one_line_error(result, flag))
    assert model_loads == []


def test_unknown_option_and_command_are_one_line():
    one_line_error(agentfly("rollout", "--nn", "3"), "No such option: --nn", "--n")
    one_line_error(agentfly("tools", "frobnicate"), "No such command 'frobnicate'")
    one_line_error(agentfly("view"), "Missing argument", "agentfly view --help")


def test_a_group_without_a_command_still_shows_its_help():
    result = agentfly("tools")
    assert "list" in result.output and "call" in result.output
    assert not result.output.startswith("error")


# ---- --out -------------------------------------------------------------------------------------
@pytest.mark.parametrize("command", ["rollout", "eval"])
def test_rollout_out_that_cannot_be_written(good, model_loads, command):
    extra = ["--reward", "exact_match"] if command == "eval" else []
    result = agentfly(command, *rollout_args(good, *extra, "--out", f"{UNWRITABLE}.jsonl"))
    one_line_error(result, "--out", "cannot be written", "pick a writable folder")
    under_a_file = good[2] / "out.jsonl"
    result = agentfly(command, *rollout_args(good, *extra, "--out", under_a_file))
    one_line_error(result, "--out", "is a file, not a folder")
    result = agentfly(command, *rollout_args(good, *extra, "--out", good[2].parent))
    one_line_error(result, "--out", "is a folder; pass a file name")
    assert model_loads == []
    assert good[2].read_text() == "precious\n"


def test_train_out_must_be_a_writable_folder(good, model_loads):
    data, _, earlier = good
    result = agentfly("train", "--model", "tiny", "--data", data, "--out", earlier)
    one_line_error(result, "--out", "is a file; pass a folder")
    result = agentfly("train", "--model", "tiny", "--data", data, "--out", UNWRITABLE)
    one_line_error(result, "--out", "cannot be written")
    result = agentfly("train", "--model", "tiny", "--data", data, "--out", earlier / "run")
    one_line_error(result, "--out", "is a file, not a folder")
    assert model_loads == []
    assert earlier.read_text() == "precious\n"


def test_sft_out_must_be_a_writable_folder(good, model_loads):
    data, _, earlier = good
    one_line_error(agentfly("sft", data, "--out", earlier), "--out", "is a file; pass a folder")
    one_line_error(agentfly("sft", data, "--out", UNWRITABLE), "--out", "cannot be written")
    assert model_loads == []
    assert earlier.read_text() == "precious\n"


# ---- user code ---------------------------------------------------------------------------------
PARSER = """
class Exploding:
    def __init__(self):
        raise RuntimeError("boom in the constructor")

    def parse(self, text):
        return []
"""


def test_parser_class_that_raises(tiny_model, good, tmp_path, weights_loads):
    (tmp_path / "my_parser.py").write_text(PARSER)
    data = good[0]
    spec = f"{tmp_path / 'my_parser.py'}:Exploding"
    result = agentfly(
        "rollout", "--model", tiny_model, "--backend", "hf", "--data", data, "--parser", spec
    )
    one_line_error(result, "failed to build", "RuntimeError: boom in the constructor")
    assert weights_loads == []


EXITING = """
import sys

sys.exit(3)


def double(x: int) -> int:
    return 2 * x
"""


def test_tool_file_that_calls_sys_exit(tmp_path, good, model_loads, monkeypatch):
    (tmp_path / "exiting_tools.py").write_text(EXITING)
    monkeypatch.chdir(tmp_path)
    for spec in ("exiting_tools.py:double", "exiting_tools:double"):
        result = agentfly("tools", "call", spec, "--args", '{"x": 1}')
        one_line_error(result, "sys.exit(3)", "while being imported")
    result = agentfly("rollout", *rollout_args(good, "--tools", "exiting_tools.py:double"))
    one_line_error(result, "sys.exit(3)")
    assert model_loads == []


def test_keyboard_interrupt_at_import_is_not_swallowed(tmp_path):
    from agentfly_cli.plugin_host.loading import load_object

    (tmp_path / "interrupted.py").write_text("raise KeyboardInterrupt\n")
    with pytest.raises(KeyboardInterrupt):
        load_object(f"{tmp_path / 'interrupted.py'}:x")


# ---- hints name commands that exist ------------------------------------------------------------
def test_unknown_backend_hint_names_a_command_that_lists_them(good, model_loads):
    line = one_line_error(agentfly("rollout", *rollout_args(good, "--backend", "nosuch")))
    assert "unknown backend 'nosuch'" in line and "`agentfly backends list`" in line
    listed = agentfly("backends", "list", "--json")
    assert listed.exit_code == 0, listed.output
    names = {item["name"] for item in json.loads(listed.stdout)}
    assert {"hf", "vllm", "openai", "scripted"} <= names
    assert model_loads == []


def test_every_listed_kind_has_its_list_command():
    from agentfly_cli.plugin_host.registry import KINDS, LISTED_KINDS, Registry

    for kind in KINDS:
        message = str(Registry(kind)._unknown_message("nosuch"))
        if kind in LISTED_KINDS:
            assert f"`agentfly {kind} list`" in message
            result = agentfly(kind, "list", "--json")
            assert result.exit_code == 0, (kind, result.output)
        else:
            assert "agentfly" not in message, message  # names the choices instead


def test_every_command_named_in_a_message_exists():
    """Each `agentfly WORD [WORD]` quoted in the package's messages is a real command."""
    import re
    from pathlib import Path

    import typer.main

    import agentfly_cli

    root = typer.main.get_command(build_app())
    package = Path(agentfly_cli.__file__).parent
    quoted = set()
    for source in package.rglob("*.py"):
        quoted.update(re.findall(r"`agentfly ([a-z][a-z-]*(?: [a-z][a-z-]*)?)", source.read_text()))
    assert {"plugins", "rewards list", "view"} <= quoted  # the scan finds them
    for words in sorted(quoted):
        command = root
        for word in words.split():
            commands = getattr(command, "commands", None)
            if commands is None:
                break  # a command, not a group: the rest are its arguments
            assert word in commands, f"`agentfly {words}` is quoted but there is no {word!r}"
            command = commands[word]


@pytest.mark.parametrize("value", ["nan", "inf", "-1"])
def test_tools_call_timeout_must_be_finite_and_positive(value):
    result = agentfly(
        "tools", "call", "calculator", "--args", '{"expression": "1"}', "--timeout", value
    )
    one_line_error(result, "--timeout must be a positive number of seconds")


def test_eval_threshold_must_be_a_number(good, model_loads):
    result = agentfly("eval", *rollout_args(good, "--reward", "exact_match", "--threshold", "nan"))
    one_line_error(result, "--threshold nan", "finite number")
    assert model_loads == []
