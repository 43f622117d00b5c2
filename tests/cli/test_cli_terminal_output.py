"""What the CLI prints to a terminal: escape sequences neutralised, markup literal, `view` light,
and `rollout` telling where its trajectories are."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest
from typer.testing import CliRunner

from agentfly_cli.cli.app import build_app
from agentfly_cli.files.safe_text import printable

runner = CliRunner()
RAW_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")
EVIL = (
    "A\x1b[31mRED\x1b[0m \x1b]0;title\x07 \x1b]52;c;ZXZpbA==\x07 [red]markup[/red] [/] "
    "csi\x9b2J bell\x07 back\x08 \u202eevil\u202c cr\rend"
)
TOOLS = f'''
def evil() -> str:
    """Return text full of terminal escapes."""
    return {EVIL!r}
'''


def agentfly(*arguments, **kwargs):
    return runner.invoke(build_app(), [str(a) for a in arguments], **kwargs)


def assert_neutralised(text: str) -> None:
    assert RAW_CONTROL.search(text) is None, repr(RAW_CONTROL.search(text))
    assert "\\x1b[31m" in text and "\\x1b]52;c;ZXZpbA==\\x07" in text
    assert "[red]markup[/red]" in text  # Rich markup printed literally
    assert "\\x9b2J" in text and "\\u202e" in text


def test_printable_escapes_controls_and_keeps_text():
    assert printable("tab\there\nnext\r\n") == "tab\there\nnext\n"
    assert printable("\x1b[2J\x00\x7f\x85\u2028\ud800") == "\\x1b[2J\\x00\\x7f\\x85\\u2028\\ud800"
    assert printable("héllo wörld 你好 🙂") == "héllo wörld 你好 🙂"


def test_printable_is_linear_on_a_megabyte():
    import time

    text = "\x1b[31m" * 150_000 + "x" * 100_000  # about 1 MB
    started = time.perf_counter()
    assert printable(text).count("\\x1b") == 150_000
    assert time.perf_counter() - started < 2.0  # generous; the regex is one pass


@pytest.fixture
def evil_tools(tmp_path):
    path = tmp_path / "evil_tools.py"
    path.write_text(TOOLS)
    return path


def test_tools_call_neutralises_escapes(evil_tools):
    result = agentfly("tools", "call", f"{evil_tools}:evil")
    assert result.exit_code == 0, result.output
    assert_neutralised(result.stdout)
    as_json = agentfly("tools", "call", f"{evil_tools}:evil", "--json")
    assert json.loads(as_json.stdout)["observation"] == EVIL  # --json keeps the exact text


def test_errors_and_tables_neutralise_escapes(tmp_path):
    from rich.console import Console

    from agentfly_cli.cli.output import table

    bad = tmp_path / "bad_tools.py"
    bad.write_text('raise ValueError("\\x1b]0;pwned\\x07 [red]x[/red]")\n')
    result = agentfly("tools", "call", f"{bad}:f")
    assert result.exit_code == 2
    assert RAW_CONTROL.search(result.output) is None
    assert "\\x1b]0;pwned\\x07 [red]x[/red]" in result.output
    console = Console(width=200, record=True, file=open("/dev/null", "w"))  # noqa: SIM115
    console.print(table("t", ("name", "description"), [("x\x1b[2J", EVIL)]))
    rendered = console.export_text()
    assert RAW_CONTROL.search(rendered) is None and "[red]markup[/red]" in rendered


@pytest.fixture
def evil_trajectories(tiny_model, tmp_path, evil_tools):
    data = tmp_path / "data.jsonl"
    data.write_text(json.dumps({"question": "go", "answer": "5"}) + "\n")
    call = '<tool_call>\n{"name": "evil", "arguments": {}}\n</tool_call>'
    script = tmp_path / "script.jsonl"
    script.write_text(json.dumps({"responses": [call, "done \x1b[31m[red]x[/red]\x07"]}) + "\n")
    out = tmp_path / "out.jsonl"
    result = agentfly(
        "rollout", "--model", tiny_model, "--backend", "scripted", "--script", script,
        "--data", data, "--tools", f"{evil_tools}:evil", "--parser", "hermes", "--n", "2",
        "--out", out, "--quiet",
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    return out


def test_view_neutralises_tokens_messages_and_observations(evil_trajectories, tmp_path):
    result = agentfly("view", evil_trajectories, "--index", "1")
    assert result.exit_code == 0, result.output
    assert_neutralised(result.stdout)
    assert "done \\x1b[31m[red]x[/red]\\x07" in result.stdout
    messages = agentfly("view", evil_trajectories, "--tokenizer", tmp_path / "no-tokenizer")
    assert messages.exit_code == 0, messages.output
    assert "showing messages" in messages.output
    assert_neutralised(messages.stdout)


def test_view_index_out_of_range_and_bad_lines(evil_trajectories, tmp_path):
    result = agentfly("view", evil_trajectories, "--index", "2")
    assert result.exit_code == 2 and "holds 2 (use 0 to 1)" in result.output
    binary = tmp_path / "binary.jsonl"
    binary.write_bytes(b"\x00\xff" * 10)
    result = agentfly("view", binary)
    assert result.exit_code == 2 and "binary" in result.output
    assert len(result.output.strip().splitlines()) == 1


def test_view_imports_neither_torch_nor_transformers(evil_trajectories):
    """Showing a trajectory reads its tokenizer with `tokenizers` alone (9 s -> about 1 s)."""
    probe = (
        "import sys\n"
        "from agentfly_cli.cli.app import main\n"
        f"sys.argv = ['agentfly', 'view', {str(evil_trajectories)!r}]\n"
        "try:\n    main()\nexcept SystemExit as exit:\n    assert not exit.code, exit.code\n"
        "print('HEAVY', sorted(m for m in ('torch', 'transformers') if m in sys.modules))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe],
        capture_output=True,
        text=True,
        env={**os.environ, "HF_HUB_OFFLINE": "1"},
    )
    assert done.returncode == 0, done.stderr
    assert "trained" in done.stdout
    assert "HEAVY []" in done.stdout


def _tokenizer_sources(tiny_model):
    from tests.helpers.realdata_paths import REALDATA

    yield tiny_model
    for name in ("qwen2.5", "smollm2"):
        if (REALDATA / name / "tokenizer.json").is_file():
            yield REALDATA / name


def test_view_decodes_tokens_as_transformers_does(tiny_model):
    """The `tokenizers` library gives each token the text transformers' tokenizer gives it."""
    from transformers import AutoTokenizer

    from agentfly_cli.rollout.render import load_tokenizer_for, token_pieces
    from agentfly_cli.trajectory import Trajectory

    text = "<|im_start|>user\nWhat is 2 + 3? café 你好 🙂\n\tdone.<|im_end|>"
    for source in _tokenizer_sources(tiny_model):
        reference = AutoTokenizer.from_pretrained(str(source))
        trajectory = Trajectory(meta={"tokenizer": str(source)})
        trajectory.append("prompt", reference.encode(text), sampled=False)
        fast = load_tokenizer_for(trajectory)
        assert type(fast).__module__.startswith("tokenizers"), type(fast)
        ours = [p.text for p in token_pieces(trajectory, fast)]
        theirs = [p.text for p in token_pieces(trajectory, reference)]
        assert ours == theirs, source


def test_rollout_without_out_saves_under_runs_and_says_where(tiny_model, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    data = tmp_path / "data.jsonl"
    data.write_text(json.dumps({"question": "What is 2 + 3?", "answer": "5"}) + "\n")
    script = tmp_path / "script.jsonl"
    script.write_text(json.dumps({"responses": ["5"]}) + "\n")
    common = ["--model", tiny_model, "--backend", "scripted", "--script", script, "--data", data]
    first = agentfly("rollout", *common, "--quiet")
    assert first.exit_code == 0, first.output
    saved = sorted((tmp_path / "runs").glob("custom-rollout-*.jsonl"))
    assert len(saved) == 1 and len(saved[0].read_text().splitlines()) == 4  # n=4 by default
    assert f"trajectories: runs/{saved[0].name}" in first.stdout
    second = agentfly("rollout", *common, "--json")
    out = json.loads(second.stdout)["out"]
    assert out.startswith("runs/custom-rollout-") and (tmp_path / out).is_file()
    assert len(list((tmp_path / "runs").glob("*.jsonl"))) == 2  # the first one is kept


def test_lone_surrogate_in_tool_output_prints_in_both_modes(tmp_path):
    """A lone surrogate cannot be encoded as UTF-8: shown escaped, and as a JSON escape."""
    path = tmp_path / "surrogate_tools.py"
    path.write_text('def half() -> str:\n    """Half a pair."""\n    return "a \\ud800 b"\n')
    human = agentfly("tools", "call", f"{path}:half")
    assert human.exit_code == 0, human.output
    assert "a \\ud800 b" in human.stdout
    as_json = agentfly("tools", "call", f"{path}:half", "--json")
    assert as_json.exit_code == 0, as_json.output
    assert json.loads(as_json.stdout)["observation"] == "a \ud800 b"
