"""The openenv bridge against a real OpenEnv server (tests/bridges/openenv_server.py, run by
.venv-openenv's openenv-core): openenv:URL as a recipe, rollout, eval and train on the tiny
model with gold and junk, over WebSocket and HTTP, the pool bounded by the server's sessions,
and a dead server as an error, not a hang."""

from __future__ import annotations

import json
import sys
import time

import pytest

from tests.bridges.openenv_servers import INSTALL, SERVER_PYTHON
from tests.bridges.openenv_servers import start_server as start

if not SERVER_PYTHON.exists():
    pytest.skip(INSTALL, allow_module_level=True)

from agentfly_cli.errors import UserError  # noqa: E402
from agentfly_cli.recipes.loader import load_config  # noqa: E402
from agentfly_cli.trajectory import read_trajectories  # noqa: E402
from tests.helpers.recipe_checks import agentfly, write_jsonl  # noqa: E402

SESSIONS = 2


def start_server(sessions: int):
    return start("openenv_server.py", sessions)


@pytest.fixture(scope="module")
def server():
    process, url = start_server(SESSIONS)
    yield url
    process.terminate()
    process.wait(10)


def recipe(url: str) -> str:
    return f"openenv:{url.removeprefix('http://')}"


def sets(transport: str = "ws") -> list[str]:
    return ["openenv.size=20", f"openenv.sessions={SESSIONS}", f"openenv.transport={transport}"]


def flags(transport: str = "ws") -> list[str]:
    return [part for item in sets(transport) for part in ("--set", item)]


def rows_of(config) -> list[dict]:
    return [json.loads(line) for line in open(config.data.path)]


def secret(row: dict) -> int:
    return row["seed"] % 8 + 1


def test_a_server_is_a_recipe_whose_env_speaks_first(server):
    config = load_config(recipe(server), sets())
    rows = rows_of(config)
    assert [r["seed"] for r in rows] == list(range(20))
    assert all(r["url"] == server and r["field"] == "guess" for r in rows)  # from /schema
    assert config.rollout.opening_env == "openenv" and config.tools == ["openenv_act"]
    assert [c.name for c in config.reward] == ["env_reward"]
    assert config.envs["openenv"].pool_max == SESSIONS


@pytest.mark.parametrize(
    ("param", "options", "message"),
    [
        ("localhost", [], "give the server as openenv:HOST:PORT"),
        ("127.0.0.1:9", [], "start the server first"),
        ("remote", ["openenv.url=ftp://x"], "or --set openenv.url=http"),
        (None, ["openenv.transport=udp"], "give ws or http"),
        (None, ["openenv.sessions=0"], "openenv.sessions=0: give a whole number >= 1"),
        (None, ["openenv.colour=red"], "unknown option of openenv"),
    ],
)
def test_bad_recipes_are_one_line(server, param, options, message):
    with pytest.raises(UserError, match=message):
        load_config(param and f"openenv:{param}" or recipe(server), options)


def _script(tmp_path, config, moves) -> str:
    rows = [{"id": row["id"], "responses": moves(row)} for row in rows_of(config)]
    return str(write_jsonl(tmp_path / "script.jsonl", rows))


def _common(tiny_model, tmp_path, config, moves, transport="ws") -> list[str]:
    script = _script(tmp_path, config, moves)
    return ["--model", tiny_model, "--backend", "scripted", "--script", script,
            *flags(transport), "--n", "2", "--quiet"]  # fmt: skip


@pytest.mark.parametrize(
    ("moves", "gold"),
    [
        (lambda row: [f"ACT: {secret(row)}"], True),
        (lambda row: ["ACT: 0"] * 6, False),  # never right: four tries, then over
        (lambda row: ["I do not know."], False),  # no action at all
    ],
    ids=["gold", "junk", "no-action"],
)
def test_rollout_and_eval_over_websocket(server, tiny_model, tmp_path, moves, gold):
    config = load_config(recipe(server), sets())
    common = _common(tiny_model, tmp_path, config, moves)
    out = tmp_path / "rollout.jsonl"
    # 8 chains on a server of 2 sessions: the pool keeps to 2, so none is refused
    result = agentfly("rollout", recipe(server), "--limit", "4", "--out", out, *common)
    assert result.exit_code == 0, result.output
    chains = read_trajectories(out)
    assert len(chains) == 8
    for chain in chains:
        chain.check()
        assert chain.messages[1]["content"].startswith("Guess my number")  # the server's reset
        if gold:
            assert chain.finish_reason == "env_done" and chain.reward == 1.0
        else:
            assert chain.reward < 1.0
    evaluated = agentfly("eval", recipe(server), "--out", tmp_path / "eval.jsonl", "--json",
                         *common)  # fmt: skip
    assert evaluated.exit_code == 0, evaluated.output
    report = json.loads(evaluated.stdout)["eval"]
    assert len(report["tasks"]) == 2  # 10% of 20: the held-out episodes
    assert (report["overall"]["pass@1"] == 1.0) is gold


def test_http_is_stateless_one_step_episodes(server, tiny_model, tmp_path):
    # over HTTP each request gets a fresh server env (seed 0's secret, 1): one step episodes
    config = load_config(recipe(server), sets("http"))
    for guess, reward in (("1", 1.0), ("2", 0.0)):  # a wrong one is never done: 10 turns
        moves = lambda row, g=guess: [f"ACT: {g}"] * 10  # noqa: E731
        common = _common(tiny_model, tmp_path, config, moves, "http")
        out = tmp_path / f"http-{guess}.jsonl"
        result = agentfly("rollout", recipe(server), "--limit", "2", "--out", out, *common)
        assert result.exit_code == 0, result.output
        chains = read_trajectories(out)
        assert [c.reward for c in chains] == [reward] * 4
        assert all(c.env_reports[-1]["reward"] == reward for c in chains)


def test_train_takes_rl_steps_on_the_server(server, tiny_model, tmp_path):
    run = tmp_path / "run"
    result = agentfly(
        "train", recipe(server), "--model", tiny_model, "--out", run, "--quiet", *flags(),
        "--set", "trainer.steps=2", "--set", "trainer.tasks_per_step=2", "--set", "rollout.n=2",
        "--set", "rollout.max_turns=3", "--set", "rollout.max_tokens_per_turn=8",
        "--set", "trainer.eval.every=0", "--set", "trainer.telemetry.sinks=[jsonl]",
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    lines = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    assert [line["step"] for line in lines] == [1, 2]
    assert all(0.0 <= line["reward/mean"] <= 1.0 for line in lines)


def test_a_dead_server_is_an_error_per_episode_not_a_hang(tiny_model, tmp_path):
    process, url = start_server(1)
    try:
        config = load_config(recipe(url), ["openenv.size=20"])
    finally:
        process.terminate()
        process.wait(10)
    # the field given: the recipe builds without asking the (now dead) server for its schema
    script = _script(tmp_path, config, lambda row: [f"ACT: {secret(row)}"])
    out = tmp_path / "dead.jsonl"
    started = time.monotonic()
    result = agentfly("rollout", recipe(url), "--limit", "2", "--out", out, "--model",
                      tiny_model, "--backend", "scripted", "--script", script,
                      "--set", "openenv.size=20", "--set", "openenv.field=guess",
                      "--n", "1", "--quiet")  # fmt: skip
    assert time.monotonic() - started < 60
    print(result.output, file=sys.stderr)
    chains = read_trajectories(out) if out.exists() else []
    assert len(chains) == 2, result.output
    for chain in chains:
        assert chain.reward in (None, 0.0) and chain.finish_reason != "env_done"
        assert "Connect call failed" in json.dumps(chain.to_dict() if hasattr(chain, "to_dict")
                                                   else str(chain))  # fmt: skip


def test_a_stuck_server_times_out_and_a_full_one_says_so():
    import asyncio

    from bridges_builtin.openenv_client import OpenEnvError, session
    from bridges_builtin.openenv_env import OpenEnvEnv, openenv_act

    process, url = start_server(1)
    task = {"url": url, "seed": 2, "field": "guess", "timeout": 2.0}

    async def play() -> tuple[float, object]:
        env = OpenEnvEnv()
        await env.reset(task)
        started = time.monotonic()
        with pytest.raises(OpenEnvError, match="did not answer within 2 s"):
            await env.step("sleep")  # the server's step sleeps 60 s
        waited = time.monotonic() - started
        # the stuck step still holds the server's one session
        with pytest.raises(OpenEnvError, match="CAPACITY_REACHED"):
            await env.reset(task)
        env._session = session(url, "http", 2.0)  # over HTTP, through the tool
        result = await openenv_act(action="sleep", env=env)  # the tool: an error, and done
        await env.close()
        return waited, result

    try:
        waited, result = asyncio.run(play())
    finally:
        process.kill()
        process.wait(10)
    assert waited < 10
    assert (
        not result.ok
        and result.info["done"] is True
        and "did not answer within 2 s" in result.observation
    )


def _check(server, tiny_model, *extra: str):
    return agentfly("recipes", "check", recipe(server), "--model", tiny_model, "--limit", "4",
                    "--json", *flags(), *extra)  # fmt: skip


def test_recipes_check_plays_a_given_gold_against_junk(server, tiny_model):
    gold = "openenv.gold=tests.bridges.openenv_gold:right_guess"
    result = _check(server, tiny_model, "--set", gold)
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)["recipes"][0]
    assert report["tasks_checked"] == 4 and report["flagged_count"] == 0
    assert report["gold"]["min"] == 1.0
    assert {"empty", "dont_know", "wrong_answer", "other_task"} <= set(report["junk"])
    assert all(kind["max"] == 0.0 for kind in report["junk"].values())


def test_recipes_check_flags_a_wrong_gold(server, tiny_model):
    gold = "openenv.gold=tests.bridges.openenv_gold:always_one"
    result = _check(server, tiny_model, "--set", gold)
    assert result.exit_code == 1, result.output
    report = json.loads(result.stdout)["recipes"][0]
    flagged = {task["task"] for task in report["flagged"]}
    assert flagged == {"openenv-s1", "openenv-s2", "openenv-s3"}  # secret 1 is seed 0's only
    assert all("under the min-gold" in task["reasons"][0] for task in report["flagged"])


def test_recipes_check_without_gold_says_how_to_give_one(server, tiny_model):
    result = _check(server, tiny_model)
    assert result.exit_code == 2
    assert f"no gold answers for {recipe(server)} (the server ships none)" in result.output
    assert "--set openenv.gold=MODULE:FUNCTION" in result.output
    with pytest.raises(UserError, match="give MODULE:FUNCTION"):
        load_config(recipe(server), [*sets(), "openenv.gold=ACT: 3"])
