"""Every table fits 80 columns without cutting a value: words wrap, none is folded or cropped.

The values come from each command's ``--json`` output; each of their words must appear whole
on one line of the human output, and no line may pass 80 columns.
"""

from __future__ import annotations

import json
import re

import pytest
from typer.testing import CliRunner

from agentfly_cli.cli.app import build_app
from agentfly_cli.cli.output import summary

runner = CliRunner()
WIDTH = 80


def agentfly(*arguments):
    result = runner.invoke(build_app(), [str(a) for a in arguments], env={"COLUMNS": str(WIDTH)})
    assert result.exit_code == 0, result.output
    return result.stdout


def assert_fits(output: str, values) -> None:
    lines = output.splitlines()
    too_wide = [line for line in lines if len(line.rstrip()) > WIDTH]
    assert not too_wide, too_wide[0]
    assert "…" not in output
    for value in values:
        for word in str(value).split():
            assert any(word in line for line in lines), f"{word!r} of {value!r} is cut:\n{output}"


def test_value_checker_catches_a_cut_value():
    with pytest.raises(AssertionError, match="is cut"):
        assert_fits("│ chess_legal_mo │\n│ ves            │", ["chess_legal_moves"])
    with pytest.raises(AssertionError):
        assert_fits("x" * 81, [])


def test_summary_is_the_whole_first_sentence():
    assert summary("Give the answer. Call it once.") == "Give the answer."
    assert (
        summary("Do one action, e.g. 'look',\n\n'wait'. More.")
        == "Do one action, e.g. 'look', 'wait'."
    )
    assert summary(None) == ""


def listing(command: str, *fields: str) -> list:
    items = json.loads(agentfly(*command.split(), "--json"))
    values = []
    for item in items:
        for field in fields:
            value = item.get(field)
            if field == "description":
                value = summary(value)
            values.extend(value if isinstance(value, list) else [value])
    return [v for v in values if v not in (None, "")]


@pytest.mark.parametrize(
    ("command", "fields"),
    [
        ("tools list", ("name", "description", "plugin", "env")),
        ("rewards list", ("name", "fields", "description", "plugin")),
        ("recipes list", ("name", "description", "plugin")),
        ("models list", ("name", "description")),
        ("backends list", ("name", "description", "plugin")),
        ("parsers list", ("name", "description", "plugin")),
    ],
)
def test_listings_fit_80_columns(command, fields):
    values = listing(command, *fields)
    assert values
    assert_fits(agentfly(*command.split()), values)


def test_plugins_fit_80_columns():
    plugins = json.loads(agentfly("plugins", "--json"))["plugins"]
    values = [v for p in plugins for v in (p["name"], p["distribution"], p["version"])]
    values += [h.removeprefix("register_") for p in plugins for h in p["hooks"]]
    assert_fits(agentfly("plugins"), values)


def call(name: str, **arguments) -> str:
    return "<tool_call>\n" + json.dumps({"name": name, "arguments": arguments}) + "\n</tool_call>"


@pytest.fixture
def scripted(tiny_model, tmp_path):
    data = tmp_path / "data.jsonl"
    rows = [
        {"id": f"task-{i}-with-a-longer-id", "question": "2 + 3?", "answer": "5"} for i in (1, 2)
    ]
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    note = call("notes_write", key="k", text="t")
    answer = call("answer", answer="5, as two plus three makes five (checked with a calculator)")
    script = tmp_path / "script.jsonl"
    script.write_text((json.dumps({"responses": [note, answer]}) + "\n") * 2)
    return [
        "--model", tiny_model, "--backend", "scripted", "--script", script, "--data", data,
        "--tools", "notes_write,answer", "--parser", "hermes", "--reward", "exact_match",
        "--n", "8", "--out", tmp_path / "out.jsonl", "--quiet",
    ]  # fmt: skip


def test_rollout_and_eval_reports_fit_80_columns(scripted):
    report = json.loads(agentfly("eval", *scripted, "--json"))
    shown = agentfly("eval", *scripted)
    stats = report["summary"]
    values = [stats["chains"], stats["tasks"], "tokens/s", "reward mean", "turns max"]
    values += ["notes_write", "terminal_tool", "scratchpad", "acquired", "timeouts"]
    values += [task["id"] for task in report["eval"]["tasks"]]
    values += [key for key in report["eval"]["overall"] if key.startswith(("pass@", "mean@"))]
    assert_fits(shown, values)
    assert re.search(r"│ \d+\.\d{3} │\n", shown), "tokens/s is cut"  # it varies from run to run


def test_view_summary_fits_80_columns(scripted, tmp_path):
    agentfly("rollout", *scripted)
    from agentfly_cli.trajectory import read_trajectories

    chain = read_trajectories(tmp_path / "out.jsonl")[3]
    shown = agentfly("view", tmp_path / "out.jsonl", "--index", "3")
    header = shown.split("trained =")[0]
    assert_fits(header, [chain.finish_reason, chain.group_id, len(chain.ids), chain.prediction])


def test_a_table_whose_words_fit_is_narrowed_without_cropping_a_column():
    """Rich alone narrows the widest column, re-widens it to its min_width and crops the last
    column (``builtin_parsers (CON``); every word must still come out whole within 80."""
    from rich.console import Console

    from agentfly_cli.cli.output import table

    rows = [
        (
            "qwen3_coder",
            "Qwen3-Coder: <tool_call><function=NAME><parameter=KEY>",
            "builtin_parsers",
        ),
        (
            "hermes",
            "Hermes / Qwen: <tool_call>{JSON}</tool_call> and more words",
            "builtin_parsers (CONFLICT)",
        ),
    ]
    console = Console(width=WIDTH, record=True, file=open("/dev/null", "w"))  # noqa: SIM115
    console.print(table("parsers", ("name", "description", "plugin"), rows))
    assert_fits(console.export_text(), [cell for row in rows for cell in row])
