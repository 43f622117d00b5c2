"""The verifiers bridge: verifiers:ENV_ID with a real verifiers 0.3.1 (classic API) in its own
venv, a fixture SingleTurnEnv (vf_echo), rollout through the gateway with the scripted backend:
gold scores 1 and junk 0 by the env's rubric, token-exactly."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
INSTALL = "make install-verifiers"
if not (ROOT / ".venv-verifiers-0.3" / "bin" / "python").exists():
    pytest.skip(f"the verifiers bridge needs its venv: {INSTALL}", allow_module_level=True)

from agentfly_cli.trajectory import read_trajectories  # noqa: E402
from tests.helpers.recipe_checks import agentfly  # noqa: E402

FIXTURE = Path(__file__).with_name("verifiers_fixtures") / "vf_echo"
WORDS = ("apple", "pear", "plum", "fig")


@pytest.fixture(autouse=True)
def _venv(monkeypatch):
    monkeypatch.setenv("AGENTFLY_VERIFIERS_VENV_DIR", str(ROOT))
    monkeypatch.setenv("AGENTFLY_VERIFIERS_PATH", str(FIXTURE))


def _script(tmp_path, say) -> Path:
    path = tmp_path / "script.jsonl"
    lines = [json.dumps({"id": f"vf-echo-{i}", "responses": [say(w)]}) for i, w in enumerate(WORDS)]
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.mark.parametrize(("say", "reward"), [(lambda w: w, 1.0), (lambda w: "banana", 0.0)])
def test_rollout_scores_by_the_rubric(tiny_model, tmp_path, say, reward):
    out = tmp_path / "rollout.jsonl"
    result = agentfly(
        "rollout", "verifiers:vf-echo", "--set", "verifiers.size=4", "--model", tiny_model,
        "--backend", "scripted", "--script", _script(tmp_path, say), "--limit", "2",
        "--n", "1", "--out", out, "--quiet",
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    chains = read_trajectories(out)
    assert len(chains) == 2
    for chain in chains:
        chain.check()
        assert chain.token_exact and chain.reward == reward and chain.error is None


def test_a_missing_venv_or_env_is_one_line(tmp_path, monkeypatch):
    from agentfly_cli.errors import UserError
    from agentfly_cli.recipes.loader import load_config

    with pytest.raises(UserError, match="no-such-env"):
        load_config("verifiers:no-such-env", ["verifiers.size=2"])
    monkeypatch.setenv("AGENTFLY_VERIFIERS_VENV_DIR", str(tmp_path))
    with pytest.raises(UserError, match="make install-verifiers"):
        load_config("verifiers:vf-echo", ["verifiers.size=2"])
