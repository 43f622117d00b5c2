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


def _script(tmp_path, say, env="vf-echo", turns=1) -> Path:
    path = tmp_path / "script.jsonl"
    lines = [
        json.dumps({"id": f"{env}-{i}", "responses": [say(w)] * turns}) for i, w in enumerate(WORDS)
    ]
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
        assert chain.reward_extras["metric/exact"] == reward  # the rubric's named metric


def test_an_env_that_raises_fails_only_its_episode(tiny_model, tmp_path):
    out = tmp_path / "rollout.jsonl"
    result = agentfly(
        "rollout", "verifiers:vf-flaky", "--set", "verifiers.size=4", "--model", tiny_model,
        "--backend", "scripted", "--script", _script(tmp_path, lambda w: w, "vf-flaky", 2),
        "--limit", "2", "--n", "1", "--out", out, "--quiet",
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    chains = {chain.task["answer"]: chain for chain in read_trajectories(out)}
    apple, pear = chains["apple"], chains["pear"]
    assert apple.error is None and apple.reward == 1.0 and apple.num_turns == 2
    assert "the env broke on pear" in pear.error and pear.reward == 0.0
    assert pear.finish_reason == "abort" and pear.num_turns == 1  # the turn before it broke
    for chain in chains.values():
        chain.check()
        assert chain.token_exact


@pytest.mark.parametrize(("say", "gold"), [(lambda w: w, True), (lambda w: "banana", False)])
def test_eval_scores_the_held_out_rows(tiny_model, tmp_path, say, gold):
    result = agentfly(
        "eval", "verifiers:vf-echo", "--set", "verifiers.size=4", "--set", "data.holdout=0.5",
        "--model", tiny_model, "--backend", "scripted", "--script", _script(tmp_path, say),
        "--n", "1", "--out", tmp_path / "eval.jsonl", "--json", "--quiet",
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)["eval"]
    assert len(report["tasks"]) == 2  # half of the env's 4 rows held out
    assert report["overall"]["pass@1"] == (1.0 if gold else 0.0)


def test_train_takes_rl_steps_on_the_env(tiny_model, tmp_path):
    run = tmp_path / "run"
    result = agentfly(
        "train", "verifiers:vf-echo", "--model", tiny_model, "--out", run, "--quiet",
        "--set", "verifiers.size=4", "--set", "trainer.steps=2",
        "--set", "trainer.tasks_per_step=2", "--set", "rollout.n=2",
        "--set", "rollout.max_tokens_per_turn=8", "--set", "trainer.eval.every=0",
        "--set", "trainer.telemetry.sinks=[jsonl]",
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    lines = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    assert [line["step"] for line in lines] == [1, 2]
    assert all(0.0 <= line["reward/mean"] <= 1.0 for line in lines)


PAIRS = ((2, 3), (4, 5), (10, 7), (6, 6))  # vf_tools' rows


def _call(a: int, b: int) -> str:
    return (
        "<tool_call>\n"
        + json.dumps({"name": "add", "arguments": {"a": a, "b": b}})
        + "\n</tool_call>"
    )


@pytest.mark.parametrize(
    ("replies", "reward"),
    [
        (lambda a, b: [_call(a, b), str(a + b)], 1.0),  # the tool, then its answer
        (lambda a, b: [str(a + b)], 0.0),  # the right number without the tool
        (lambda a, b: [_call(a, a), str(a + b)], 0.0),  # the tool on the wrong numbers
    ],
    ids=["gold", "no-tool", "wrong-call"],
)
def test_a_tool_env_runs_its_python_tool(tiny_model, tmp_path, replies, reward):
    script = tmp_path / "script.jsonl"
    lines = [{"id": f"vf-tools-{i}", "responses": replies(a, b)} for i, (a, b) in enumerate(PAIRS)]
    script.write_text("".join(json.dumps(line) + "\n" for line in lines))
    out = tmp_path / "rollout.jsonl"
    result = agentfly(
        "rollout", "verifiers:vf-tools", "--set", "verifiers.size=4", "--model", tiny_model,
        "--backend", "scripted", "--script", script, "--set", "chat.parser=hermes",
        "--limit", "2", "--n", "1", "--out", out, "--quiet",
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    chains = read_trajectories(out)
    assert len(chains) == 2
    for chain in chains:
        chain.check()
        assert chain.token_exact and chain.error is None and chain.reward == reward
        calls = 0 if len(replies(1, 1)) == 1 else 1
        assert chain.reward_extras["metric/add_calls"] == calls  # ToolEnv's own tool metric
        assert chain.num_turns == 1 + calls
        if calls:  # the gateway saw the call and the tool's result the env sent back
            (call,) = chain.tool_calls
            assert call.name == "add" and call.observation == str(sum(call.arguments.values()))


def test_a_missing_venv_or_env_is_one_line(tmp_path, monkeypatch):
    from agentfly_cli.errors import UserError
    from agentfly_cli.recipes.loader import load_config

    with pytest.raises(UserError, match="no-such-env"):
        load_config("verifiers:no-such-env", ["verifiers.size=2"])
    if (ROOT / ".venv-verifiers-0.4" / ".offline-ready").exists():  # a classic env is no taskset
        with pytest.raises(UserError, match="taskset 'vf-echo' not found"):
            load_config("verifiers:vf-echo", ["verifiers.api=0.4", "verifiers.size=2"])
    monkeypatch.setenv("AGENTFLY_VERIFIERS_VENV_DIR", str(tmp_path))
    with pytest.raises(UserError, match="make install-verifiers"):
        load_config("verifiers:vf-echo", ["verifiers.size=2"])
