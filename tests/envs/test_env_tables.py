"""`env servers` and `env list` fit 80 columns without cutting a value (a pid, a name, an address).

Each word of each value must appear whole on one line of the output, and no line may pass 80
columns unless it is one value that is wider than 80 by itself (an address), printed whole.
"""

from __future__ import annotations

import json
import subprocess

import pytest
from typer.testing import CliRunner

from agentfly_cli.cli.app import build_app
from agentfly_cli.cli.fitted_table import wrap_words
from agentfly_cli.cli.output import summary
from agentfly_cli.envs.state import ServerRecord, write_record

WIDTH = 80
LONG_NAME = "scratchpad_" + "x" * 53  # the longest name a server may have: 64 characters


def agentfly(*arguments: str) -> str:
    result = CliRunner().invoke(build_app(), list(arguments), env={"COLUMNS": str(WIDTH)})
    assert result.exit_code == 0, result.output
    return result.stdout


def assert_whole(output: str, values) -> None:
    lines = [line.rstrip() for line in output.splitlines()]
    words = {str(w) for value in values for w in str(value).split()}
    too_wide = [line for line in lines if len(line) > WIDTH and line.strip() not in words]
    assert not too_wide, f"wider than {WIDTH}: {too_wide[0]!r}\n{output}"
    assert "…" not in output
    for value in values:
        for word in str(value).split():
            assert any(_has_word(line, word) for line in lines), f"{word!r} is cut:\n{output}"


def _has_word(line: str, word: str) -> bool:
    """``word`` stands whole in ``line`` (not as the start of a longer one: 419 is not 4197)."""
    start = line.find(word)
    while start >= 0:
        before = line[start - 1] if start else " "
        end = start + len(word)
        after = line[end] if end < len(line) else " "
        if not (before.isalnum() or after.isalnum()):
            return True
        start = line.find(word, start + 1)
    return False


def test_the_checker_catches_a_cut_pid_and_a_folded_name():
    with pytest.raises(AssertionError, match="'4197' is cut"):
        assert_whole("│ 419 │\n│ 7   │", [4197])
    with pytest.raises(AssertionError, match="is cut"):
        assert_whole("│ 4197 │", [41970])
    with pytest.raises(AssertionError, match="wider"):
        assert_whole("x" * 81, [])
    with pytest.raises(AssertionError, match="wider"):
        assert_whole("a: " + "y" * 90, ["y" * 90])  # wider than 80, and not the value alone
    assert_whole("a:\n" + "y" * 90, ["y" * 90])


def fake_servers(monkeypatch, rows):
    import agentfly_cli.pool_server.control as control

    monkeypatch.setattr(control, "list_servers", lambda timeout=3.0: rows)


def server_row(name: str, pid: int, address: str, **stats) -> dict:
    return {"name": name, "status": "ready", "provider": "process", "pool_max": 1024, "pid": pid,
            "address": address, "stats": stats}  # fmt: skip


def row_values(row: dict) -> list:
    return [row["name"], row["status"], row["pid"], row["provider"], row["pool_max"],
            row["address"], *row["stats"].values()]  # fmt: skip


def test_env_ls_shows_a_long_pid_whole_in_a_table(monkeypatch):
    stats = {"in_use": 1000, "idle": 24, "waiting": 123456, "failed": 7, "restarts": 99999}
    rows = [server_row("scratchpad", 4194303, "tcp://127.0.0.1:65535", **stats)]
    rows.append({**server_row("python", 4197, "unix:///tmp/p.sock"), "status": "unresponsive"})
    fake_servers(monkeypatch, rows)
    shown = agentfly("env", "servers")
    assert "┃ name" in shown, f"a table fits here:\n{shown}"
    assert_whole(shown, [v for row in rows for v in row_values(row)])


def test_env_ls_with_a_64_character_name_and_address_drops_to_records(monkeypatch, tmp_path):
    address = f"unix://{tmp_path}/{LONG_NAME}.sock"
    rows = [server_row(LONG_NAME, 4194303, address, in_use=3, idle=1, waiting=0, failed=2)]
    fake_servers(monkeypatch, rows)
    shown = agentfly("env", "servers")
    assert "┃" not in shown, f"a table cannot fit a 64-character name here:\n{shown}"
    assert_whole(shown, row_values(rows[0]))


def test_env_ls_shows_a_stale_record_whole(tmp_path, monkeypatch):
    monkeypatch.setenv("AGENTFLY_STATE_DIR", str(tmp_path / "state"))
    with subprocess.Popen(["sleep", "60"]) as bystander:
        try:
            address = f"unix://{tmp_path}/state/{LONG_NAME}.sock"
            server = "python -m agentfly_cli.pool_server.server"
            record = ServerRecord(LONG_NAME, bystander.pid, address, start_time=1, cmdline=server)
            write_record(record)
            shown = agentfly("env", "servers")
            message = f"pid {bystander.pid} now belongs to another process"
            assert_whole(shown, [LONG_NAME, "stale", bystander.pid, address, message])
            assert bystander.poll() is None
        finally:
            bystander.kill()


def test_envs_list_fits_80_columns_without_cutting_a_value():
    items = json.loads(agentfly("env", "list", "--json"))
    values = [v for item in items for v in (item["name"], summary(item["description"]))]
    values += [v for item in items for v in (item["plugin"], item["warm_size"], item["pool_max"])]
    values += [tool for item in items for tool in item["tools"]]
    shown = agentfly("env", "list")
    assert "┃ name" in shown, f"the built-in envs fit a table:\n{shown}"
    assert_whole(shown, values)


@pytest.mark.parametrize("width", [20, 40, 80])
def test_wrap_words_never_breaks_a_word(width):
    text = "a " * 30 + "unix:///" + "p" * 100 + ".sock end"
    wrapped = wrap_words(text, width, "  label  ")
    assert wrapped.split() == ["label", *text.split()]
    for line in wrapped.splitlines():
        assert len(line) <= width or line == "unix:///" + "p" * 100 + ".sock"
