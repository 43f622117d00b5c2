"""The verifiers bridge on verifiers 0.4 (Taskset/Harness): verifiers:TASKSET_ID with
``--set verifiers.api=0.4``, a real verifiers 0.4.0 in its own venv, the fixture taskset
vf04_echo run by the env's own SingleAgentEnv and null harness (verifiers' chat program, a uv
script synced offline at install) through the gateway with the scripted backend."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
VENV = ROOT / ".venv-verifiers-0.4"
INSTALL = "make install-verifiers"
if not (VENV / "bin" / "python").exists() or not (VENV / ".offline-ready").exists():
    pytest.skip(f"the verifiers 0.4 bridge needs its venv: {INSTALL}", allow_module_level=True)

from agentfly_cli.trajectory import read_trajectories  # noqa: E402
from tests.helpers.recipe_checks import agentfly, check_short_training_run  # noqa: E402

FIXTURE = Path(__file__).with_name("verifiers_fixtures") / "vf04_echo"
WORDS = ("apple", "pear", "plum", "fig")
API = ("--set", "verifiers.api=0.4", "--set", "verifiers.size=4")


@pytest.fixture(autouse=True)
def _venv(monkeypatch):
    monkeypatch.setenv("AGENTFLY_VERIFIERS_VENV_DIR", str(ROOT))
    monkeypatch.setenv("AGENTFLY_VERIFIERS_PATH", str(FIXTURE))


def _script(tmp_path, say, env="vf04-echo") -> Path:
    path = tmp_path / "script.jsonl"
    lines = [json.dumps({"id": f"{env}-{i}", "responses": [say(w)]}) for i, w in enumerate(WORDS)]
    path.write_text("\n".join(lines) + "\n")
    return path


def _check(out: Path, reward: float, count: int = 2) -> None:
    chains = read_trajectories(out)
    assert len(chains) == count
    for chain in chains:
        chain.check()
        assert chain.token_exact and chain.error is None and chain.reward == reward
        assert chain.num_turns == 1
        assert chain.reward_extras["metric/exact"] == reward  # the task's named reward
        expected = len(chain.task["answer"]) if reward else len("banana")
        assert chain.reward_extras["metric/reply_chars"] == expected  # its @vf.metric


@pytest.mark.parametrize(("say", "reward"), [(lambda w: w, 1.0), (lambda w: "banana", 0.0)])
def test_rollout_scores_by_the_taskset(tiny_model, tmp_path, say, reward):
    out = tmp_path / "rollout.jsonl"
    result = agentfly(
        "rollout", "verifiers:vf04-echo", *API, "--model", tiny_model,
        "--backend", "scripted", "--script", _script(tmp_path, say), "--limit", "2",
        "--n", "1", "--out", out, "--quiet",
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    _check(out, reward)


def _netns_works() -> bool:
    unshare = shutil.which("unshare")
    if not unshare:
        return False
    done = subprocess.run(
        [unshare, "-rn", "sh", "-c", "ip link set lo up"], capture_output=True, check=False
    )
    return done.returncode == 0


@pytest.mark.skipif(not _netns_works(), reason="needs unshare -rn (a network namespace)")
def test_an_episode_needs_no_network_beyond_loopback(tiny_model, tmp_path):
    """The whole rollout in a network namespace holding only loopback: the harness's uv
    script sync finds uv, its index and its cache locally."""
    out = tmp_path / "rollout.jsonl"
    command = [
        sys.executable, "-m", "agentfly_cli", "rollout", "verifiers:vf04-echo", *API,
        "--model", str(tiny_model), "--backend", "scripted",
        "--script", str(_script(tmp_path, lambda w: w)), "--limit", "1", "--n", "1",
        "--out", str(out), "--quiet",
    ]  # fmt: skip
    shell = "ip link set lo up && exec " + " ".join(f"'{part}'" for part in command)
    done = subprocess.run(
        ["unshare", "-rn", "sh", "-c", shell], capture_output=True, text=True,
        env={**os.environ, "HF_HUB_OFFLINE": "1"}, timeout=600, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    _check(out, 1.0, count=1)


def test_a_taskset_that_raises_fails_only_its_episode(tiny_model, tmp_path):
    out = tmp_path / "rollout.jsonl"
    result = agentfly(
        "rollout", "verifiers:vf04-flaky", *API, "--model", tiny_model,
        "--backend", "scripted", "--script", _script(tmp_path, lambda w: w, "vf04-flaky"),
        "--limit", "2", "--n", "1", "--out", out, "--quiet",
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    chains = {chain.task["answer"]: chain for chain in read_trajectories(out)}
    apple, pear = chains["apple"], chains["pear"]
    assert apple.error is None and apple.reward == 1.0 and apple.token_exact
    assert "the taskset broke on pear" in pear.error and pear.reward == 0.0
    assert pear.finish_reason == "abort" and pear.num_turns == 0  # it broke before the model


@pytest.mark.parametrize(("say", "gold"), [(lambda w: w, True), (lambda w: "banana", False)])
def test_eval_scores_the_held_out_tasks(tiny_model, tmp_path, say, gold):
    result = agentfly(
        "eval", "verifiers:vf04-echo", *API, "--set", "data.holdout=0.5",
        "--model", tiny_model, "--backend", "scripted", "--script", _script(tmp_path, say),
        "--n", "1", "--out", tmp_path / "eval.jsonl", "--json", "--quiet",
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)["eval"]
    assert len(report["tasks"]) == 2  # half of the taskset's 4 tasks held out
    assert report["overall"]["pass@1"] == (1.0 if gold else 0.0)


def test_train_takes_rl_steps_on_the_taskset(tiny_model, tmp_path):
    check_short_training_run("verifiers:vf04-echo", tiny_model, tmp_path, *API)


def test_bad_settings_are_one_line(tmp_path, monkeypatch):
    from agentfly_cli.errors import UserError
    from agentfly_cli.recipes.loader import load_config

    with pytest.raises(UserError, match="no-such-taskset"):
        load_config("verifiers:no-such-taskset", ["verifiers.api=0.4", "verifiers.size=2"])
    with pytest.raises(UserError, match="needs --set verifiers.api=0.4"):
        load_config("verifiers:vf04-echo", ["verifiers.harness=null"])
    with pytest.raises(UserError, match="harness 'nosuch' not found"):
        load_config("verifiers:vf04-echo", [*API[1::2], "verifiers.harness=nosuch"])
    bare = tmp_path / ".venv-verifiers-0.4" / "bin"  # a venv without the offline setup
    bare.mkdir(parents=True)
    (bare / "python").symlink_to(VENV / "bin" / "python")
    monkeypatch.setenv("AGENTFLY_VERIFIERS_VENV_DIR", str(tmp_path))
    with pytest.raises(UserError, match="offline harness setup.*make install-verifiers"):
        load_config("verifiers:vf04-echo", ["verifiers.api=0.4"])
