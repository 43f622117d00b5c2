"""``--agent`` without the ``serve`` extra (starlette, uvicorn): one line naming the install,
exit 2, before anything loads."""

from __future__ import annotations

import sys

import pytest

from agentfly_cli.errors import UserError
from agentfly_cli.recipes.loader import load_config
from agentfly_cli.rollout.from_settings import resolve_run
from tests.cli.test_cli_bad_input import agentfly, good, one_line_error  # noqa: F401

AGENT = "def agent(task, base_url):\n    return '5'\n"


@pytest.fixture
def agent_file(tmp_path):
    path = tmp_path / "agent.py"
    path.write_text(AGENT)
    return f"{path}:agent"


@pytest.fixture(params=["starlette", "uvicorn"])
def without_extra(request, monkeypatch):
    """One package of the serve extra cannot be imported (as when it is not installed)."""
    for name in [m for m in sys.modules if m == request.param or m.startswith(request.param + ".")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, request.param, None)
    return request.param


@pytest.mark.parametrize("command", ["rollout", "eval", "train"])
def test_an_agent_run_without_the_serve_extra_names_the_install(
    good,  # noqa: F811
    agent_file,
    without_extra,
    model_loads,
    command,
):
    data = good[0]
    extra = ("--out", str(data.parent / "run")) if command == "train" else ()
    result = agentfly(command, "--model", "tiny", "--data", data, "--reward", "exact_match",
                      "--agent", agent_file, *extra)  # fmt: skip
    line = one_line_error(result, without_extra, "pip install 'agentfly-cli[serve]'")
    assert "internal error" not in line
    assert model_loads == []
    assert not (data.parent / "run").exists()


def test_resolve_run_checks_the_extra_first(good, agent_file, without_extra, model_loads):  # noqa: F811
    config = load_config(
        None, model="tiny", **{"data.path": str(good[0]), "agent.entry": agent_file}
    )
    with pytest.raises(UserError, match=r"agentfly-cli\[serve\]"):
        resolve_run(config)
    assert model_loads == []


def test_a_run_without_an_agent_does_not_need_the_extra(good, without_extra, model_loads):  # noqa: F811
    with pytest.raises(AssertionError, match="a model was resolved"):
        resolve_run(load_config(None, model="tiny", **{"data.path": str(good[0])}))
