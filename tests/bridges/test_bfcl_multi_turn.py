"""The bfcl bridge's multi-turn categories: rows with user turns, the bfcl_api env (fresh API
instances per episode, calls by name, never eval), BFCL's multi-turn checks as the reward, and
rollout, eval and train through the CLI with gold and junk replies."""

from __future__ import annotations

import asyncio
import json

import pytest

INSTALL = "pip install --no-deps bfcl-eval==2026.3.23"
pytest.importorskip("bfcl_eval", reason=f"the bfcl bridge needs bfcl-eval: {INSTALL}")

from agentfly_cli.chat.templates import ChatTemplate  # noqa: E402
from agentfly_cli.recipes.loader import load_config  # noqa: E402
from agentfly_cli.trajectory import read_trajectories  # noqa: E402
from bridges_builtin.bfcl_api import keyword_arguments  # noqa: E402
from bridges_builtin.bfcl_api_env import BFCL_API  # noqa: E402
from bridges_builtin.bfcl_multi import gold_multi_turn, multi_turn_rows  # noqa: E402
from bridges_builtin.bfcl_multi_checks import score_episode  # noqa: E402
from tests.helpers.recipe_checks import agentfly, write_jsonl  # noqa: E402


@pytest.fixture(scope="module")
def rows():
    return multi_turn_rows("multi_turn_base")


def episode(turns: list[list[tuple]]) -> dict:
    """A saved trajectory whose user turn k made the calls ``turns[k]`` (one per assistant
    turn, then an answer)."""
    calls, delivered, turn = [], [], 0
    for k, made in enumerate(turns):
        for name, arguments in made:
            calls.append({"turn": turn, "name": name, "arguments": arguments, "status": "ok"})
            turn += 1
        if k < len(turns) - 1:
            delivered.append(turn)  # the answer's turn hands the floor on
        turn += 1
    return {"tool_calls": calls, "meta": {"user_turns": {"delivered_after": delivered}}}


def gold_turns(row: dict) -> list[list[tuple]]:
    classes = row["bfcl"]["involved_classes"]
    return [[keyword_arguments(classes, t) for t in turn] for turn in row["bfcl"]["ground_truth"]]


def test_rows_hold_user_turns_tools_and_the_initial_config(rows):
    assert len(rows) == 200
    row = rows[0]
    assert row["messages"][0]["role"] == "user"
    assert len(row["user_turns"]) == 3 and row["user_turns"][0]["after"] == "answer"
    assert row["bfcl"]["involved_classes"] == ["TwitterAPI", "GorillaFileSystem"]
    names = {t["function"]["name"] for t in row["tools"]}
    assert {"cd", "mkdir", "post_tweet"} <= names
    assert "GorillaFileSystem" in row["bfcl"]["initial_config"]
    assert len(multi_turn_rows("multi_turn_long_context")) == 200
    assert multi_turn_rows("multi_turn_long_context")[0]["bfcl"]["long_context"] is True


def test_miss_func_holds_its_function_back_until_the_turn_that_adds_it():
    row = multi_turn_rows("multi_turn_miss_func")[0]
    assert row["unlisted_tools"] == ["sort"]  # callable, but not rendered from the start
    assert "sort" in {t["function"]["name"] for t in row["tools"]}
    added = row["user_turns"][2]["content"]  # BFCL's turn 3: empty, then the held-out docs
    assert added.startswith("[{'name': 'sort'") and "I have updated some more functions" in added
    assert row["bfcl"]["ground_truth"][2] == []  # before it is added: nothing to call


def test_two_concurrent_episodes_of_one_entry_keep_their_own_state(rows):
    row = rows[0]

    async def both():
        a, b = BFCL_API.create(), BFCL_API.create()
        await asyncio.gather(a.reset(row), b.reset(row))
        first = await asyncio.gather(
            a.step({"tool": "cd", "arguments": {"folder": "document"}}),
            b.step({"tool": "cd", "arguments": {"folder": "document"}}),
        )
        made = await a.step({"tool": "mkdir", "arguments": {"dir_name": "temp"}})
        seen_a = await a.step({"tool": "ls", "arguments": {}})
        seen_b = await b.step({"tool": "ls", "arguments": {}})
        again = await b.step({"tool": "mkdir", "arguments": {"dir_name": "temp"}})
        await a.reset(None)  # what the pool does at release
        return first, made, seen_a, seen_b, again, a

    first, made, seen_a, seen_b, again, a = asyncio.run(both())
    assert first[0] == first[1]
    assert made["observation"] == "None"
    assert "temp" in seen_a["observation"] and "temp" not in seen_b["observation"]
    assert "Error" not in again["observation"]  # b never saw a's directory
    assert a.session is None  # the instances are dropped at release
    with pytest.raises(RuntimeError, match="not reset"):
        asyncio.run(a.step({"tool": "ls", "arguments": {}}))


def test_calls_are_invoked_by_name_never_evaluated(rows):
    async def run():
        env = BFCL_API.create()
        await env.reset(rows[0])
        return [
            await env.step({"tool": "cd", "arguments": {"folder": "__import__('os').getcwd()"}}),
            await env.step({"tool": "__import__", "arguments": {"name": "os"}}),
            await env.step({"tool": "exit", "arguments": {}}),
            await env.step({"tool": "cd", "arguments": {"nope": 1}}),
        ]

    code, builtin, refused, bad = (r["observation"] for r in asyncio.run(run()))
    assert "No such file or directory" in code  # the text is a folder name, not code run
    assert builtin == "Error during execution: name '__import__' is not defined"
    assert refused == "Error during execution: Function call exit is not allowed."
    assert bad.startswith("Error during execution:") and "nope" in bad


def test_the_checker_accepts_gold_and_names_what_a_wrong_sequence_got_wrong(rows):
    import bfcl_eval.eval_checker.multi_turn_eval.multi_turn_utils as utils

    row = rows[0]
    gold = gold_turns(row)
    assert score_episode(episode(gold), row["bfcl"])["reward"] == 1.0
    wrong_dir = [list(t) for t in gold]
    wrong_dir[0][1] = ("mkdir", {"dir_name": "tmp"})
    verdict = score_episode(episode(wrong_dir), row["bfcl"])
    assert (
        verdict["reward"] == 0.0 and verdict["error_type"] == "multi_turn:instance_state_mismatch"
    )
    no_grep = [list(t) for t in gold]
    no_grep[1] = [c for c in no_grep[1] if c[0] != "grep"]
    verdict = score_episode(episode(no_grep), row["bfcl"])
    assert verdict["error_type"] == "multi_turn:execution_response_mismatch"
    verdict = score_episode(episode([*gold[:2], [], *gold[3:]]), row["bfcl"])
    assert verdict["error_type"] == "multi_turn:empty_turn_model_response"
    verdict = score_episode(episode(gold[:2]), row["bfcl"])
    assert verdict["error_type"] == "multi_turn:force_terminated"
    assert not [k for k in vars(utils) if k.endswith("_instance")]  # BFCL's globals untouched


def _script(tmp_path, config, reply) -> str:
    lines = [json.loads(line) for line in open(config.data.path)]
    return str(
        write_jsonl(tmp_path / "s.jsonl", [{"id": r["id"], "responses": reply(r)} for r in lines])
    )


def _junk(row):  # a wrong call, then answers without calls
    return ['[mkdir(dir_name="junk")]'] + ["I am done."] * (len(row["user_turns"]) + 1)


@pytest.mark.parametrize(
    ("reply", "expected"),
    [(gold_multi_turn, 1.0), (_junk, 0.0), (lambda row: ["I cannot help."] * 8, 0.0)],
    ids=["gold", "junk", "no-call"],
)
def test_rollout_and_eval_with_gold_and_junk(tiny_model, tmp_path, reply, expected):
    recipe = "bfcl:multi_turn_base"
    config = load_config(recipe)
    common = ["--model", tiny_model, "--backend", "scripted", "--script",
              _script(tmp_path, config, reply), "--quiet",
              "--set", "rollout.max_total_tokens=32768"]  # tiny tokenizer: 11k prompts  # fmt: skip
    out = tmp_path / "rollout.jsonl"
    result = agentfly("rollout", recipe, "--limit", "3", "--n", "2", "--out", out, *common)
    assert result.exit_code == 0, result.output
    chains = read_trajectories(out)
    assert len(chains) == 6  # two chains of each task at once: each its own instances
    for chain in chains:
        chain.check()
        assert chain.reward == expected, (chain.task["id"], chain.reward_extras)
        delivered = chain.meta["user_turns"]["delivered_after"]
        if expected:
            assert len(delivered) == len(chain.task["user_turns"])
            assert all(c.status == "ok" for c in chain.tool_calls)
    evaluated = agentfly("eval", recipe, "--out", tmp_path / "eval.jsonl", "--json",
                         "--limit", "3", "--n", "1", *common)  # fmt: skip
    assert evaluated.exit_code == 0, evaluated.output
    assert json.loads(evaluated.stdout)["eval"]["overall"]["pass@1"] == expected


def test_miss_func_rollout_with_gold_shows_the_function_only_when_added(tiny_model, tmp_path):
    recipe = "bfcl:multi_turn_miss_func"
    script = _script(tmp_path, load_config(recipe), gold_multi_turn)
    out = tmp_path / "rollout.jsonl"
    result = agentfly("rollout", recipe, "--limit", "2", "--n", "1", "--out", out, "--model",
                      tiny_model, "--backend", "scripted", "--script", script, "--quiet",
                      "--set", "rollout.max_total_tokens=32768")  # fmt: skip
    assert result.exit_code == 0, result.output
    chat = ChatTemplate.load(str(tiny_model))
    for chain in read_trajectories(out):
        assert chain.reward == 1.0, (chain.task["id"], chain.reward_extras)
        unlisted = chain.task["unlisted_tools"]
        docs = [t["function"]["description"] for t in chain.task["tools"]
                if t["function"]["name"] in unlisted]  # fmt: skip
        first, whole = chat.decode(chain.ids[: chain.turns[0].end]), chat.decode(chain.ids)
        assert docs and all(d not in first and d in whole for d in docs)
        assert any(c.name in unlisted and c.status == "ok" for c in chain.tool_calls)


def test_train_takes_rl_steps(tiny_model, tmp_path):
    run = tmp_path / "run"
    result = agentfly(
        "train", "bfcl:multi_turn_base", "--model", tiny_model, "--out", run, "--quiet",
        "--set", "trainer.steps=2", "--set", "trainer.tasks_per_step=2", "--set", "rollout.n=2",
        "--set", "rollout.max_tokens_per_turn=8", "--set", "rollout.max_turns=3",
        "--set", "trainer.eval.every=0", "--set", "trainer.telemetry.sinks=[jsonl]",
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    lines = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    assert [line["step"] for line in lines] == [1, 2]


def test_recipes_check_passes():
    result = agentfly("recipes", "check", "bfcl:multi_turn_base", "--model", "tiny", "--limit", "8")
    assert result.exit_code == 0, result.output


def test_the_verdicts_agree_with_bfcls_own_multi_turn_checker(rows):
    """BFCL's multi_turn_checker (its globals, its eval) on the same calls gives the same
    verdict; its global instances are removed afterwards."""
    import bfcl_eval.eval_checker.multi_turn_eval.multi_turn_utils as utils
    from bfcl_eval.eval_checker.multi_turn_eval.multi_turn_checker import multi_turn_checker

    def bfcl_verdict(row, turns, key):
        decoded = [
            [[f"{n}({', '.join(f'{k}={v!r}' for k, v in a.items())})" for n, a in turn]]
            if turn else []
            for turn in turns
        ]  # fmt: skip
        entry = {"id": row["id"], "initial_config": row["bfcl"]["initial_config"],
                 "involved_classes": row["bfcl"]["involved_classes"]}  # fmt: skip
        try:
            return multi_turn_checker(
                decoded, row["bfcl"]["ground_truth"], entry, "multi_turn_base", key
            )
        finally:
            for name in [k for k in vars(utils) if k.startswith(key)]:
                delattr(utils, name)

    for number, row in enumerate(rows[:40]):
        gold = gold_turns(row)
        wrong = [list(t) for t in gold]
        wrong[-1] = wrong[-1][:-1]  # the last call of the last turn left out
        for label, turns in (("gold", gold), ("wrong", wrong)):
            ours = score_episode(episode(turns), row["bfcl"])
            theirs = bfcl_verdict(row, turns, f"agentfly_test_{label}_{number}")
            assert (ours["reward"] == 1.0) == theirs["valid"], (row["id"], label, ours, theirs)
            if not theirs["valid"]:
                assert ours["error_type"] == theirs["error_type"], (row["id"], label)
