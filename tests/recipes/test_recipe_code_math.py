"""The ``code_math`` recipe: the generated word problems (every answer checked by running its
solution in the sandbox), the python tool under the recipe's limits, the line protocol, the
math-verify reward, scripted and tiny-model rollouts, and a short training run."""

from __future__ import annotations

import asyncio
import json
import re
from collections import Counter
from pathlib import Path

import pytest

from agentfly_cli.chat.parsers import get_parser
from agentfly_cli.recipes.loader import load_config
from envs_builtin.python_sandbox import PythonSandboxEnv, python
from rewards_builtin.scoring import math_equal_score
from tests.helpers.paths import load_script
from tests.helpers.recipe_checks import (
    SOLUTION_ROWS,
    budget,
    check_packaged_solutions_score,
    check_short_training_run,
    check_tiny_model_rollout,
    json_call,
    needs_smollm2,
    scripted_rollout,
)
from tests.helpers.sandbox_modes import SANDBOX, SANDBOX_FLAGS

pytestmark = pytest.mark.filterwarnings("ignore::envs_builtin.python_sandbox.SandboxWarning")

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "agentfly_cli" / "recipes" / "data" / "code_math.jsonl"
ROWS = [json.loads(line) for line in DATA.read_text().splitlines() if line.strip()]
CONFIG = load_config("code_math")
OPTIONS = {**CONFIG.envs["python"].options, "sandbox": SANDBOX}  # the recipe's sandbox limits
FRACTION = next(r for r in ROWS if r["kind"] == "linear_equation" and "/" in r["answer"])
MONEY = next(r for r in ROWS if r["kind"] == "shopping")
SMALL_RUN = [
    "--set", "rollout.max_tokens_per_turn=96", "--set", "rollout.max_total_tokens=8192",
    *SANDBOX_FLAGS,
]  # fmt: skip


def run(coroutine):
    return asyncio.run(coroutine)


async def started() -> PythonSandboxEnv:
    env = PythonSandboxEnv(**OPTIONS)
    await env.start()
    await env.reset({})
    return env


# -- data ----------------------------------------------------------------------------------------
def test_packaged_problems_are_varied_and_exact():
    assert 200 <= len(ROWS) <= 400 and len({r["id"] for r in ROWS}) == len(ROWS)
    assert len({r["question"] for r in ROWS}) == len(ROWS)
    kinds = Counter(r["kind"] for r in ROWS)
    assert len(kinds) == 11 and set(kinds.values()) == {28}
    exact = re.compile(r"^-?\d+(\.\d+|/\d+)?$")  # an integer, a decimal or a fraction p/q
    assert all(exact.match(r["answer"]) for r in ROWS)
    assert sum("/" in r["answer"] for r in ROWS) >= 60  # fractions: math-verify matters
    assert all("\n" not in r["solution"] for r in ROWS)  # one PYTHON: line each


@pytest.mark.parametrize("limit", SOLUTION_ROWS)
def test_every_solution_prints_its_answer_in_the_sandbox(limit):
    """The scripted policy's code, run by the recipe's python env, prints a value that the
    reward accepts, for every task (the first ``limit``)."""
    rows = ROWS[:limit]

    async def main():
        env = await started()
        outputs = []
        for row in rows:
            await env.reset(row)
            outputs.append(await env.step({"code": row["solution"]}))
        await env.close()
        return outputs

    outputs = run(main())
    wrong = [
        (row["id"], out)
        for row, out in zip(rows, outputs, strict=True)
        if math_equal_score(out, row["answer"]) != 1.0
    ]
    assert not wrong


def test_the_generator_rebuilds_the_packaged_file():
    module = load_script("scripts/make_code_math_data.py")
    assert module.rows() == ROWS
    assert module.show(module.Fraction(7, 12)) == "7/12"
    assert module.show(module.Fraction(-51, 4), decimal=True) == "-12.75"
    assert module.show(module.Fraction(1, 3), decimal=True) == "1/3"


@pytest.mark.parametrize(
    ("prediction", "gold", "expected"),
    [
        ("7/12", "7/12", 1.0),
        ("14/24", "7/12", 1.0),
        ("0.5833333333333334", "7/12", 1.0),
        ("0.58", "7/12", 0.0),  # rounded too early
        ("x = -21/11", "-21/11", 1.0),
        ("9.950000000000001", "9.95", 1.0),  # float noise from 3*2.45 + 2*1.30
        ("$31.08", "31.08", 1.0),
        ("31", "31.08", 0.0),
        ("Fraction(7, 12)", "7/12", 0.0),  # a repr, not a number: the prompt asks to print
        ("", "7/12", 0.0),
    ],
)
def test_math_equal_on_the_answer_forms(prediction, gold, expected):
    assert math_equal_score(prediction, gold) == expected


# -- the line protocol and the python tool under the recipe's limits -----------------------------
def test_a_python_line_is_one_cell_and_answer_ends_it():
    parser = get_parser(CONFIG.chat.parser, CONFIG.chat.parser_options)
    parsed = parser.parse("PYTHON: a = 3; b = 4; print(a * b)")
    (call,) = parsed.calls
    assert (call.name, call.arguments) == ("python", {"code": "a = 3; b = 4; print(a * b)"})
    (answer,) = parser.parse("ANSWER: 12").calls
    assert (answer.name, answer.arguments) == ("answer", {"answer": "12"})
    assert parser.parse("PYTHON:").errors  # a command needs its code on the same line


def test_python_tool_keeps_state_shows_errors_and_resets():
    async def main():
        env = await started()
        assert (await python(env=env, code="from fractions import Fraction as F; x = F(1, 3)")).ok
        result = await python(env=env, code="print(x + F(1, 4)); x * 3")
        # what it printed, then the final expression's repr (hence: the prompt asks to print)
        assert result.ok and result.observation == "7/12\nFraction(1, 1)"
        error = await python(env=env, code="y + 1")
        assert error.ok and error.observation.endswith("NameError: name 'y' is not defined")
        syntax = await python(env=env, code="print(1 +")
        assert "SyntaxError" in syntax.observation
        big = await python(env=env, code="b = bytearray(1 << 30)")  # over memory_mb (512)
        assert "MemoryError" in big.observation
        flood = await python(env=env, code="print('x' * 5000)")  # over max_output_chars
        assert "[output truncated:" in flood.observation and len(flood.observation) < 1200
        await env.reset({})  # a new task: a fresh namespace
        gone = await python(env=env, code="x")
        assert "NameError" in gone.observation
        await env.close()

    run(main())


# -- rollouts and training through the CLI -----------------------------------------------------
def test_scripted_policy_gets_max_and_min_reward(tiny_model, tmp_path):
    rows = [FRACTION, MONEY, FRACTION]
    script = [
        {"responses": [f"PYTHON: {FRACTION['solution']}", f"ANSWER: {FRACTION['answer']}"]},
        {  # state across turns, float arithmetic, then the number as printed
            "responses": [
                "PYTHON: " + MONEY["solution"].replace("print(", "total = (", 1),
                "PYTHON: print(total)",
                f"ANSWER: {MONEY['answer']}",
            ]
        },
        {"responses": ["PYTHON: 1/0", "ANSWER: 12345"]},  # an error, then a wrong answer
    ]
    trajectories = scripted_rollout(
        "code_math", tiny_model, tmp_path, script, rows,
        "--n", "2", *SMALL_RUN,
    )  # fmt: skip
    assert len(trajectories) == 6
    for trajectory in trajectories:
        trajectory.check()
        assert trajectory.finish_reason == "terminal_tool"
    assert [t.reward for t in trajectories] == [1.0, 1.0, 1.0, 1.0, 0.0, 0.0]
    solved = trajectories[0]
    assert [c.name for c in solved.tool_calls] == ["python", "answer"]
    assert solved.tool_calls[0].observation == FRACTION["answer"]
    assert len(trajectories[2].tool_calls) == 3
    failed = trajectories[4].tool_calls[0]
    assert failed.status == "ok" and "ZeroDivisionError" in failed.observation


def test_json_tool_calls_run_multi_line_code(tiny_model, tmp_path):
    """With a JSON-calling model (hermes parser, no stop at the first newline) a cell may hold
    several lines of code."""
    code = "from fractions import Fraction\nx = Fraction(6, 5)\nprint(3 * x + 4 == 10 - 2 * x, x)"
    script = [{"responses": [json_call("python", code=code), json_call("answer", answer="6/5")]}]
    row = {"question": "Find x if 3x + 4 = 10 - 2x.", "answer": "6/5"}
    (trajectory,) = scripted_rollout(
        "code_math", tiny_model, tmp_path, script, [row],
        "--parser", "hermes", "--n", "1", *SMALL_RUN, "--set", "rollout.stop=[]",
    )  # fmt: skip
    assert [c.name for c in trajectory.tool_calls] == ["python", "answer"]
    assert trajectory.tool_calls[0].observation.strip() == "True 6/5"
    assert trajectory.finish_reason == "terminal_tool" and trajectory.reward == 1.0


def test_tiny_model_rollout_gives_valid_trajectories(tiny_model, tmp_path):
    check_tiny_model_rollout("code_math", tiny_model, tmp_path, *budget(8192), *SANDBOX_FLAGS)


def test_short_training_run_completes(tiny_model, tmp_path):
    check_short_training_run("code_math", tiny_model, tmp_path, *budget(8192), *SANDBOX_FLAGS)


@needs_smollm2
@pytest.mark.parametrize("limit", SOLUTION_ROWS)
def test_every_packaged_solution_scores_under_the_recipe_settings(tmp_path, limit):
    """The recipe's own budgets (per turn, per chain) hold its longest solution lines in
    SmolLM2's tokens: the percentages kind once ran past a 48-token turn."""
    script = [{"responses": [f"PYTHON: {r['solution']}", f"ANSWER: {r['answer']}"]} for r in ROWS]
    check_packaged_solutions_score("code_math", script, tmp_path, limit, *SANDBOX_FLAGS)
