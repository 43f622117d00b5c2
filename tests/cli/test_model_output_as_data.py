"""Model output is data (issue 15, items 3 and 4), end to end through the CLI: lone surrogates
never end `agentfly rollout` or `agentfly train`, and a run in which every chain aborts says so
in one line and a non-zero exit code."""

from __future__ import annotations

import json
import re
import socket

import pytest
from typer.testing import CliRunner

from agentfly_cli.cli.app import build_app
from agentfly_cli.trajectory import read_trajectories

runner = CliRunner()

ECHO_TOOL = '''
from agentfly_cli.components.tools import tool


@tool
def echo(text: str) -> str:
    """Say the text back.

    Args:
        text: What to say.
    """
    return "heard: " + text
'''

# A parser that reads every turn as one call of echo with a lone surrogate in its argument, as
# a model produces by writing the JSON escape "\\ud800": the train test needs no luck in sampling.
SURROGATE_PARSER = """
from agentfly_cli.chat.parser_output import BaseParser, ParsedResponse, ToolCall


class SurrogateParser(BaseParser):
    name = "surrogate"

    def parse_body(self, body):
        return ParsedResponse(body, [ToolCall("echo", {"text": "lone \\ud800 surrogate"})])
"""

# ChatML that rejects a system message: it loads (its probes have none) and then fails to
# render every real conversation of a recipe with a system prompt.
NO_SYSTEM_TEMPLATE = """
{%- for m in messages -%}
{%- if m['role'] == 'system' -%}{{ raise_exception('this template has no system role') }}
{%- endif -%}
{{ '<|im_start|>' ~ m['role'] ~ '\\n' ~ (m['content'] or '') ~ '<|im_end|>\\n' }}
{%- endfor -%}
{%- if add_generation_prompt -%}{{ '<|im_start|>assistant\\n' }}{%- endif -%}
"""


def agentfly(*arguments):
    return runner.invoke(build_app(), [str(a) for a in arguments])


def one_line_error(result) -> str:
    lines = [line for line in result.output.splitlines() if line.strip()]
    errors = [line for line in lines if line.startswith("error:")]
    assert len(errors) == 1 and "Traceback" not in result.output, result.output
    return errors[0]


def call(name: str, arguments_json: str) -> str:
    return f'<tool_call>\n{{"name": "{name}", "arguments": {arguments_json}}}\n</tool_call>'


@pytest.fixture
def files(tmp_path):
    data = tmp_path / "data.jsonl"
    rows = [{"id": "t0", "question": "What is 2 + 3?", "answer": "5"}]
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    (tmp_path / "echo_tool.py").write_text(ECHO_TOOL)
    return tmp_path, data


def scripted(tmp_path, data, tiny_model, responses, *extra):
    script = tmp_path / "script.jsonl"
    script.write_text(json.dumps({"responses": responses}) + "\n")
    return [
        "rollout",
        "--model", tiny_model, "--backend", "scripted", "--script", script, "--data", data,
        "--tools", f"calculator,answer,{tmp_path / 'echo_tool.py'}:echo", "--reward",
        "math_equal", "--parser", "hermes", "--n", "2", "--out", tmp_path / "out.jsonl", *extra,
    ]  # fmt: skip


def test_rollout_keeps_lone_surrogates_as_data_and_writes_valid_utf8(tiny_model, files):
    tmp_path, data = files
    responses = [
        # the JSON escape decodes to a lone surrogate, in a calculator argument and in text
        # that comes back as an observation
        call("calculator", '{"expression": "\\ud800"}')
        + call("echo", '{"text": "x\\udfff\\ud83d\\ude00y"}'),
        call("answer", '{"answer": "5\\ud800"}'),
    ]
    result = agentfly(*scripted(tmp_path, data, tiny_model, responses), "-q")
    assert result.exit_code == 0, result.output
    raw = (tmp_path / "out.jsonl").read_bytes()
    raw.decode("utf-8")  # strict: the file is valid UTF-8
    trajectories = read_trajectories(tmp_path / "out.jsonl")
    assert len(trajectories) == 2
    for trajectory in trajectories:
        trajectory.check()  # ids, loss mask and sampled ids still agree exactly
        assert trajectory.finish_reason == "terminal_tool"
        calculator, echo, answer = trajectory.tool_calls
        # the arguments read back exactly as the model wrote them
        assert calculator.arguments == {"expression": "\ud800"}
        assert echo.arguments == {"text": "x\udfff\U0001f600y"}
        # what the model read went through its tokenizer, with U+FFFD for the surrogate
        assert echo.status == "ok" and echo.observation == "heard: x\ufffd\U0001f600y"
        assert answer.observation == "5\ufffd" and trajectory.prediction == "5\ufffd"
        tool_messages = [m for m in trajectory.messages if m["role"] == "tool"]
        assert "heard: x\ufffd\U0001f600y" in [m["content"] for m in tool_messages]


# every token of the tiny model's vocabulary holds one of these: each turn ends after a token
# or two, on a stop token, so that its (parsed) call runs whatever the model samples
STOP_AT_ANY_TOKEN = "rollout.stop=" + json.dumps(
    [*"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789 .,:;!?-_()\n", "\ufffd"]
)


def test_train_step_survives_lone_surrogates(tiny_model, files):
    tmp_path, data = files
    (tmp_path / "surrogate_parser.py").write_text(SURROGATE_PARSER)
    run_dir = tmp_path / "run"
    result = agentfly(
        "train", "--model", tiny_model, "--data", data, "--steps", "1", "--out", run_dir, "-q",
        "--tools", f"answer,{tmp_path / 'echo_tool.py'}:echo",
        "--set", f"chat.parser={tmp_path / 'surrogate_parser.py'}:SurrogateParser",
        "--set", "rollout.n=2", "--set", "rollout.max_turns=2", "--set", STOP_AT_ANY_TOKEN,
        "--set", "rollout.max_tokens_per_turn=8", "--set", "trainer.tasks_per_step=1",
        "--set", "trainer.telemetry.sinks=[jsonl]",
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    (written,) = (run_dir / "trajectories").glob("step-*.jsonl")
    written.read_bytes().decode("utf-8")
    trajectories = read_trajectories(written)
    assert len(trajectories) == 2
    for trajectory in trajectories:
        assert trajectory.finish_reason == "max_turns", trajectory.error
        assert trajectory.tool_calls[0].arguments == {"text": "lone \ud800 surrogate"}
        assert trajectory.tool_calls[0].observation == "heard: lone \ufffd surrogate"
    metrics = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert metrics[-1]["tools/calls/echo"] == 4.0


# -- a run where nothing works says so ---------------------------------------------------------
def test_rollout_whose_chains_all_abort_is_one_line_and_exit_2(tiny_model, files):
    tmp_path, data = files
    template = tmp_path / "no_system.jinja"
    template.write_text(NO_SYSTEM_TEMPLATE)
    arguments = scripted(tmp_path, data, tiny_model, [call("answer", '{"answer": "5"}')])
    result = agentfly(
        *arguments, "--template", template, "--set", "chat.system_prompt=Be brief.", "-q"
    )
    assert result.exit_code == 2, result.output
    line = one_line_error(result)
    assert "all 2 chains of the rollout aborted" in line
    assert "ChatTemplateError" in line and "no system role" in line
    assert "--template" in line  # the fix
    # the trajectories are still written, for `agentfly view`
    assert [t.finish_reason for t in read_trajectories(tmp_path / "out.jsonl")] == ["abort"] * 2


def _closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]  # closed again when the block ends


def test_rollout_against_a_dead_server_is_one_line_and_exit_2(tiny_model, files):
    tmp_path, data = files
    result = agentfly(
        "rollout", "--model", tiny_model, "--backend", "openai", "--data", data,
        "--base-url", f"http://127.0.0.1:{_closed_port()}/v1", "--tools", "calculator,answer",
        "--parser", "hermes", "--n", "2", "-q",
    )  # fmt: skip
    assert result.exit_code != 0, result.output
    line = one_line_error(result)
    assert "all 2 chains of the rollout aborted" in line
    assert "ServerError" in line and "start the server" in line


def test_a_rollout_where_some_chains_abort_still_succeeds(tiny_model, files, tmp_path):
    _, data = files
    rows = [{"id": "t0", "question": "2 + 3?", "answer": "5"}, {"id": "t1", "question": "?"}]
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    # task 1 has no line in the script: its chains abort, task 0's chains answer
    arguments = scripted(tmp_path, data, tiny_model, [call("answer", '{"answer": "5"}')])
    arguments[arguments.index("math_equal") - 1 : arguments.index("math_equal") + 1] = []
    result = agentfly(*arguments, "--json")
    assert result.exit_code == 0, result.output
    summary = json.loads(result.output)["summary"]
    assert summary["finish_reasons"] == {"terminal_tool": 2, "abort": 2}


def test_training_step_whose_chains_all_abort_is_one_line_and_exit_2(tiny_model, files):
    tmp_path, data = files
    template = tmp_path / "no_system.jinja"
    template.write_text(NO_SYSTEM_TEMPLATE)
    result = agentfly(
        "train", "--model", tiny_model, "--data", data, "--steps", "2",
        "--out", tmp_path / "run", "-q", "--set", f"chat.template={template}",
        "--set", "rollout.n=2", "--set", "trainer.tasks_per_step=1",
    )  # fmt: skip
    assert result.exit_code == 2, result.output
    line = one_line_error(result)
    assert re.search(r"all 2 chains of the training step \d+ aborted", line), line
    assert "ChatTemplateError" in line and "--template" in line


def test_held_out_eval_whose_chains_all_abort_is_one_line_and_exit_2(tiny_model, files):
    tmp_path, data = files
    template = tmp_path / "no_system.jinja"
    template.write_text(NO_SYSTEM_TEMPLATE)
    rows = [{"id": f"t{i}", "question": f"{i} + 1?", "answer": str(i + 1)} for i in range(4)]
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    result = agentfly(
        "train", "--model", tiny_model, "--data", data, "--steps", "2",
        "--out", tmp_path / "run", "-q", "--set", f"chat.template={template}",
        "--set", "rollout.n=2", "--set", "trainer.tasks_per_step=1",
        "--set", "trainer.eval.every=1", "--set", "data.holdout=0.5",
        "--set", "trainer.eval.n=2",
    )  # fmt: skip
    assert result.exit_code == 2, result.output
    line = one_line_error(result)
    assert "all 4 chains of the held-out eval aborted" in line, line
    assert "ChatTemplateError" in line and "--template" in line
    # the eval's trajectories are still written, for `agentfly view`
    written = read_trajectories(tmp_path / "run" / "trajectories" / "eval-000000.jsonl")
    assert [t.finish_reason for t in written] == ["abort"] * 4


# -- the JSON line writer ----------------------------------------------------------------------
@pytest.mark.parametrize(
    "text", ["\ud800", "a\udfffb", "\ud83d", "caf\u00e9 \U0001f600", "\\ud800", '"\ud800"']
)
def test_json_lines_are_utf8_and_read_back_exactly(text):
    from agentfly_cli.files.surrogates import json_line

    line = json_line({"k\ud800": [text, {"x": text}]})
    line.encode("utf-8")  # strict
    assert json.loads(line) == {"k\ud800": [text, {"x": text}]}
    assert "\\ud800" not in json_line("\u00e9") and "\u00e9" in json_line("\u00e9")  # readable


def test_write_trajectories_round_trips_surrogates(tmp_path):
    from agentfly_cli.trajectory import ToolCallRecord, Trajectory, write_trajectories

    record = ToolCallRecord(0, "c", "echo", {"text": "\ud800"}, "heard", "ok")
    trajectory = Trajectory(tool_calls=[record], prediction="x\udc00", task={"q": "\ud800"})
    write_trajectories(tmp_path / "t.jsonl", [trajectory])
    [back] = read_trajectories(tmp_path / "t.jsonl")
    assert back.to_dict() == trajectory.to_dict()
