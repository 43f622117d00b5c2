"""The openenv bridge against a real OpenEnv MCP tool server (tests/bridges/openenv_mcp_server.py,
openenv-core's MCPEnvironment with FastMCP tools, run by .venv-openenv): the server's tools
listed at build time as each row's tools, the model's Hermes calls sent as call_tool steps on
the episode's own session, the server's reward; rollout, eval, train and recipes check on the
tiny model with gold and junk; a server with no tools or none at all as one line."""

from __future__ import annotations

import json

import pytest

from tests.bridges.openenv_servers import INSTALL, SERVER_PYTHON, free_port, start_server

if not SERVER_PYTHON.exists():
    pytest.skip(INSTALL, allow_module_level=True)

from agentfly_cli.chat.templates import ChatTemplate  # noqa: E402
from agentfly_cli.errors import UserError  # noqa: E402
from agentfly_cli.recipes.loader import load_config  # noqa: E402
from agentfly_cli.rollout.summary import summarize  # noqa: E402
from agentfly_cli.rollout.task_tool_schemas import normalize_tools  # noqa: E402
from agentfly_cli.trajectory import read_trajectories  # noqa: E402
from tests.bridges.openenv_mcp_gold import tool_call  # noqa: E402
from tests.helpers.recipe_checks import (  # noqa: E402
    agentfly,
    check_short_training_run,
    write_jsonl,
)

SESSIONS = 2
SCRIPT = "openenv_mcp_server.py"


@pytest.fixture(scope="module")
def server():
    process, url = start_server(SCRIPT, SESSIONS)
    yield url
    process.terminate()
    process.wait(10)


def recipe(url: str) -> str:
    return f"openenv:{url.removeprefix('http://')}"


def sets() -> list[str]:
    return ["openenv.size=20", f"openenv.sessions={SESSIONS}"]


def flags() -> list[str]:
    return [part for item in sets() for part in ("--set", item)]


def rows_of(config) -> list[dict]:
    return [json.loads(line) for line in open(config.data.path)]


def secret(row: dict) -> int:
    return row["seed"] % 8 + 1


def test_an_mcp_server_is_a_recipe_of_its_tools(server):
    config = load_config(recipe(server), sets())  # MCP: found by the server's /schema
    rows = rows_of(config)
    assert [r["seed"] for r in rows] == list(range(20))
    tools = rows[0]["tools"]
    assert all(r["mode"] == "mcp" and r["tools"] == tools for r in rows)
    by_name = {t["function"]["name"]: t["function"] for t in tools}
    assert sorted(by_name) == ["guess", "hint"]
    assert by_name["guess"]["description"] == "Guess the secret number (from 1 to 8)."
    parameters = by_name["guess"]["parameters"]
    assert parameters["properties"]["number"]["type"] == "integer"
    assert parameters["required"] == ["number"]
    assert by_name["hint"]["parameters"]["properties"] == {}
    assert config.tools == [] and config.rollout.opening_env == "openenv"
    assert config.rollout.task_tools.on_call == "env" and config.rollout.task_tools.env == "openenv"
    assert (config.chat.template, config.chat.parser) == ("chatml-tools", "hermes")
    assert [c.name for c in config.reward] == ["env_reward"]
    assert config.envs["openenv"].pool_max == SESSIONS
    # the same server played with ACT: lines when asked
    plain = load_config(recipe(server), [*sets(), "openenv.mode=act"])
    assert plain.tools == ["openenv_act"] and "tools" not in rows_of(plain)[0]


def _common(tiny_model, tmp_path, config, moves) -> list[str]:
    rows = [{"id": row["id"], "responses": moves(row)} for row in rows_of(config)]
    script = write_jsonl(tmp_path / "script.jsonl", rows)
    return ["--model", tiny_model, "--backend", "scripted", "--script", script, *flags(),
            "--n", "2", "--quiet"]  # fmt: skip


def _rendered_ids(chat: ChatTemplate, chain, tools: list[dict]) -> list[int]:
    """The template's own tokens of the chain's conversation, the row's tools rendered."""
    messages = [{k: v for k, v in m.items() if k not in ("tool_calls", "reasoning_content")}
                for m in chain.messages]  # fmt: skip
    while messages and messages[-1]["role"] != "assistant":
        messages.pop()  # the last observation has no tokens: no turn follows it
    text = chat.render_text(messages, tools)
    rendered = chat.tokenizer(text, add_special_tokens=False)["input_ids"]
    assert chat.decode(rendered[len(chain.ids) :]).strip() == ""
    return rendered[: len(chain.ids)]


def _wrong(row: dict) -> list[str]:
    return [tool_call("guess", number=secret(row) % 8 + 1)] * 4  # four wrong guesses: over


def _repaired(row: dict) -> list[str]:  # a bad call, a server-side error, then the right one
    return [tool_call("guess", number="three"), tool_call("guess", number=9),
            tool_call("hint"), tool_call("guess", number=secret(row))]  # fmt: skip


@pytest.mark.parametrize(
    ("moves", "reward"),
    [
        (lambda row: [tool_call("guess", number=secret(row))], 1.0),
        (_repaired, 1.0),
        (_wrong, 0.0),
        (lambda row: ["I do not know."], None),  # no call at all: an answer, no report
    ],
    ids=["gold", "errors-then-gold", "junk", "no-call"],
)
def test_rollout_sends_the_model_calls_to_its_own_session(
    server, tiny_model, tmp_path, moves, reward
):
    config = load_config(recipe(server), sets())
    out = tmp_path / "rollout.jsonl"
    common = _common(tiny_model, tmp_path, config, moves)
    result = agentfly("rollout", recipe(server), "--limit", "4", "--out", out, *common)
    assert result.exit_code == 0, result.output
    chains = read_trajectories(out)
    assert len(chains) == 8  # 8 chains on a server of 2 sessions: the pool keeps to 2
    chat = ChatTemplate.load(str(tiny_model), "chatml-tools")
    tools = normalize_tools(rows_of(config)[0]["tools"])
    for chain in chains:
        chain.check()
        assert chain.ids == _rendered_ids(chat, chain, tools)  # token-exact, tools rendered
        assert chain.messages[1]["content"].startswith("Guess my number")  # the server's reset
        if reward == 1.0:
            assert chain.finish_reason == "env_done" and chain.reward == 1.0
            assert chain.tool_calls[-1].observation == "Right!"
        elif reward == 0.0:
            assert chain.finish_reason == "env_done" and chain.reward == 0.0
            assert [c.info["done"] for c in chain.tool_calls] == [False] * 3 + [True]
        else:
            assert chain.finish_reason == "answer" and not chain.tool_calls
            assert chain.reward in (None, 0.0)
    if moves is _repaired:
        first = chains[0].tool_calls
        assert [c.status for c in first] == ["error", "error", "ok", "ok"]
        assert first[0].error_kind == "invalid_arguments"  # checked against the tool's schema
        assert "9 is not from 1 to 8" in first[1].observation  # the server's own error
        assert first[2].observation in ("It is odd.", "It is even.")
        kinds = summarize(chains)["error_kinds"]
        assert kinds["invalid_arguments"] == 8 and sum(kinds.values()) == 16  # all counted


@pytest.mark.parametrize(("gold", "score"), [(True, 1.0), (False, 0.0)], ids=["gold", "junk"])
def test_eval_scores_the_held_out_episodes(server, tiny_model, tmp_path, gold, score):
    config = load_config(recipe(server), sets())
    moves = (lambda row: [tool_call("guess", number=secret(row))]) if gold else _wrong
    common = _common(tiny_model, tmp_path, config, moves)
    result = agentfly("eval", recipe(server), "--out", tmp_path / "eval.jsonl", "--json", *common)
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)["eval"]
    assert len(report["tasks"]) == 2  # 10% of 20
    assert report["overall"]["pass@1"] == score


def test_train_takes_rl_steps_on_the_mcp_server(server, tiny_model, tmp_path):
    check_short_training_run(
        recipe(server), tiny_model, tmp_path, *flags(),
        "--set", "rollout.max_turns=3", "--set", "rollout.max_tokens_per_turn=16",
    )  # fmt: skip


def test_recipes_check_plays_a_given_gold_call_against_junk(server, tiny_model):
    gold = "openenv.gold=tests.bridges.openenv_mcp_gold:right_call"
    result = agentfly("recipes", "check", recipe(server), "--model", tiny_model, "--limit", "4",
                      "--json", *flags(), "--set", gold)  # fmt: skip
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)["recipes"][0]
    assert report["tasks_checked"] == 4 and report["flagged_count"] == 0
    assert report["gold"]["min"] == 1.0
    assert {"empty", "dont_know", "wrong_answer", "other_task"} <= set(report["junk"])
    assert all(kind["max"] == 0.0 for kind in report["junk"].values())


def _one_line_exit_2(param: str, *options: str, message: str) -> None:
    result = agentfly("rollout", param, "--model", "tiny", "--limit", "1",
                      *[p for o in options for p in ("--set", o)])  # fmt: skip
    assert result.exit_code == 2, result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and message in lines[0], result.output
    assert "Traceback" not in result.output


def test_a_server_with_no_tools_is_one_line():
    process, url = start_server(SCRIPT, 1, "notools")
    try:
        _one_line_exit_2(recipe(url), "openenv.size=4",
                         message=f"the MCP server at {url} lists no tools")  # fmt: skip
    finally:
        process.terminate()
        process.wait(10)


def test_a_server_under_the_bare_action_is_mcp_when_asked(tiny_model, tmp_path):
    process, url = start_server(SCRIPT, SESSIONS, "bare")  # /schema: Action, not found MCP
    try:
        assert load_config(recipe(url), sets()).tools == ["openenv_act"]
        config = load_config(recipe(url), [*sets(), "openenv.mode=mcp"])
        assert [t["function"]["name"] for t in rows_of(config)[0]["tools"]] == ["guess", "hint"]
        moves = lambda row: [tool_call("guess", number=secret(row))]  # noqa: E731
        common = _common(tiny_model, tmp_path, config, moves)
        out = tmp_path / "bare.jsonl"
        result = agentfly("rollout", recipe(url), "--limit", "2", "--out", out, *common,
                          "--set", "openenv.mode=mcp")  # fmt: skip
        assert result.exit_code == 0, result.output
        assert [c.reward for c in read_trajectories(out)] == [1.0] * 4
    finally:
        process.terminate()
        process.wait(10)


def test_an_unreachable_or_http_mcp_server_is_one_line(server):
    dead = f"127.0.0.1:{free_port()}"
    _one_line_exit_2(f"openenv:{dead}", "openenv.mode=mcp",
                     message="start the MCP server first")  # fmt: skip
    with pytest.raises(UserError, match="needs --set openenv.transport=ws"):
        load_config(recipe(server), [*sets(), "openenv.transport=http"])
    with pytest.raises(UserError, match="give act .* or mcp"):
        load_config(recipe(server), [*sets(), "openenv.mode=tools"])
