"""Env options are checked up front: a bad ``envs.python.options`` value is one line naming the
field, exit code 2, before any model is resolved or loaded (rollout, train, env up)."""

from __future__ import annotations

import json
import time

import pytest
from typer.testing import CliRunner

from agentfly_cli.cli.app import build_app
from agentfly_cli.envs.base import EnvSpec
from agentfly_cli.envs.manager import check_options
from agentfly_cli.errors import UserError
from envs_builtin.python_sandbox import PYTHON, PythonSandboxEnv

runner = CliRunner()


def agentfly(*arguments):
    return runner.invoke(build_app(), [str(a) for a in arguments])


@pytest.fixture
def files(tmp_path):
    data = tmp_path / "data.jsonl"
    data.write_text(json.dumps({"question": "What is 2 + 3?", "answer": "5"}) + "\n")
    script = tmp_path / "script.jsonl"
    script.write_text(json.dumps({"responses": ["ANSWER: 5"]}) + "\n")
    return data, script


BAD = [
    ("memory_mb=-5", "memory_mb: Input should be greater than or equal to 32 (got -5)"),
    ("memory_mb=abc", "memory_mb: Input should be a valid integer"),
    ("memory_mb=1.5", "memory_mb: Input should be a valid integer, got a number with a fractional"),
    ("cpu_seconds=0", "cpu_seconds: Input should be greater than 0 (got 0)"),
    ("cpu_seconds=.nan", "cpu_seconds: Input should be a finite number"),
    ("wall_seconds=true", "wall_seconds: must be a number, not true/false"),
    ("sandbox=docker", "sandbox: Input should be 'auto', 'bwrap' or 'none' (got 'docker')"),
    ("cpu_seconds_total=8", "cpu_seconds_total (8) must be at least cpu_seconds + 5"),
    ("memory_gb=3", "'memory_gb'"),
]


def one_line_error(result, *fragments: str) -> str:
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1, result.output
    assert lines[0].startswith("error: envs.python.options"), lines[0]
    for fragment in fragments:
        assert fragment in lines[0], lines[0]
    return lines[0]


@pytest.mark.parametrize(("setting", "message"), BAD)
def test_rollout_with_a_bad_python_option_stops_before_the_model(
    files, model_loads, setting, message
):
    data, script = files
    started = time.monotonic()
    result = agentfly(
        "rollout", "code_math", "--model", "tiny", "--backend", "scripted", "--script", script,
        "--data", data, "--set", f"envs.python.options.{setting}",
    )  # fmt: skip
    one_line_error(result, message)
    assert model_loads == []
    assert time.monotonic() - started < 10


def test_train_with_a_bad_python_option_stops_before_the_model(files, model_loads, tmp_path):
    result = agentfly(
        "train", "code_math", "--model", "tiny", "--data", files[0], "--out", tmp_path / "run",
        "--set", "envs.python.options.memory_mb=-5",
    )  # fmt: skip
    one_line_error(result, "memory_mb", "greater than or equal to 32")
    assert model_loads == []
    assert not (tmp_path / "run" / "metrics.jsonl").exists()


def test_env_up_with_a_bad_option_starts_no_server():
    result = agentfly("env", "up", "python", "--option", "disk_mb=0")
    one_line_error(result, "disk_mb: Input should be greater than or equal to 1 (got 0)")


def test_good_options_pass_and_reach_the_env():
    check_options(PYTHON, {"memory_mb": 300, "cpu_seconds": "2", "sandbox": "none"})
    env = PYTHON.create(memory_mb=300, cpu_seconds=2, sandbox="none")
    assert isinstance(env, PythonSandboxEnv) and (env.memory_mb, env.cpu_seconds) == (300, 2.0)


def test_any_spec_can_check_its_option_values():
    """``EnvSpec.validate_options``: a ValueError or a pydantic error becomes one line."""
    import pydantic

    class Options(pydantic.BaseModel):
        size: int = pydantic.Field(1, ge=1)

    def factory(size: int = 1):
        raise AssertionError("not made by a check")

    by_model = EnvSpec(name="sized", factory=factory, validate_options=Options.model_validate)
    with pytest.raises(UserError, match=r"^envs.sized.options: size: .*greater than or equal"):
        check_options(by_model, {"size": 0})

    def plain(options):
        if options.get("size", 1) > 9:
            raise ValueError("size: at most 9")

    by_function = EnvSpec(name="sized", factory=factory, validate_options=plain)
    with pytest.raises(UserError, match=r"^envs.sized.options: size: at most 9$"):
        check_options(by_function, {"size": 10})
    check_options(by_function, {"size": 3})
